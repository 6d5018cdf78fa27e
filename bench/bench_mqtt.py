"""MQTT publisher throughput against a local mosquitto.

1. Queueing: reports/s through `publish()` (each is one fsync'd SQLite commit of a report plus
   the health of its 2 joints) with no broker reachable.
2. Draining that backlog: messages/s from the outbox to a subscriber once the broker is up
   (PUBACK-confirmed and deleted one by one, `max_inflight` 20).
3. Latency: publish() to arrival at the subscriber, one report at a time on a live connection
   (median and 95th percentile).

Full: 2,000 reports (quick: 200).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from agent.config.mqtt import MqttSettings
from agent.publish.mqtt.publisher import MqttPublisher
from tests.peers.mosquitto_broker import MosquittoBroker, free_port, wait_until
from tests.support.publish.mqtt import cycle_report


class _Counter:
    def __init__(self, port: int) -> None:
        self.reports = 0
        self.arrived: dict[str, float] = {}
        self.lock = threading.Lock()
        subscribed = threading.Event()
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id="bench-sub")
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe("jha/+/report", qos=1)
        self.client.on_subscribe = lambda c, u, mid, rcs, p: subscribed.set()
        self.client.on_message = self._on_message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        if not subscribed.wait(10):
            raise RuntimeError("bench subscriber did not subscribe")

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        with self.lock:
            self.reports += 1
            self.arrived[msg.payload[-160:].decode(errors="replace")] = time.perf_counter()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _settings(port: int) -> MqttSettings:
    return MqttSettings(
        host="127.0.0.1",
        port=port,
        tls=False,
        client_id="bench",
        reconnect_min_s=0.05,
        reconnect_max_s=0.2,
    )


async def _run(n: int, work: Path) -> None:
    port = free_port()
    pub = MqttPublisher(_settings(port), work / "state")
    await pub.start()
    t0 = time.perf_counter()
    for i in range(n):
        await pub.publish(cycle_report(i))
    queue_s = time.perf_counter() - t0
    stats = pub.stats()
    print(
        f"queued {n} reports ({stats.queued} messages, {stats.payload_bytes / 1e3:.0f} kB) "
        f"in {queue_s:.2f} s: {n / queue_s:.0f} reports/s, no broker"
    )
    with MosquittoBroker(work / "broker", port=port):
        sub = _Counter(port)
        t0 = time.perf_counter()
        if not await asyncio.to_thread(pub.wait_idle, 300):
            raise RuntimeError("backlog not drained in 300 s")
        await asyncio.to_thread(wait_until, lambda: sub.reports >= n, 60, "reports")
        drain_s = time.perf_counter() - t0
        print(
            f"drained backlog of {stats.queued} messages in {drain_s:.2f} s: "
            f"{stats.queued / drain_s:.0f} messages/s ({sub.reports} reports received)"
        )
        latencies = []
        for i in range(min(n, 200)):
            before = sub.reports
            t0 = time.perf_counter()
            await pub.publish(cycle_report(n + i))
            await asyncio.to_thread(
                wait_until, lambda b=before: sub.reports > b, 10, "report", 0.0005
            )
            latencies.append(time.perf_counter() - t0)
        ms = sorted(x * 1e3 for x in latencies)
        print(
            f"publish -> subscriber latency over {len(ms)} reports: median "
            f"{statistics.median(ms):.1f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:.1f} ms"
        )
        await pub.close()
        sub.close()


def main(quick: bool = False) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(200 if quick else 2000, Path(tmp)))


if __name__ == "__main__":
    main()
