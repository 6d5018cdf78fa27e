"""agent.fleet.mqtt_session against a real mosquitto on loopback, and against a fake server
(tests.peers.mqtt_fake_server) for what no real broker does on request: malformed answers, a
CONNACK sharing a read with a PUBLISH, a PINGREQ never answered.

What is held: the persistent session (what is published while the service is away arrives when
it returns; what was not acknowledged comes again after a reconnect, what was acknowledged never
does), acknowledgements only on the connection their messages came on, keep alive both ways, a
broker that hangs or takes the session over, refused logins retried with back-off, verified TLS,
and a thread that survives whatever the peer sends. Tests wait on behaviour (wait_until), never
on elapsed time.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from agent.fleet import mqtt_wire as wire
from agent.fleet.mqtt_session import Delivery, SubscriberSession
from agent.fleet.settings import BrokerSettings
from tests.fleet.agents import RawPublisher
from tests.peers import mqtt_fake_server as fake
from tests.peers.mosquitto_broker import (
    MOSQUITTO_PASSWD,
    CuttableRelay,
    MosquittoBroker,
    issue_server_cert,
    make_ca,
    wait_until,
)
from tests.peers.mqtt_fake_server import BlackHoleRelay, FakeConnection, FakeMqttServer

CLIENT_ID = "jha-fleet-session-test"
FILTERS = ["jha/#"]
LOGGER = "agent.fleet.mqtt_session"


class Inbox:
    """The session's callback: every delivery, in order, from the session's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Delivery] = []

    def __call__(self, batch: list[Delivery]) -> None:
        with self._lock:
            self._items.extend(batch)

    @property
    def items(self) -> list[Delivery]:
        with self._lock:
            return list(self._items)

    def on(self, generation: int) -> list[Delivery]:
        return [d for d in self.items if d.generation == generation]

    def topics(self, generation: int | None = None) -> list[str]:
        items = self.items if generation is None else self.on(generation)
        return [d.topic for d in items]


def settings(port: int, **overrides: Any) -> BrokerSettings:
    values: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "client_id": CLIENT_ID,
        "tls": False,
        "keepalive_s": 5,
        "reconnect_min_s": 0.05,
        "reconnect_max_s": 0.4,
    }
    values.update(overrides)
    return BrokerSettings(**values)


@contextlib.contextmanager
def running(
    port: int,
    *,
    password: str | None = None,
    tls: ssl.SSLContext | None = None,
    on_messages: Callable[[list[Delivery]], None] | None = None,
    **overrides: Any,
) -> Iterator[tuple[SubscriberSession, Inbox]]:
    inbox = Inbox()
    session = SubscriberSession(
        settings(port, **overrides), password, FILTERS, on_messages or inbox, 1 << 20, tls
    )
    session.start()
    try:
        yield session, inbox
    finally:
        session.stop()
    assert not session.alive(), "stop() left the session's thread running"


def messages(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    """The session's log lines of this event."""
    return [r.getMessage() for r in caplog.records if f"event={event} " in r.getMessage() + " "]


@pytest.fixture
def session_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=LOGGER)
    return caplog


@pytest.fixture
def publisher(broker: MosquittoBroker) -> Iterator[RawPublisher]:
    sender = RawPublisher(broker.port)
    try:
        yield sender
    finally:
        sender.close()


def ack_topics(session: SubscriberSession, deliveries: list[Delivery], topics: set[str]) -> None:
    """Acknowledge the deliveries of these topics, in the order they came, on their connection."""
    for d in deliveries:
        if d.topic in topics:
            session.ack(d.generation, [d.packet_id])


# -- the persistent session against mosquitto ----------------------------------------------------


@pytest.fixture
def debug_broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    """A broker that logs every packet, so that a test sees which PUBACKs it received."""
    broker = MosquittoBroker(tmp_path / "debug-broker", persistence=True)
    with broker.conf_file.open("a") as conf:
        conf.write("log_type debug\n")
    with broker:
        yield broker


def pubacks(broker: MosquittoBroker, packet_id: int) -> int:
    """PUBACKs of this packet id the broker received from the session."""
    return broker.log_text().count(f"Received PUBACK from {CLIENT_ID} (Mid: {packet_id},")


def test_persistent_session_redelivers_only_what_was_not_acknowledged(
    debug_broker: MosquittoBroker,
) -> None:
    """Ten messages published while the session is away arrive when it returns. Two reconnects
    (the relay cut) show that unacknowledged messages come again with the same packet ids and
    acknowledged ones never, and that a late acknowledgement queued for an older connection is
    not sent on the new one (it would acknowledge the redelivered message there)."""
    broker = debug_broker
    publisher = RawPublisher(broker.port)
    relay = CuttableRelay(broker.port)
    try:
        with running(relay.port) as (session, _):
            wait_until(session.subscribed.is_set, 10, "the first subscription")
        names = [f"jha/m{i}/report" for i in range(10)]
        for i, topic in enumerate(names):
            publisher.send(topic, b"%d" % i)

        with running(relay.port) as (session, inbox):
            g0 = session.generation
            wait_until(lambda: len(inbox.on(g0)) == 10, 10, "the queued messages")
            first = inbox.on(g0)
            assert [d.topic for d in first] == names  # in the order they were published
            assert all(d.qos == 1 and d.packet_id for d in first)
            ids = {d.topic: d.packet_id for d in first}
            ack_topics(session, first, set(names[:2]))
            wait_until(
                lambda: all(pubacks(broker, ids[t]) == 1 for t in names[:2]), 10, "two PUBACKs"
            )

            # Reconnect: the eight unacknowledged come again, with the same packet ids.
            relay.cut()
            wait_until(lambda: len(inbox.on(g0 + 1)) == 8, 10, "the redelivery after a cut")
            g1 = session.generation
            assert g1 == g0 + 1
            again = inbox.on(g1)
            assert [(d.topic, d.packet_id) for d in again] == [(t, ids[t]) for t in names[2:]]

            # Late acknowledgements of connection g0 (the writer was slow) are dropped; then m2
            # is acknowledged on g1. Sent on g1, the late ones would acknowledge m3..m5 there.
            ack_topics(session, first, set(names[2:6]))
            ack_topics(session, again, {names[2]})
            wait_until(lambda: pubacks(broker, ids[names[2]]) == 1, 10, "m2's PUBACK on g1")
            assert all(pubacks(broker, ids[t]) == 0 for t in names[3:6])
            relay.cut()
            wait_until(lambda: len(inbox.on(g1 + 1)) == 7, 10, "the second redelivery")
            g2 = g1 + 1
            assert inbox.topics(g2) == names[3:]

            ack_topics(session, inbox.on(g2), set(names[3:]))
            wait_until(lambda: all(pubacks(broker, ids[t]) == 1 for t in names[3:]), 10, "acks")
            counts = {t: inbox.topics().count(t) for t in names}
            # Acknowledged on the first connection: once; on the second: twice; else 3 times.
            assert counts == {**{t: 1 for t in names[:2]}, names[2]: 2, **{t: 3 for t in names[3:]}}

        # Everything was acknowledged: a new start gets only what is published now.
        with running(relay.port) as (session, inbox):
            wait_until(session.subscribed.is_set, 10, "the subscription")
            publisher.send("jha/marker/report", b"m")
            wait_until(lambda: inbox.topics() == ["jha/marker/report"], 10, "only the marker")
    finally:
        relay.close()
        publisher.close()


def test_stop_sends_disconnect_and_the_session_stays_at_the_broker(
    broker: MosquittoBroker, publisher: RawPublisher
) -> None:
    with running(broker.port) as (session, _):
        wait_until(session.subscribed.is_set, 10, "the subscription")
    # mosquitto logs a DISCONNECT as "disconnected", a bare close as "closed its connection".
    wait_until(lambda: f"Client {CLIENT_ID} disconnected" in broker.log_text(), 10, "DISCONNECT")
    assert f"Client {CLIENT_ID} closed its connection" not in broker.log_text()
    for i in range(3):
        publisher.send(f"jha/after-stop/{i}/health", b"%d" % i)
    with running(broker.port) as (session, inbox):
        wait_until(lambda: len(inbox.items) == 3, 10, "what was published after stop()")
        assert inbox.topics() == [f"jha/after-stop/{i}/health" for i in range(3)]


def test_at_most_receive_maximum_unacknowledged_messages_are_read(
    broker: MosquittoBroker, publisher: RawPublisher
) -> None:
    """mosquitto stops honouring Receive Maximum once acknowledgements flow and sends a whole
    backlog at once; the session then leaves the socket unread while max_inflight messages wait
    for their acknowledgement, so what this process holds stays bounded (TCP keeps the rest at
    the broker), and everything arrives once they are acknowledged."""
    inflight, backlog, size = 20, 400, 8 * 1024
    # One read of the socket may bring what is already in its buffer: that much over the limit.
    one_read = 256 * 1024 // size + 1
    with running(broker.port, max_inflight=inflight) as (session, _):
        wait_until(session.subscribed.is_set, 10, "the subscription")
    payload = b"x" * size
    publisher.send_pipelined(
        [_Message(f"jha/m{i}/report", payload) for i in range(backlog)], timeout_s=60
    )
    with running(broker.port, max_inflight=inflight) as (session, inbox):
        wait_until(lambda: len(inbox.items) >= inflight, 10, "the first messages")
        first = inbox.items[:5]
        session.ack(first[0].generation, [d.packet_id for d in first])  # acks start to flow
        # The flood mosquitto then sends: whatever arrives, the unacknowledged stay bounded.
        wait_until(lambda: len(inbox.items) >= inflight + 5, 10, "the next messages")
        for _ in range(20):
            assert len(inbox.items) - 5 <= inflight + one_read
            time.sleep(0.05)  # a window for an unbounded read to show, not a timing assertion
        acked = 5
        while acked < backlog:
            wait_until(lambda n=acked: len(inbox.items) > n, 10, "more after acknowledgements")
            got = inbox.items
            assert len(got) - acked <= inflight + one_read
            session.ack(got[0].generation, [d.packet_id for d in got[acked:]])
            acked = len(got)
        assert [d.topic for d in inbox.items] == [f"jha/m{i}/report" for i in range(backlog)]


class _Message:
    """What RawPublisher.send_pipelined reads of a message."""

    def __init__(self, topic: str, payload: bytes) -> None:
        self.topic, self.payload, self.retain = topic, payload, False


def test_retained_messages_come_with_a_new_subscription_only(
    broker: MosquittoBroker, publisher: RawPublisher
) -> None:
    """Retain handling 1: subscribing again on every connect does not resend retained health."""
    publisher.send("jha/m/J1/health", b"retained", retain=True)
    with running(broker.port) as (session, inbox):
        wait_until(lambda: inbox.topics() == ["jha/m/J1/health"], 10, "the retained message")
        session.ack(inbox.items[0].generation, [inbox.items[0].packet_id])
    with running(broker.port) as (session, inbox):
        wait_until(session.subscribed.is_set, 10, "the second subscription")
        publisher.send("jha/marker/report", b"m")
        wait_until(lambda: inbox.topics() == ["jha/marker/report"], 10, "the marker alone")


def test_a_failing_callback_is_logged_and_its_messages_come_again(
    broker: MosquittoBroker, publisher: RawPublisher, session_log: pytest.LogCaptureFixture
) -> None:
    """A bug in the consumer must not end the session's thread: the connection is dropped (the
    messages were not acknowledged) and what it was handed comes again."""
    inbox = Inbox()
    calls = []

    def flaky(batch: list[Delivery]) -> None:
        calls.append(len(batch))
        if len(calls) == 1:
            raise RuntimeError("consumer bug")
        inbox(batch)

    with running(broker.port, on_messages=flaky) as (session, _):
        wait_until(session.subscribed.is_set, 10, "the subscription")
        publisher.send("jha/m/report", b"x")
        wait_until(lambda: inbox.topics() == ["jha/m/report"], 10, "the message, again")
        assert session.alive()
        assert any("consumer bug" in m for m in messages(session_log, "fleet_mqtt_failed"))


# -- keep alive and a broker that stops answering ------------------------------------------------


def test_keep_alive_holds_an_idle_connection(
    broker: MosquittoBroker, publisher: RawPublisher
) -> None:
    """Keep alive 5 s: mosquitto closes a client silent for 7.5 s. Idle for 8 s, the session is
    still on its first connection (its PINGREQs kept it), and a message still arrives on it."""
    with running(broker.port, keepalive_s=5) as (session, inbox):
        wait_until(session.subscribed.is_set, 10, "the subscription")
        generation = session.generation
        time.sleep(8.0)  # the idle period itself: nothing to wait for
        assert session.connected.is_set() and session.generation == generation
        publisher.send("jha/after-idle/report", b"x")
        wait_until(lambda: inbox.topics() == ["jha/after-idle/report"], 10, "a message")
        assert inbox.items[0].generation == generation
    log = broker.log_text()
    assert "exceeded timeout" not in log, log[-2000:]


def test_a_broker_that_stops_answering_is_left_and_found_again(
    broker: MosquittoBroker, publisher: RawPublisher, session_log: pytest.LogCaptureFixture
) -> None:
    """The link turns into a black hole (no RST, no FIN): only the missing PINGRESP tells. The
    session drops the connection, keeps trying, and resumes when the link is back. (Keep alive
    2 s, below what the settings file allows, to keep the test short.)"""
    relay = BlackHoleRelay(broker.port)
    try:
        with running(relay.port, keepalive_s=2) as (session, inbox):
            wait_until(session.subscribed.is_set, 10, "the subscription")
            generation = session.generation
            relay.black_hole()
            wait_until(lambda: session.generation > generation, 15, "the dead link noticed")
            assert any("PINGRESP" in m for m in messages(session_log, "fleet_mqtt_disconnected"))
            relay.restore()
            wait_until(session.subscribed.is_set, 15, "the session back")
            publisher.send("jha/after-outage/report", b"x")
            wait_until(lambda: inbox.topics() == ["jha/after-outage/report"], 10, "a message")
            assert session.alive()
    finally:
        relay.close()


def test_server_keep_alive_is_obeyed_and_a_missing_pingresp_ends_the_connection(
    session_log: pytest.LogCaptureFixture,
) -> None:
    """CONNACK's Server Keep Alive (1 s) replaces the client's 60 s (section 3.2.2.3.14): the
    PINGREQ comes at once. The first connection never answers it, the second does."""

    def script(conn: FakeConnection) -> None:
        conn.accept_session(properties=fake.server_keep_alive(1))
        while (got := conn.read(30)) is not None:
            if got[0] == fake.PINGREQ and conn.index > 0:
                conn.send(fake.PINGRESP_PACKET)

    with FakeMqttServer(script) as server, running(server.port, keepalive_s=60) as (session, _):
        wait_until(lambda: server.count >= 2, 15, "a reconnect after the unanswered PINGREQ")
        first = server.connections[0]
        wait_until(lambda: first.closed_by_client, 10, "the first connection closed")
        assert first.of_type(fake.PINGREQ) == [b""]
        assert any("PINGRESP" in m for m in messages(session_log, "fleet_mqtt_disconnected"))
        second = server.connections[1]
        wait_until(lambda: len(second.of_type(fake.PINGREQ)) >= 3, 15, "answered PINGREQs")
        assert server.count == 2 and session.connected.is_set()
        assert not server.errors


# -- what the broker refuses or ends ---------------------------------------------------------------


class RecordingEvent(threading.Event):
    """The session's stop event, recording how long each back-off wait was asked to be."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            self.waits.append(timeout)
        return super().wait(timeout)


def test_a_refused_login_is_logged_retried_with_back_off_and_recovers(
    tmp_path: Path, session_log: pytest.LogCaptureFixture
) -> None:
    with MosquittoBroker(tmp_path / "auth", users={"fleet": "right"}) as broker:
        inbox = Inbox()
        session = SubscriberSession(
            settings(broker.port, username="fleet", reconnect_min_s=0.02, reconnect_max_s=0.16),
            "wrong",
            FILTERS,
            inbox,
            1 << 20,
            None,
        )
        stop = RecordingEvent()
        session._stop = stop
        session.start()
        try:
            wait_until(
                lambda: len(messages(session_log, "fleet_mqtt_refused")) >= 6, 15, "refusals"
            )
            refusals = messages(session_log, "fleet_mqtt_refused")
            assert all(
                "bad user name or password" in m or "not authorized" in m for m in refusals
            ), refusals
            assert not session.connected.is_set() and session.alive()
            # Each wait about twice the one before (+-20 % jitter), up to reconnect_max_s.
            waits = stop.waits[:6]
            for i, wait in enumerate(waits):
                nominal = min(0.02 * 2**i, 0.16)
                assert nominal * 0.8 - 1e-9 <= wait <= nominal * 1.2 + 1e-9, waits
            # The password file corrected and reloaded (SIGHUP): the session gets in.
            subprocess.run(
                [MOSQUITTO_PASSWD, "-b", str(broker.directory / "passwd"), "fleet", "wrong"],
                check=True,
                capture_output=True,
                timeout=30,
            )
            assert broker.proc is not None
            broker.proc.send_signal(signal.SIGHUP)
            wait_until(session.subscribed.is_set, 15, "the session in with the corrected file")
            # An accepted connection resets the back-off: after the broker's restart the first
            # wait is the shortest again, not where the refusals had left it.
            generation, waited = session.generation, len(stop.waits)
            broker.restart()
            wait_until(
                lambda: session.generation > generation and session.subscribed.is_set(),
                15,
                "the session back after the broker's restart",
            )
            assert stop.waits[waited] <= 0.02 * 1.2, stop.waits[waited:]
        finally:
            session.stop()


def test_a_session_taken_over_is_logged_and_taken_back(
    broker: MosquittoBroker, publisher: RawPublisher, session_log: pytest.LogCaptureFixture
) -> None:
    """Another client connects with the same client id. mosquitto 2.0.11 closes this session's
    connection without the DISCONNECT 0x8E that MQTT 5 allows it (the fake server's test below
    sends one); either way the session logs it and reconnects once the other client has left."""
    with running(broker.port) as (session, inbox):
        wait_until(session.subscribed.is_set, 10, "the subscription")
        generation = session.generation
        with socket.create_connection((broker.host, broker.port), timeout=10) as intruder:
            intruder.sendall(
                wire.connect(
                    CLIENT_ID,
                    keepalive_s=30,
                    clean_start=False,  # the session (and what it holds) is kept
                    session_expiry_s=0xFFFFFFFF,
                    receive_maximum=10,
                    maximum_packet_size=1 << 20,
                )
            )
            reader = wire.PacketReader(1 << 20)
            got: list[wire.Packet] = []
            wait_until(lambda: got.extend(reader.feed(intruder.recv(4096))) or got, 10, "CONNACK")
            assert isinstance(got[0], wire.ConnAck) and got[0].reason_code == 0
            wait_until(lambda: session.generation > generation, 10, "the session dropped")
            with contextlib.suppress(OSError):  # taken back already, perhaps
                intruder.sendall(wire.DISCONNECT)
        assert f"Client {CLIENT_ID} already connected, closing old connection" in broker.log_text()
        assert messages(session_log, "fleet_mqtt_disconnected")
        wait_until(session.subscribed.is_set, 10, "the session back")
        publisher.send("jha/after-takeover/report", b"x")
        wait_until(lambda: "jha/after-takeover/report" in inbox.topics(), 10, "a message")


@pytest.mark.parametrize(
    ("reason", "logged"),
    [
        (None, "session taken over (0x8e)"),
        ("by 10.0.0.7", "session taken over (0x8e): by 10.0.0.7"),
    ],
)
def test_a_broker_disconnect_is_logged_with_its_reason_and_the_session_returns(
    reason: str | None, logged: str, session_log: pytest.LogCaptureFixture
) -> None:
    """DISCONNECT 0x8E (section 3.14.2.1), with and without a reason string."""

    def script(conn: FakeConnection) -> None:
        conn.accept_session()
        if conn.index == 0:
            conn.send(fake.disconnect(0x8E, reason))
        conn.drain(30)

    with FakeMqttServer(script) as server, running(server.port) as (session, _):
        wait_until(lambda: server.count == 2 and session.subscribed.is_set(), 10, "reconnected")
        (line,) = messages(session_log, "fleet_mqtt_disconnected")
        assert f"the broker disconnected: {logged}" in line, line
        first = server.connections[0]
        wait_until(lambda: first.closed_by_client, 10, "the first connection closed")
        assert not server.errors


# -- TLS -----------------------------------------------------------------------------------------


def tls_context(ca_file: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def test_tls_verified_against_the_test_ca_and_refused_with_another(
    tmp_path: Path, session_log: pytest.LogCaptureFixture
) -> None:
    ca = make_ca(tmp_path / "pki", "plant-ca")
    other = make_ca(tmp_path / "pki", "other-ca")
    cert = issue_server_cert(ca, tmp_path / "pki")
    with MosquittoBroker(tmp_path / "tls", tls=cert) as broker:
        sender = paho.Client(CallbackAPIVersion.VERSION2, client_id="tls-publisher")
        sender.tls_set(ca_certs=str(ca.cert_file))
        sender.max_inflight_messages_set(1000)
        sender.connect(broker.host, broker.port, keepalive=30)
        sender.loop_start()
        try:
            with running(broker.port, tls=tls_context(other.cert_file)) as (session, _):
                wait_until(
                    lambda: len(messages(session_log, "fleet_mqtt_connect_failed")) >= 2,
                    15,
                    "refused handshakes",
                )
                failed = messages(session_log, "fleet_mqtt_connect_failed")
                assert all("CERTIFICATE_VERIFY_FAILED" in m for m in failed), failed
                assert not session.connected.is_set() and session.alive()

            with running(broker.port, tls=tls_context(ca.cert_file)) as (session, inbox):
                wait_until(session.subscribed.is_set, 10, "the subscription over TLS")
                # A burst, so that TLS records wait decrypted in the SSL object (pending()).
                infos = [
                    sender.publish(f"jha/m{i}/report", b"p" * (i * 37 % 3000), qos=1)
                    for i in range(300)
                ]
                for info in infos:
                    info.wait_for_publish(10)
                wait_until(lambda: len(inbox.items) == 300, 15, "every message over TLS")
                assert inbox.topics() == [f"jha/m{i}/report" for i in range(300)]
        finally:
            sender.disconnect()
            sender.loop_stop()


# -- a server that breaks the protocol -------------------------------------------------------------

HTTP_ANSWER = (
    b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Type: text/html\r\n"
    b"Content-Length: 11\r\nConnection: close\r\n\r\nBad Request"
)
BAD_ANSWERS = [
    b"\xff\xff\xff\xff\xff\x01",  # no packet type, a remaining length of five bytes
    HTTP_ANSWER,  # not MQTT at all (0x48: a PUBACK with reserved flags)
    fake.publish("jha/m/report", b"early", 1),  # a PUBLISH before CONNACK
    fake.packet(0x20, b"\x00\x00\x03\x23\x00\x01"),  # CONNACK with a property it cannot carry
    fake.packet(0x20, b"\x00"),  # CONNACK cut short
    fake.connack(reason_code=0x01),  # an MQTT 3.1.1 server: "unacceptable protocol version"
    fake.connack() + fake.packet(0x90, b"\x00\x01"),  # then a SUBACK without properties
    fake.connack() + fake.publish("jha/+/report", b"x", 3),  # a wildcard in a topic name
    fake.connack() + fake.disconnect(0x82, "protocol error, says the server"),
    fake.connack() + bytes([0x30]) + fake.varint(2 << 20),  # a packet over the maximum size
]


def test_a_server_answering_with_malformed_bytes_never_ends_the_session(
    session_log: pytest.LogCaptureFixture,
) -> None:
    """Each connection gets one of BAD_ANSWERS; then a well-behaved one. Every bad answer is
    logged and followed by a reconnect; the session's thread lives on and subscribes at last."""

    def script(conn: FakeConnection) -> None:
        if conn.index < len(BAD_ANSWERS):
            conn.expect(fake.CONNECT)
            conn.send(BAD_ANSWERS[conn.index])
            conn.drain(10)  # the client closes it
            return
        conn.accept_session()
        conn.drain(30)

    with FakeMqttServer(script) as server, running(server.port) as (session, inbox):
        wait_until(session.subscribed.is_set, 30, "the session in, after every bad answer")
        assert server.count == len(BAD_ANSWERS) + 1
        assert session.alive() and not inbox.items
        bad = server.connections[: len(BAD_ANSWERS)]
        wait_until(lambda: all(c.closed_by_client for c in bad), 10, "each closed by the client")
        logged = messages(session_log, "fleet_mqtt_disconnected") + messages(
            session_log, "fleet_mqtt_refused"
        )
        assert len(logged) == len(BAD_ANSWERS), logged
        assert sum("MalformedPacket" in m for m in logged) == 8, logged
        refused = messages(session_log, "fleet_mqtt_refused")
        assert len(refused) == 1 and "0x01" in refused[0], refused
        assert any("protocol error, says the server" in m for m in logged), logged
        assert not server.errors


def test_a_connack_and_the_session_s_messages_in_one_read(
    session_log: pytest.LogCaptureFixture,
) -> None:
    """A broker resuming a session sends the unacknowledged PUBLISH right after CONNACK (section
    4.4), before the client's SUBSCRIBE: one read may hold both. They are delivered and
    acknowledged on this connection, which stays up."""

    def script(conn: FakeConnection) -> None:
        conn.expect(fake.CONNECT)
        conn.send(
            fake.connack(session_present=True)
            + fake.publish("jha/m1/report", b"1", 7, dup=True)
            + fake.publish("jha/m2/report", b"2", 8, dup=True)
        )
        body = conn.expect(fake.SUBSCRIBE)
        conn.send(fake.suback(int.from_bytes(body[:2], "big"), 1))
        conn.drain(30)

    with FakeMqttServer(script) as server, running(server.port) as (session, inbox):
        wait_until(lambda: len(inbox.items) == 2, 10, "both resent messages")
        assert [(d.topic, d.packet_id) for d in inbox.items] == [
            ("jha/m1/report", 7),
            ("jha/m2/report", 8),
        ]
        session.ack(inbox.items[0].generation, [7, 8])
        conn = server.connections[0]
        wait_until(lambda: len(conn.of_type(fake.PUBACK)) == 2, 10, "two PUBACKs")
        assert conn.of_type(fake.PUBACK) == [b"\x00\x07", b"\x00\x08"]
        assert server.count == 1 and not messages(session_log, "fleet_mqtt_disconnected")


def test_acknowledgements_of_an_older_connection_are_never_sent() -> None:
    """Packet id 7 on connection 0, then (after the server closed it) id 7 again on connection
    1: an acknowledgement queued for connection 0 must not reach connection 1, where it would
    acknowledge a different delivery. On stop, the queued ones of the live connection are sent
    before DISCONNECT, and DISCONNECT is the last packet."""

    def script(conn: FakeConnection) -> None:
        conn.accept_session()
        conn.send(fake.publish("jha/m1/report", b"1", 7, dup=conn.index > 0))
        if conn.index == 0:
            return  # closed: the client reconnects
        conn.drain(30)

    with FakeMqttServer(script) as server:
        with running(server.port) as (session, inbox):
            wait_until(lambda: len(inbox.items) == 2, 10, "the message on both connections")
            old, new = inbox.items
            assert (old.packet_id, new.packet_id) == (7, 7)
            assert new.generation == old.generation + 1
            session.ack(old.generation, [7])
            session.ack(new.generation, [7])
        second = server.connections[1]
        wait_until(lambda: second.closed_by_client, 10, "the client gone")
        assert second.of_type(fake.PUBACK) == [b"\x00\x07"]  # one, from the new connection
        assert [k for k, _ in second.received][-2:] == [fake.PUBACK, fake.DISCONNECT]
        assert second.received[-1] == (fake.DISCONNECT, b"")  # normal disconnection
        assert not server.errors
