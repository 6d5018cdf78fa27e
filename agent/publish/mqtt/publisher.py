"""MQTT publisher: per-joint retained health, full reports, and the agent's online/offline status,
QoS 1, through a store-and-forward outbox on disk (agent.publish.mqtt.outbox).

Threads, and why: paho's network loop (agent.publish.mqtt.connection) and the outbox sender
(agent.publish.mqtt.sender) run in two threads of their own, so the daemon's event loop never
waits on the broker. `publish()` only builds the report's messages (agent.publish.mqtt.payloads)
and writes them to the outbox (in an executor thread: the write fsyncs), then wakes the sender.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.config.mqtt import MqttSettings
from agent.publish.base import HealthPublisher
from agent.publish.mqtt.connection import BrokerConnection
from agent.publish.mqtt.outbox import OUTBOX_FILE, Outbox, OutboxStats
from agent.publish.mqtt.payloads import default_client_id, status_topic
from agent.publish.mqtt.queueing import queue_report
from agent.publish.mqtt.security import read_password_file, tls_context
from agent.publish.mqtt.sender import OutboxSender
from agent.report.model import Report

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MqttStats:
    """Counters of this process (the outbox's own counters survive restarts)."""

    connected: bool
    connects: int
    handed: int  # messages given to paho to send
    acknowledged: int  # PUBACKs of outbox messages
    queued: int  # messages in the outbox now (sent but not acknowledged included)
    payload_bytes: int
    dropped_total: int
    superseded_total: int
    too_large: int  # messages refused at queueing: payload over max_payload_bytes
    last_error: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class MqttPublisher(HealthPublisher):
    name = "mqtt"

    def __init__(self, settings: MqttSettings, state_dir: str | Path) -> None:
        self.settings = settings
        self.client_id = settings.client_id or default_client_id()
        self.outbox_path = Path(state_dir) / OUTBOX_FILE
        # Both raise ConfigError now, at construction: a bad password file or CA stops the
        # daemon's start with a clear message instead of failing every reconnect later.
        password = read_password_file(settings.password_file) if settings.password_file else None
        self._has_password = password is not None
        self.status_topic = status_topic(settings.topic_prefix, self.client_id)
        self._sender = OutboxSender(settings.max_inflight)
        self._link = BrokerConnection(
            settings,
            self.client_id,
            self.status_topic,
            password,
            tls_context(settings),
            self._sender,
        )
        self._outbox: Outbox | None = None
        self._closed = False
        self._final: OutboxStats | None = None  # the outbox as close() left it
        self._too_large = 0

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"MqttPublisher(host={s.host!r}, port={s.port}, client_id={self.client_id!r}, "
            f"tls={s.tls}, username={s.username!r})"
        )

    # -- the HealthPublisher interface ---------------------------------------------------------

    async def start(self) -> None:
        if self._outbox is not None:
            return
        s = self.settings
        self._outbox = await asyncio.to_thread(
            Outbox, self.outbox_path, s.outbox.max_messages, s.outbox.max_bytes
        )
        stats = self._outbox.stats()
        log.info(
            "event=mqtt_start host=%s port=%d client_id=%s tls=%s queued=%d outbox=%s",
            s.host,
            s.port,
            self.client_id,
            s.tls,
            stats.messages,
            self.outbox_path,
        )
        if not s.tls and self._has_password:
            log.warning(
                'event=mqtt_plaintext_password host=%s warning="tls is off: the '
                'password crosses the network in clear text"',
                s.host,
            )
        self._link.start()
        self._sender.start(self._outbox, self._link)

    async def publish(self, report: Report) -> None:
        """Queue the report's messages durably (raises OutboxError if the disk refuses)."""
        if self._outbox is None or self._closed:
            raise RuntimeError("MqttPublisher.publish() outside start() ... close()")
        queued = await asyncio.to_thread(
            queue_report, self._outbox, report, self.settings, self.client_id
        )
        self._too_large += queued.too_large
        self._sender.queued()
        queued.log()

    async def close(self) -> None:
        await asyncio.to_thread(self.close_blocking)

    # -- for the daemon's status, tests and benchmarks -----------------------------------------

    def stats(self) -> MqttStats:
        box = self._final
        if box is None and self._outbox is not None and not self._closed:
            box = self._outbox.stats()
        return MqttStats(
            connected=self._link.connected.is_set(),
            connects=self._link.connects,
            handed=self._sender.handed,
            acknowledged=self._sender.acknowledged_total,
            queued=0 if box is None else box.messages,
            payload_bytes=0 if box is None else box.payload_bytes,
            dropped_total=0 if box is None else box.dropped_total,
            superseded_total=0 if box is None else box.superseded_total,
            too_large=self._too_large,
            last_error=self._link.last_error,
        )

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until every queued message is acknowledged; False on timeout."""
        return self._sender.idle.wait(timeout_s)

    def wait_connected(self, timeout_s: float) -> bool:
        return self._link.connected.wait(timeout_s)

    def unprocessed_acks(self) -> int:
        """PUBACKs received whose outbox rows are not deleted yet (0 once the sender caught up:
        after a disconnect, the outbox then holds exactly what the broker did not confirm)."""
        return self._sender.unprocessed_acks()

    def close_blocking(self) -> None:
        """Flush for up to close_timeout_s, publish "offline", disconnect, close the outbox.
        What is not acknowledged by then stays in the outbox for the next start."""
        if self._closed or self._outbox is None:
            self._closed = True
            return
        deadline = time.monotonic() + self.settings.close_timeout_s
        if self._link.connected.is_set():
            self._sender.idle.wait(max(0.0, deadline - time.monotonic()))
        self._sender.stop()
        offline_sent = False
        if self._link.connected.is_set():
            offline_sent = self._link.publish_offline(max(0.5, deadline - time.monotonic()))
        self._link.stop()
        self._sender.take_acks(self._outbox)
        self._final = self._outbox.stats()
        self._outbox.close()
        self._closed = True
        log.info(
            "event=mqtt_closed offline_published=%s queued_left=%d",
            str(offline_sent).lower(),
            self._final.messages,
        )
