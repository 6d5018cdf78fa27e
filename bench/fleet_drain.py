"""Baselines of the fleet benchmark (bench_fleet), measured in the same run on the same burst:
a persistent session that only acknowledges what it receives (no parsing, no database), once
with the fleet's own MQTT session (agent.fleet.mqtt_session) and once with paho-mqtt (what the
fleet used before). Their rates are the transport's ceiling on this machine; the ingest's rate
is then also given as a share of it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from agent.fleet.mqtt_session import Delivery, SubscriberSession
from agent.fleet.settings import BrokerSettings

FILTERS = ["jha/+/report", "jha/+/+/health", "jha/agent/+/status"]
KINDS = ("fleet session", "paho")


class _Drain:
    def __init__(self, kind: str, port: int, client_id: str, expected: int) -> None:
        self.kind = kind
        self.port = port
        self.client_id = client_id
        self.expected = expected
        self.count = 0
        self.done = threading.Event()

    def run(self, timeout_s: float = 300) -> float:
        """Seconds from connecting to the last of `expected` messages acknowledged."""
        began = time.perf_counter()
        stop, _ = self._start()
        try:
            if not self.done.wait(timeout_s):
                raise AssertionError(f"{self.kind}: {self.count} of {self.expected} messages")
            return time.perf_counter() - began
        finally:
            stop()

    def _got(self, n: int) -> None:
        self.count += n
        if self.count >= self.expected:
            self.done.set()

    def _start(self) -> tuple[Any, threading.Event]:
        """Connect; (how to stop, set once the broker confirmed the subscription)."""
        if self.kind == "paho":
            return self._start_paho()
        settings = BrokerSettings(
            host="127.0.0.1", client_id=self.client_id, port=self.port, tls=False
        )
        session: SubscriberSession

        def on_messages(batch: list[Delivery]) -> None:
            session.ack(batch[0].generation, [d.packet_id for d in batch if d.qos])
            self._got(len(batch))

        session = SubscriberSession(settings, None, FILTERS, on_messages, 4 << 20, None)
        session.start()
        return session.stop, session.subscribed

    def _start_paho(self) -> tuple[Any, threading.Event]:
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=paho.MQTTv5,
            manual_ack=True,
        )

        def on_message(c: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
            c.ack(msg.mid, msg.qos)
            self._got(1)

        subscribed = threading.Event()
        client.on_message = on_message
        client.on_connect = lambda c, *a: c.subscribe([(f, 1) for f in FILTERS])
        client.on_subscribe = lambda *a: subscribed.set()
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 0xFFFFFFFF
        props.ReceiveMaximum = 1000
        client.connect("127.0.0.1", self.port, clean_start=False, properties=props)
        client.loop_start()

        def stop() -> None:
            client.disconnect()
            client.loop_stop()

        return stop, subscribed


def subscribe(port: int, kind: str, client_id: str) -> None:
    """Create the persistent session and its subscription, then leave (before the outage)."""
    stop, subscribed = _Drain(kind, port, client_id, expected=1)._start()
    try:
        if not subscribed.wait(10):
            raise AssertionError(f"{kind}: the broker did not confirm the subscription")
    finally:
        stop()


def drain_rate(port: int, kind: str, client_id: str, messages: int) -> float:
    """Messages per second at which the session's queued burst is received and acknowledged."""
    return messages / _Drain(kind, port, client_id, messages).run()
