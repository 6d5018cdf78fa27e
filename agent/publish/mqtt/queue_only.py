"""The MQTT publisher's outbox without its broker link: what the daemon runs in the publisher's
place when the link cannot be made (a password file systemd has not handed over yet, a TLS file
gone since the check, paho missing). Reports are queued exactly as the publisher queues them
(agent.publish.mqtt.queueing), so none is lost: the next daemon whose publisher starts sends
them, in order. Nothing of the broker link is imported here.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from agent.config.mqtt import MqttSettings
from agent.logfmt import kv
from agent.publish.base import HealthPublisher
from agent.publish.mqtt.outbox import OUTBOX_FILE, Outbox
from agent.publish.mqtt.payloads import default_client_id
from agent.publish.mqtt.queueing import queue_report
from agent.report.model import Report

log = logging.getLogger(__name__)


class QueueOnlyPublisher(HealthPublisher):
    name = "mqtt"

    def __init__(self, settings: MqttSettings, state_dir: str | Path, why: str) -> None:
        """`why`: what kept the broker link from being made, repeated with every report."""
        self.settings = settings
        self.client_id = settings.client_id or default_client_id()
        self.outbox_path = Path(state_dir) / OUTBOX_FILE
        self.why = why
        self._outbox: Outbox | None = None

    async def start(self) -> None:
        s = self.settings
        self._outbox = await asyncio.to_thread(
            Outbox, self.outbox_path, s.outbox.max_messages, s.outbox.max_bytes
        )
        log.error(
            kv(
                "mqtt_queue_only",
                host=s.host,
                outbox=str(self.outbox_path),
                queued=len(self._outbox),
                reason=self.why,
                action="reports are kept in the outbox and sent once the MQTT publisher starts",
            )
        )

    async def publish(self, report: Report) -> None:
        if self._outbox is None:
            raise RuntimeError("QueueOnlyPublisher.publish() before start()")
        queued = await asyncio.to_thread(
            queue_report, self._outbox, report, self.settings, self.client_id
        )
        queued.log()
        log.warning(kv("mqtt_not_sent", queued=len(self._outbox), reason=self.why))

    def queued_messages(self) -> int:
        """Messages in the outbox (for the metrics endpoint); 0 before start and after close."""
        outbox = self._outbox
        return 0 if outbox is None else len(outbox)

    async def close(self) -> None:
        if self._outbox is not None:
            await asyncio.to_thread(self._outbox.close)
            self._outbox = None
