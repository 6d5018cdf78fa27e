"""The MQTT wire contract between the agents (agent.publish.mqtt.payloads, agent.report.model)
and the fleet (agent.fleet.messages), in one place both may import: the fleet must not load the
agent's report model (numpy), and the two must never disagree on a name or a bound.

A major version changes meanings; keys are only ever added within one.
"""

from __future__ import annotations

REPORT_FAMILY = "jha.report"
HEALTH_FAMILY = "jha.health"
STATUS_FAMILY = "jha.agent_status"
MAJOR = "1"

REPORT_SCHEMA = f"{REPORT_FAMILY}/{MAJOR}"
HEALTH_SCHEMA = f"{HEALTH_FAMILY}/{MAJOR}"
STATUS_SCHEMA = f"{STATUS_FAMILY}/{MAJOR}"

# The judged indicator's newest points in each health message (the fleet's sparkline reads
# no more).
HEALTH_HISTORY_POINTS = 32
