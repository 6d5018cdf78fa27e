"""What the MQTT tests publish and how they listen: reports of cycle n whose backlash grows
with n, the publisher's settings for a test broker, and a QoS 1 subscriber that records every
message. Used by tests/publish/, tests/faults/test_broker_flap.py and bench/bench_mqtt.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from agent.config.model import ThresholdSettings
from agent.config.mqtt import MqttSettings
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import TrendPoint
from agent.report.model import Report, joint_report
from tests.peers.mosquitto_broker import (
    wait_until,
)

T0 = datetime(2024, 3, 1, 6, 0, tzinfo=UTC)
LIMITS = ThresholdSettings(backlash_watch_rad=1e-3, backlash_alert_rad=2e-3)


def result(backlash: float) -> BacklashResult:
    return BacklashResult(
        amplitude_rad_s=0.05,
        backlash_rad=backlash,
        rmse_rad_s=0.004,
        residual_rms_rad_s=0.02,
        params={},
        evaluations=10,
        restarts=0,
        converged=True,
        stop_reason="tolfun",
        fit_seconds=0.1,
        seed=0,
        period_metadata_s=1.0,
        period_estimated_s=1.0,
        period_mismatch=None,
    )


def cycle_report(n: int) -> Report:
    """The report of cycle n: two joints of robot1 whose backlash grows with n."""
    at = (T0 + timedelta(hours=n)).isoformat()
    history = [TrendPoint(at, 5e-4 + 1e-5 * n)]
    joints = tuple(
        joint_report("robot1", j, result(5e-4 + 1e-5 * n), LIMITS, history) for j in ("J1", "J2")
    )
    return Report(at, ("robot1",), joints, host="edge")


def settings_for(port: int, **more: Any) -> MqttSettings:
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "tls": False,
        "client_id": "jha-test",
        "reconnect_min_s": 0.05,
        "reconnect_max_s": 0.2,
        "close_timeout_s": 5.0,
    }
    base.update(more)
    return MqttSettings(**base)


class Subscriber:
    """A QoS 1 subscriber recording every message it gets (duplicates included)."""

    def __init__(
        self,
        port: int,
        *,
        client_id: str = "counter",
        clean: bool = True,
        topic: str = "jha/#",
    ) -> None:
        self.lock = threading.Lock()
        self.messages: list[tuple[str, bool, dict[str, Any]]] = []
        self.subscribed = threading.Event()
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean
        )
        self.client.reconnect_delay_set(0.05, 0.3)
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self.subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port, keepalive=10)
        self.client.loop_start()
        assert self.subscribed.wait(10), "subscriber never subscribed"

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        with self.lock:
            self.messages.append((msg.topic, bool(msg.retain), json.loads(msg.payload)))

    def ids(self, kind_suffix: str = "/report") -> list[str]:
        with self.lock:
            return [d["message_id"] for t, _, d in self.messages if t.endswith(kind_suffix)]

    def on(self, topic: str) -> list[dict[str, Any]]:
        with self.lock:
            return [d for t, _, d in self.messages if t == topic]

    def wait(self, condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
        wait_until(condition, timeout_s, what)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
