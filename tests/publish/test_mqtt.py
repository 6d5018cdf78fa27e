"""The MQTT publisher against a real mosquitto: delivery, retained health, store-and-forward with
the broker away, a broker killed or a connection cut mid-burst, kill -9 of the publisher, last
will. TLS verification and passwords are in test_mqtt_security.py."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from agent.config.publish import PublishSettings
from agent.publish.factory import publishers_for
from agent.publish.mqtt.publisher import OUTBOX_FILE, MqttPublisher
from tests.peers.mosquitto_broker import (
    CuttableRelay,
    MosquittoBroker,
    refused_port,
    wait_until,
)
from tests.support.paths import ROOT
from tests.support.publish.mqtt import T0, Subscriber, cycle_report, settings_for
from tests.support.summary import fault, record


def queued_report_ids(state_dir: Path) -> list[str]:
    with sqlite3.connect(state_dir / OUTBOX_FILE) as db:
        rows = db.execute("SELECT message_id FROM outbox WHERE kind = 'report' ORDER BY seq")
        return [r[0] for r in rows]


async def publish_reports(pub: MqttPublisher, first: int, count: int) -> None:
    for n in range(first, first + count):
        await pub.publish(cycle_report(n))


def test_reports_retained_health_and_status(broker: MosquittoBroker, tmp_path: Path) -> None:
    sub = Subscriber(broker.port)

    async def run() -> None:
        (pub,) = publishers_for(PublishSettings(mqtt=settings_for(broker.port)), tmp_path / "s")
        assert isinstance(pub, MqttPublisher)
        await pub.start()
        await publish_reports(pub, 0, 5)
        assert await asyncio.to_thread(pub.wait_idle, 20)
        await pub.close()

    asyncio.run(run())
    sub.wait(lambda: len(sub.ids()) == 5, "5 reports")
    sub.wait(lambda: len(sub.on("jha/agent/jha-test/status")) == 2, "online then offline")
    assert [s["state"] for s in sub.on("jha/agent/jha-test/status")] == ["online", "offline"]
    assert sub.on("jha/agent/jha-test/status")[1]["reason"] == "shutdown"
    sub.close()
    # A late subscriber sees the retained state: the latest health of each joint, offline.
    late = Subscriber(broker.port, client_id="late")
    topics = ["jha/robot1/J1/health", "jha/robot1/J2/health", "jha/agent/jha-test/status"]
    late.wait(lambda: all(late.on(t) for t in topics), "retained messages")
    for joint in ("J1", "J2"):
        health = late.on(f"jha/robot1/{joint}/health")[-1]
        assert health["estimated_at"] == (T0 + timedelta(hours=4)).isoformat()
        assert health["indicators"][0]["value"] == pytest.approx(5e-4 + 4e-5)
        assert health["ne107"]["letter"] == "N"
    with late.lock:
        assert all(retained for _, retained, _ in late.messages)
    assert late.on("jha/agent/jha-test/status")[-1]["state"] == "offline"
    late.close()


def test_broker_away_for_50_cycles_every_report_arrives_exactly_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    b = MosquittoBroker(tmp_path / "broker", persistence=True).start()
    port = b.port
    # The subscriber's persistent session (kept by the broker across its restart) receives what
    # the agent sends the moment the broker is back, even before the subscriber reconnects.
    sub = Subscriber(port, clean=False)
    b.stop()

    async def run() -> None:
        pub = MqttPublisher(settings_for(port), state)
        await pub.start()
        await publish_reports(pub, 0, 50)
        assert not pub.wait_connected(0.2)
        expected = queued_report_ids(state)
        assert len(expected) == 50
        b.start()
        try:
            assert await asyncio.to_thread(pub.wait_idle, 30)
            with contextlib.suppress(AssertionError):  # counted and asserted below
                sub.wait(lambda: len(sub.ids()) >= 50, "50 reports")
            await pub.close()
            got = sub.ids()
            counts = collections.Counter(got)
            duplicates = sum(c - 1 for c in counts.values())
            print(f"broker away 50 cycles: {len(counts)} ids, duplicates {duplicates}")
            fault(
                "MQTT: broker away for 50 reports, then back",
                records_lost=len(set(expected) - set(counts)),
            )
            record("MQTT duplicates", "broker away for 50 reports", str(duplicates))
            assert got == expected  # each once, in the order queued
            assert pub.stats().dropped_total == 0
            # Of the 50 health messages per joint, the retained one is the last cycle's.
            late = Subscriber(port, client_id="late", topic="jha/+/+/health")
            late.wait(
                lambda: all(late.on(f"jha/robot1/{j}/health") for j in ("J1", "J2")),
                "retained health",
            )
            for joint in ("J1", "J2"):
                (health,) = late.on(f"jha/robot1/{joint}/health")
                assert health["estimated_at"] == (T0 + timedelta(hours=49)).isoformat()
            late.close()
        finally:
            sub.close()

    try:
        asyncio.run(run())
    finally:
        b.stop()


def _burst_then_drop(tmp_path: Path, drop: str, sig: int = signal.SIGKILL, cuts: int = 0) -> None:
    b = MosquittoBroker(tmp_path / "broker", persistence=True).start()
    relay = CuttableRelay(b.port) if cuts else None
    # A persistent session (clean=False) keeps the subscriber's queue across a broker restart.
    sub = Subscriber(b.port, clean=False)
    state = tmp_path / "state"
    n_reports = 300

    async def run() -> None:
        # The burst: a backlog of reports queued while no broker was reachable.
        with refused_port() as nowhere:
            away = MqttPublisher(settings_for(nowhere, close_timeout_s=0.0), state)
            await away.start()
            await publish_reports(away, 0, n_reports)
            await away.close()
        expected = queued_report_ids(state)
        assert len(expected) == n_reports
        port = relay.port if relay is not None else b.port
        pub = MqttPublisher(settings_for(port, max_inflight=20), state)
        await pub.start()
        # Mid-burst: some acknowledged, many still queued or in flight.
        await asyncio.to_thread(wait_until, lambda: pub.stats().acknowledged >= 40, 20, "acks")
        if relay is not None:
            assert relay.cut() >= 2
            for k in range(2, cuts + 1):  # a flapping connection
                # Cut again once the publisher is back through the relay: the acks alone can
                # already be past the mark while it is still reconnecting (nothing to cut).
                await asyncio.to_thread(
                    wait_until,
                    lambda k=k: relay.connections >= k and pub.stats().acknowledged >= 40 * k,
                    20,
                    f"reconnected and acks after cut {k - 1}",
                )
                assert relay.cut() >= 2
        unconfirmed = set(expected)
        if relay is None:
            b.stop(sig)
            # Once the publisher has seen the connection die and processed every PUBACK that
            # came before, its outbox holds exactly the messages the dead broker never confirmed.
            await asyncio.to_thread(wait_until, lambda: not pub.stats().connected, 10, "drop")
            await asyncio.to_thread(wait_until, lambda: pub.unprocessed_acks() == 0, 10, "acks")
            unconfirmed = set(queued_report_ids(state))
            assert unconfirmed, "the burst was over before the broker went"
            b.start()
        assert await asyncio.to_thread(pub.wait_idle, 30)
        # mosquitto persists periodically: after kill -9 it may have forgotten messages it had
        # already confirmed. Those are its loss; every message it had not confirmed must arrive.
        strict = sig != signal.SIGKILL or relay is not None
        must_arrive = set(expected) if strict else unconfirmed
        with contextlib.suppress(AssertionError):  # counted and asserted below
            sub.wait(lambda: must_arrive <= set(sub.ids()), "every report id")
        if not strict:  # give the broker's own losses a chance to show up before counting them
            with contextlib.suppress(AssertionError):
                sub.wait(lambda: set(expected) <= set(sub.ids()), "all", timeout_s=2.0)
        await pub.close()
        counts = collections.Counter(sub.ids())
        dups = {mid: c for mid, c in counts.items() if c > 1}
        lost_by_broker = set(expected) - set(counts)
        print(
            f"{drop} mid-burst: {len(expected)} reports, {len(set(counts))} ids arrived, "
            f"{sum(c - 1 for c in dups.values())} duplicates {sorted(dups)[:3]}; "
            f"{len(lost_by_broker)} confirmed by the killed broker and lost by it; "
            f"connects {pub.stats().connects}"
        )
        # Lost: the ids the agent never had confirmed that did not arrive (what a killed
        # broker confirmed and then forgot is the broker's loss, reported on its own row).
        fault(f"MQTT: {drop} mid-burst of {n_reports}", records_lost=len(must_arrive - set(counts)))
        record(
            "MQTT duplicates",
            f"{drop} mid-burst of {n_reports}",
            str(sum(c - 1 for c in dups.values())),
            f"lost by the killed broker after its PUBACK: {len(lost_by_broker)}",
        )
        assert set(counts) >= must_arrive
        assert lost_by_broker.isdisjoint(unconfirmed)
        assert pub.stats().queued == 0  # every message confirmed by a broker
        # Back after every cut it waited for: the relay's cut k came once the publisher was
        # through it again. The last cut may find the burst fully acknowledged (a loaded run:
        # 5 connects for 5 cuts, nothing queued), and then nothing makes the publisher connect
        # again before it is closed. A restarted broker is needed for the unconfirmed ones.
        assert pub.stats().connects >= (cuts if relay is not None else 2)

    try:
        asyncio.run(run())
    finally:
        sub.close()
        if relay is not None:
            relay.close()
        b.stop()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "term"])
def test_broker_killed_mid_burst_and_restarted_loses_nothing(tmp_path: Path, sig: int) -> None:
    _burst_then_drop(tmp_path, f"broker {sig.name} and restart", sig)


@pytest.mark.parametrize("cuts", [1, 5], ids=["once", "flapping"])
def test_connection_cut_mid_burst_loses_nothing(tmp_path: Path, cuts: int) -> None:
    _burst_then_drop(tmp_path, f"connection cut {cuts}x", cuts=cuts)


_CHILD = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from agent.publish.mqtt.publisher import MqttPublisher
    from agent.config.mqtt import MqttSettings
    from tests.support.publish.mqtt import cycle_report

    async def main():
        port, state, n = int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
        pub = MqttPublisher(MqttSettings(host="127.0.0.1", port=port, tls=False,
                                         client_id="child", reconnect_min_s=0.05,
                                         reconnect_max_s=0.2), state)
        await pub.start()
        for i in range(n):
            await pub.publish(cycle_report(i))
            print("queued", i, flush=True)
        if await asyncio.to_thread(pub.wait_connected, 30):
            print("connected", flush=True)
        await asyncio.sleep(3600)  # until killed

    asyncio.run(main())
""")


def start_child(port: int, state: Path, n: int) -> subprocess.Popen[str]:
    """A publisher process; its log (stderr) goes to <state>.log."""
    state.parent.mkdir(parents=True, exist_ok=True)
    with open(state.with_suffix(".log"), "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(port), str(state), str(n)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=ROOT,
        )


def read_until(proc: subprocess.Popen[str], line: str) -> list[str]:
    assert proc.stdout is not None
    seen = []
    for got in proc.stdout:
        seen.append(got.strip())
        if got.strip() == line:
            return seen
    raise AssertionError(f"child ended before printing {line!r}: {seen}")


def test_last_will_says_offline_when_the_publisher_is_killed(
    broker: MosquittoBroker, tmp_path: Path
) -> None:
    sub = Subscriber(broker.port)
    child = start_child(broker.port, tmp_path / "state", 0)
    try:
        read_until(child, "connected")
        sub.wait(lambda: bool(sub.on("jha/agent/child/status")), "online")
        assert sub.on("jha/agent/child/status")[-1]["state"] == "online"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        sub.wait(lambda: sub.on("jha/agent/child/status")[-1]["state"] == "offline", "the will")
        assert sub.on("jha/agent/child/status")[-1]["reason"] == "connection lost"
    finally:
        child.kill()
        child.wait(10)
        assert child.stdout is not None
        child.stdout.close()
        sub.close()
    late = Subscriber(broker.port, client_id="late")
    late.wait(lambda: bool(late.on("jha/agent/child/status")), "retained status")
    assert late.on("jha/agent/child/status")[-1]["state"] == "offline"
    late.close()


def test_kill_9_with_queued_reports_then_restart_sends_them_all(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with refused_port() as nowhere:
        child = start_child(nowhere, state, 20)  # no broker: everything stays queued
        try:
            read_until(child, "queued 19")
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
        finally:
            child.kill()
            assert child.stdout is not None
            child.stdout.close()
    expected = queued_report_ids(state)
    assert len(expected) == 20
    with MosquittoBroker(tmp_path / "broker") as b:
        port = b.port
        sub = Subscriber(port)

        async def run() -> None:
            pub = MqttPublisher(settings_for(port), state)
            await pub.start()
            assert await asyncio.to_thread(pub.wait_idle, 20)
            await pub.close()

        asyncio.run(run())
        with contextlib.suppress(AssertionError):  # counted and asserted below
            sub.wait(lambda: len(sub.ids()) >= 20, "20 reports")
        got = sub.ids()
        fault(
            "MQTT: publisher killed -9 with 20 queued reports, restarted",
            records_lost=len(set(expected) - set(got)),
        )
        record(
            "MQTT duplicates",
            "publisher killed -9 with 20 queued reports",
            str(len(got) - len(set(got))),
        )
        assert got == expected
        sub.close()


def test_oversized_messages_are_refused_when_queued(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def run(port: int) -> MqttPublisher:
        pub = MqttPublisher(
            settings_for(port, max_payload_bytes=1024, close_timeout_s=0.0), tmp_path / "s"
        )
        await pub.start()
        await pub.publish(cycle_report(0))
        await pub.close()
        return pub

    with refused_port() as nowhere:
        pub = asyncio.run(run(nowhere))
    # The report (about 2 kB) is refused, the health of the 2 joints (under 1 kB) is queued.
    assert (pub.stats().too_large, pub.stats().queued) == (1, 2)
    assert "event=mqtt_message_too_large" in caplog.text
    assert "topic=jha/robot1/report" in caplog.text


def test_start_and_publish_never_wait_for_an_absent_broker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "agent.publish.mqtt")

    def retries() -> list[str]:
        # This publisher's own lines: another test's publisher thread may still be logging.
        pattern = rf"event=mqtt_connect_failed host=\S+ port={port_used[0]} .* retry_in_s=(\S+)"
        return re.findall(pattern, caplog.text)

    port_used: list[int] = []

    async def run(port: int) -> None:
        port_used.append(port)
        pub = MqttPublisher(settings_for(port), tmp_path / "s")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await pub.start()
        await publish_reports(pub, 0, 3)
        assert loop.time() - t0 < 2.0
        assert pub.stats().queued == 5  # 3 reports + the latest health of 2 joints
        # Backoff: doubling from reconnect_min_s up to reconnect_max_s.
        await asyncio.to_thread(wait_until, lambda: len(retries()) >= 5, 10, "5 attempts")
        assert retries()[:5] == ["0.05", "0.1", "0.2", "0.2", "0.2"]
        assert "connect failed: [Errno 111]" in (pub.stats().last_error or "")
        t0 = loop.time()
        await pub.close()  # not connected: no flush to wait for
        assert loop.time() - t0 < 2.0

    with refused_port() as nowhere:
        asyncio.run(run(nowhere))
