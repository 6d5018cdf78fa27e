"""The agent's own state as Prometheus gauges, read at each scrape: the MQTT outbox depth and the
systemd watchdog's lateness (the exporter's joint metrics come from reports instead).

Read at scrape time, not at report time: the outbox drains and the event loop stalls between two
reports, and those are what an operator's alert needs to see. A gauge whose source is absent
(no MQTT configured, no watchdog asked for) is left out rather than exported as 0, which would
read as "all is well"; a source that fails is logged and left out of that scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.logfmt import kv
from agent.publish.base import WatchdogProbe

log = logging.getLogger(__name__)


class AgentCollector(Collector):
    """Runs in prometheus_client's server thread: the sources must be safe to read from it
    (the outbox is behind its own lock, the Notifier's lateness behind one too)."""

    def __init__(self, outbox_depth: Callable[[], int] | None = None) -> None:
        self.outbox_depth = outbox_depth
        self.watchdog: WatchdogProbe | None = None

    def describe(self) -> list[Metric]:
        # Nothing up front: registering must not call the sources before the daemon started.
        return []

    def collect(self) -> Iterator[Metric]:
        if self.outbox_depth is not None:
            try:
                depth = self.outbox_depth()
            except Exception as exc:  # a scrape must not fail for one source
                log.warning(kv("metrics_source_failed", metric="outbox", error=str(exc)))
            else:
                yield GaugeMetricFamily(
                    "jha_mqtt_outbox_messages",
                    "MQTT messages in the outbox, not yet acknowledged by the broker",
                    value=depth,
                )
        probe = self.watchdog
        if probe is None or probe.watchdog_s is None:
            return
        yield GaugeMetricFamily(
            "jha_watchdog_timeout_seconds",
            "the systemd watchdog timeout (WatchdogSec) the agent pings within",
            value=probe.watchdog_s,
        )
        late = probe.lateness_s()
        if late is not None:
            yield GaugeMetricFamily(
                "jha_watchdog_lateness_seconds",
                "how late the watchdog pings came: the worst of the last minute, or how overdue "
                "the next one is now",
                value=late,
            )
