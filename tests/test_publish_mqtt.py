"""The MQTT publisher against a real mosquitto: delivery, retained health, store-and-forward with
the broker away, a broker killed or a connection cut mid-burst, kill -9 of the publisher, last
will, TLS verification and passwords that never reach a log."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from agent.config.model import ThresholdSettings
from agent.config.mqtt import MqttSettings
from agent.config.publish import PublishSettings
from agent.errors import ConfigError
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import TrendPoint
from agent.publish.factory import publishers_for
from agent.publish.mqtt.publisher import OUTBOX_FILE, MqttPublisher
from agent.report.model import Report, joint_report
from tests.peers.mosquitto_broker import (
    CuttableRelay,
    MosquittoBroker,
    issue_server_cert,
    make_ca,
    refused_port,
    wait_until,
)
from tests.summary import fault, record

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2024, 3, 1, 6, 0, tzinfo=UTC)
LIMITS = ThresholdSettings(backlash_watch_rad=1e-3, backlash_alert_rad=2e-3)
PASSWORD = "pw-7Hq2-Zx91-secret"
WRONG_PASSWORD = "pw-WRONG-4kT8-secret"


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


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    with MosquittoBroker(tmp_path / "broker") as b:
        yield b


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
                await asyncio.to_thread(
                    wait_until,
                    lambda k=k: pub.stats().acknowledged >= 40 * k,
                    20,
                    f"acks after cut {k - 1}",
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
        assert pub.stats().connects >= 1 + max(cuts, 1)

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
    from tests.test_publish_mqtt import cycle_report

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
    caplog.set_level(logging.INFO, "jha.mqtt")

    def retries() -> list[str]:
        return re.findall(r"event=mqtt_connect_failed .* retry_in_s=(\S+)", caplog.text)

    async def run(port: int) -> None:
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


# -- TLS and credentials ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    trusted, untrusted = make_ca(d, "plant-ca"), make_ca(d, "rogue-ca")
    server = issue_server_cert(trusted, d, "broker")
    rogue_server = issue_server_cert(untrusted, d, "rogue-broker")
    return {
        "trusted_ca": trusted.cert_file,
        "untrusted_ca": untrusted.cert_file,
        "cert": server.cert_file,
        "key": server.key_file,
        "rogue_cert": rogue_server.cert_file,
        "rogue_key": rogue_server.key_file,
    }


def password_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"mqtt-password-{mode:o}"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def deliver_one(settings: MqttSettings, state: Path, timeout_s: float) -> MqttPublisher:
    async def run() -> MqttPublisher:
        pub = MqttPublisher(settings, state)
        await pub.start()
        await pub.publish(cycle_report(0))
        await asyncio.to_thread(pub.wait_idle, timeout_s)
        await pub.close()
        return pub

    return asyncio.run(run())


@pytest.mark.security("MQTT: TLS broker certificate verified, untrusted CA refused")
def test_tls_trusted_ca_works_untrusted_refused(
    tmp_path: Path, pki: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    from tests.peers.mosquitto_broker import ServerCert

    caplog.set_level(logging.INFO)
    tls = ServerCert(pki["cert"], pki["key"], pki["trusted_ca"])
    with MosquittoBroker(tmp_path / "broker", tls=tls) as b:
        # Verification is on by default: the client trusts only the plant CA it is given.
        good = deliver_one(
            settings_for(
                b.port,
                tls=True,
                ca_file=str(pki["trusted_ca"]),
                host="localhost",
                close_timeout_s=0.5,
            ),
            tmp_path / "good",
            10,
        )
        assert good.stats().connects == 1
        assert good.stats().queued == 0
        bad = deliver_one(
            settings_for(b.port, tls=True, ca_file=str(pki["untrusted_ca"]), close_timeout_s=0.0),
            tmp_path / "bad",
            1.0,
        )
        assert bad.stats().connects == 0
        assert bad.stats().queued == 3  # kept for when the trust is fixed
        assert "CERTIFICATE_VERIFY_FAILED" in (bad.stats().last_error or "")
        assert "event=mqtt_connect_failed" in caplog.text
    # A broker presenting a certificate of another CA is refused too.
    rogue = ServerCert(pki["rogue_cert"], pki["rogue_key"], pki["untrusted_ca"])
    with MosquittoBroker(tmp_path / "rogue", tls=rogue) as b:
        bad = deliver_one(
            settings_for(b.port, tls=True, ca_file=str(pki["trusted_ca"]), close_timeout_s=0.0),
            tmp_path / "rogue-state",
            1.0,
        )
        assert bad.stats().connects == 0
        # tls_insecure accepts it, and says so loudly.
        insecure = deliver_one(
            settings_for(
                b.port,
                tls=True,
                ca_file=str(pki["trusted_ca"]),
                tls_insecure=True,
                close_timeout_s=0.5,
            ),
            tmp_path / "insecure",
            10,
        )
        assert insecure.stats().connects == 1
        assert "event=mqtt_tls_insecure" in caplog.text


@pytest.mark.security("MQTT: password never in logs, wrong password a clear error")
def test_password_auth_and_no_password_in_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, paho's included
    with MosquittoBroker(tmp_path / "broker", users={"jha": PASSWORD}) as b:
        good_file = password_file(tmp_path, PASSWORD)
        good = deliver_one(
            settings_for(b.port, username="jha", password_file=str(good_file)),
            tmp_path / "good",
            10,
        )
        assert good.stats().connects == 1 and good.stats().queued == 0
        wrong_file = password_file(tmp_path / "w", WRONG_PASSWORD)
        wrong = deliver_one(
            settings_for(
                b.port, username="jha", password_file=str(wrong_file), close_timeout_s=0.0
            ),
            tmp_path / "wrong",
            1.0,
        )
        assert wrong.stats().queued == 3 and wrong.stats().connects == 0
        error = wrong.stats().last_error or ""
        assert error.startswith("broker refused the connection: "), error
        assert error == (
            f"broker refused the connection: Not authorized (check username 'jha' "
            f"and the password in {wrong_file})"
        ), error
        assert "event=mqtt_connect_refused" in caplog.text
        assert "username=jha" in caplog.text
        visible = "\n".join(
            [
                caplog.text,
                repr(wrong),
                repr(good),
                json.dumps(wrong.stats().to_dict()),
                error,
                repr(wrong.settings),
            ]
        )
        assert PASSWORD not in visible
        assert WRONG_PASSWORD not in visible
        with sqlite3.connect(tmp_path / "wrong" / OUTBOX_FILE) as db:
            blob = b"".join(r[0] for r in db.execute("SELECT payload FROM outbox"))
        assert WRONG_PASSWORD.encode() not in blob


@pytest.mark.security("MQTT: password file readable by others refused")
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660], ids=lambda m: f"{m:04o}")
def test_password_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = password_file(tmp_path, PASSWORD, mode)
    with pytest.raises(ConfigError) as info:
        MqttPublisher(settings_for(1883, username="jha", password_file=str(path)), tmp_path)
    message = str(info.value)
    assert str(path) in message and f"{mode:04o}" in message and "chmod 600" in message
    assert PASSWORD not in message


def test_password_file_problems_are_clear(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"{missing}: cannot read the MQTT password file"):
        MqttPublisher(settings_for(1883, username="u", password_file=str(missing)), tmp_path)
    empty = password_file(tmp_path, "")
    with pytest.raises(ConfigError, match="is empty"):
        MqttPublisher(settings_for(1883, username="u", password_file=str(empty)), tmp_path)
    ok = password_file(tmp_path / "ok", PASSWORD, 0o400)
    pub = MqttPublisher(settings_for(1883, username="u", password_file=str(ok)), tmp_path)
    assert PASSWORD not in repr(pub) and PASSWORD not in str(pub.__dict__)
