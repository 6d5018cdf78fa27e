"""Joint health as Prometheus metrics, on an opt-in HTTP endpoint (`publish.prometheus`).

What a plant's Grafana needs from an agent, each labelled by controller and joint:
- `jha_joint_status{status=...}` and `jha_joint_ne107{signal=...}`: 1 for the joint's state,
  0 for the others (the state-set pattern, so an alert rule is `== 1`, never a magic number);
- `jha_joint_indicator{indicator, unit}`: the latest judged value and every other indicator's
  latest value, in SI units as the history holds them;
- `jha_cycles_total{outcome}`: cycles that reached a report, by how they ended (ok, aborted,
  rejected, error);
- `jha_last_report_timestamp_seconds`: when the controller's last report was written (the age
  of the newest measurement is `time() - jha_last_report_timestamp_seconds`).
The values come from the reports the daemon hands every publisher; nothing here reads the
controller. The server is prometheus_client's own (a thread), bound to the configured address.

And the agent itself, read at each scrape (agent.publish.prometheus.agent_metrics):
- `jha_mqtt_outbox_messages`: messages in the MQTT outbox not yet acknowledged by the broker
  (grows while the broker is away; with MQTT configured);
- `jha_watchdog_lateness_seconds`: how late the systemd watchdog pings came, the worst of the
  last minute or how overdue the next one is now, and `jha_watchdog_timeout_seconds`, systemd's
  timeout (under systemd with WatchdogSec; a lateness near the timeout is a restart coming).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge

from agent.config.prometheus import PrometheusSettings
from agent.health.status import Ne107, Status
from agent.logfmt import kv
from agent.publish.base import HealthPublisher, WatchdogProbe
from agent.publish.prometheus.agent_metrics import AgentCollector
from agent.publish.prometheus.server import BoundedMetricsServer, start_metrics_server
from agent.report.model import Report

log = logging.getLogger(__name__)


class PrometheusExporter(HealthPublisher):
    name = "prometheus"

    def __init__(
        self, settings: PrometheusSettings, outbox_depth: Callable[[], int] | None = None
    ) -> None:
        """`outbox_depth`: the MQTT publisher's count of messages waiting in its outbox."""
        self.settings = settings
        self.registry = CollectorRegistry()
        self.agent = AgentCollector(outbox_depth)
        self.registry.register(self.agent)
        labels = ["controller", "joint"]
        self.status = Gauge(
            "jha_joint_status", "1 for the joint's status, 0 for the others",
            [*labels, "status"], registry=self.registry,
        )  # fmt: skip
        self.ne107 = Gauge(
            "jha_joint_ne107", "1 for the joint's NAMUR NE 107 signal, 0 for the others",
            [*labels, "signal"], registry=self.registry,
        )  # fmt: skip
        self.indicator = Gauge(
            "jha_joint_indicator", "latest value of a joint's health indicator (SI units)",
            [*labels, "indicator", "unit"], registry=self.registry,
        )  # fmt: skip
        self.cycles = Counter(
            "jha_cycles", "test cycles that reached a report, by how they ended",
            ["controller", "outcome"], registry=self.registry,
        )  # fmt: skip
        self.last_report = Gauge(
            "jha_last_report_timestamp_seconds", "when the controller's last report was written",
            ["controller"], registry=self.registry,
        )  # fmt: skip
        self._server: BoundedMetricsServer | None = None

    def watch_watchdog(self, probe: WatchdogProbe) -> None:
        self.agent.watchdog = probe

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the kernel's pick for port 0)."""
        return int(self._server.server_port) if self._server is not None else self.settings.port

    async def start(self) -> None:
        s = self.settings
        self._server = start_metrics_server(
            self.registry, s.listen, s.port, s.max_connections, s.request_timeout_s
        )
        log.info(kv("prometheus_listening", address=self.settings.listen, port=self.port))

    async def publish(self, report: Report) -> None:
        created = datetime.fromisoformat(report.created_at_iso).timestamp()
        for machine in report.machines:
            self.last_report.labels(machine).set(created)
        judged = [(jr, True) for jr in report.joints]
        for jr, counted in [*judged, *((jr, False) for jr in report.indicator_joints)]:
            ids = (jr.controller, jr.joint)
            for status in Status:
                self.status.labels(*ids, status.value).set(1.0 if jr.status == status else 0.0)
            for signal in Ne107:
                self.ne107.labels(*ids, signal.value).set(1.0 if jr.signal == signal else 0.0)
            value = jr.value
            if value is not None and not jr.indicator_only:
                self.indicator.labels(*ids, jr.indicator_name, _unit(jr.indicator_name)).set(value)
            for ind in jr.indicators:
                if ind.latest is not None:
                    self.indicator.labels(*ids, ind.indicator, ind.unit).set(ind.latest.value)
            if jr.outcome is not None and counted:
                self.cycles.labels(jr.controller, jr.outcome).inc()

    async def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _unit(indicator: str) -> str:
    return {"backlash_rad": "rad", "amplitude_rad_s": "rad/s"}.get(indicator, "")
