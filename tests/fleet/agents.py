"""Simulated agents for the fleet tests, the demo and the benchmark: reports built by the agent's
own report model (agent.report.model) and sent by its own publisher (agent.publish.mqtt) or as
the exact messages its payload builder makes (agent.publish.mqtt.payloads.report_messages).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from agent.config.model import ThresholdSettings
from agent.health.status import TrendPoint
from agent.publish.mqtt.message import OutMessage
from agent.publish.mqtt.payloads import report_messages
from agent.publish.mqtt.publisher import MqttPublisher
from agent.report.model import Report, joint_report
from tests.support.publish.mqtt import result, settings_for

LIMITS = ThresholdSettings(backlash_watch_rad=1e-3, backlash_alert_rad=2e-3)


def machine_report(
    machine: str,
    joints: Mapping[str, Sequence[float]],
    end: datetime | None = None,
    host: str = "edge",
) -> Report:
    """One agent's report: each joint's backlash history, one point a day up to `end` (the last
    value is this cycle's estimate, judged against watch 1 mrad and alert 2 mrad)."""
    end = end or datetime.now(UTC)
    built = []
    for joint, values in joints.items():
        history = [
            TrendPoint((end - timedelta(days=len(values) - 1 - i)).isoformat(), v)
            for i, v in enumerate(values)
        ]
        built.append(joint_report(machine, joint, result(values[-1]), LIMITS, history))
    return Report(end.isoformat(), (machine,), tuple(built), host=host)


def publish_reports(port: int, state_dir: Path, reports: Sequence[Report], **settings: Any) -> None:
    """Send `reports` through the agent's MqttPublisher and wait until the broker has them all."""

    async def run() -> None:
        pub = MqttPublisher(settings_for(port, **settings), state_dir)
        await pub.start()
        for r in reports:
            await pub.publish(r)
        assert await asyncio.to_thread(pub.wait_idle, 60), "the agent's outbox did not drain"
        await pub.close()

    asyncio.run(run())


def messages_of(report: Report, prefix: str = "jha") -> tuple[OutMessage, ...]:
    return report_messages(report, prefix, datetime.now(UTC).isoformat())


class RawPublisher:
    """A bare QoS 1 client, for exact messages (the agent's, repeated, or hostile ones)."""

    def __init__(
        self,
        port: int,
        client_id: str = "raw-publisher",
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
        if credentials is not None:
            self.client.username_pw_set(*credentials)
        self.client.max_inflight_messages_set(1000)  # for send_pipelined; send waits for each
        connected = threading.Event()
        self.client.on_connect = lambda *a: connected.set()
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        assert connected.wait(10), "raw publisher did not connect"

    def send(self, topic: str, payload: bytes, retain: bool = False) -> None:
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        info.wait_for_publish(10)
        assert info.is_published(), f"broker did not acknowledge {topic}"

    def offer(self, topic: str, payload: bytes, retain: bool = False, wait_s: float = 3.0) -> bool:
        """Publish without insisting: whether the broker acknowledged within wait_s (a broker
        may drop a message silently, or close the connection)."""
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        try:
            info.wait_for_publish(wait_s)
        except (RuntimeError, ValueError):  # paho: the connection went away
            return False
        return info.is_published()

    def retained(self, topic: str, wait_s: float = 1.0) -> bytes | None:
        """The broker's retained message on `topic` (None when it keeps none)."""
        got: list[bytes] = []
        arrived = threading.Event()

        def on_message(client: Any, userdata: Any, message: Any) -> None:
            got.append(bytes(message.payload))
            arrived.set()

        self.client.on_message = on_message
        self.client.subscribe(topic, qos=1)
        arrived.wait(wait_s)
        self.client.unsubscribe(topic)
        return got[0] if got else None

    def send_messages(self, messages: Sequence[OutMessage]) -> None:
        for m in messages:
            self.send(m.topic, m.payload, m.retain)

    def send_pipelined(self, messages: Sequence[OutMessage], timeout_s: float = 300) -> None:
        """Every message handed over at once (up to 1,000 unacknowledged), then waited for."""
        infos = [self.client.publish(m.topic, m.payload, qos=1, retain=m.retain) for m in messages]
        for info in infos:
            info.wait_for_publish(timeout_s)
            assert info.is_published(), "broker did not acknowledge a message"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def payload(messages: Sequence[OutMessage], index: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(messages[index].payload)
    return doc
