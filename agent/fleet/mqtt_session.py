"""The fleet's one MQTT 5 connection to the plant broker, kept up by one thread: connect (TLS when
configured), resume the persistent session (clean start off, a session that never expires, a
fixed client id), subscribe at QoS 1, hand over what arrives in batches, send the ingest's
acknowledgements, keep the connection alive, and reconnect with a growing delay when it breaks.

Every socket operation happens on this thread (an SSL socket must not be read and written from
two threads at once). The ingest's writer only queues acknowledgements and wakes the thread
once per committed batch.

Generations: every connection has a number. An acknowledgement names the connection its message
came on and is dropped if that connection is gone: after a reconnect the broker resends what was
not acknowledged, with packet ids that may be reused, so an old id must not be acknowledged on
the new connection (MQTT 5, section 4.4).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import random
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.fleet import mqtt_wire as wire
from agent.fleet.settings import BrokerSettings
from agent.logfmt import kv

log = logging.getLogger(__name__)

NEVER_EXPIRES = 0xFFFFFFFF  # MQTT 5 session expiry interval: the broker keeps the session
CONNECT_TIMEOUT_S = 10.0
READ_CHUNK = 256 * 1024
RETAIN_SEND_IF_NEW_SUBSCRIPTION = 1  # subscription option (section 3.8.3.1)


@dataclass(frozen=True)
class Delivery:
    generation: int  # the connection it came on
    packet_id: int  # 0 at QoS 0
    qos: int
    topic: str
    payload: bytes


class BrokerRefused(Exception):
    """CONNACK with a failure reason code: wrong password, not authorised, server busy..."""


class SubscriberSession:
    def __init__(
        self,
        broker: BrokerSettings,
        password: str | None,
        filters: list[str],
        on_messages: Callable[[list[Delivery]], None],
        maximum_packet_size: int,
        tls: ssl.SSLContext | None,
    ) -> None:
        self.broker = broker
        self._password = password
        self._filters = filters
        self._on_messages = on_messages
        self._maximum_packet_size = maximum_packet_size
        self._tls = tls
        self.connected = threading.Event()
        self.subscribed = threading.Event()  # the broker confirmed this connection's SUBSCRIBE
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._generation = 0
        # QoS 1 messages of the current connection handed over and not yet acknowledged (read
        # and written by the session's thread only).
        self._unacked = 0
        self._acks: collections.deque[tuple[int, list[int]]] = collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="jha-fleet-mqtt", daemon=True)

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Send the queued acknowledgements and a normal DISCONNECT (the session stays), close."""
        self._stop.set()
        self._wake()
        self._thread.join(timeout_s)
        self._wake_r.close()
        self._wake_w.close()

    def ack(self, generation: int, packet_ids: list[int]) -> None:
        """Acknowledge these QoS 1 messages of connection `generation` (dropped if it is gone)."""
        if packet_ids:
            self._acks.append((generation, packet_ids))
            self._wake()

    def _wake(self) -> None:
        # BlockingIOError: a wake-up is already pending; OSError: the session is closing.
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"!")

    # -- the connection thread -----------------------------------------------------------------

    def _run(self) -> None:
        b = self.broker
        delay_s = b.reconnect_min_s
        while not self._stop.is_set():
            try:
                accepted = self._connect_once()
            except Exception as exc:
                # A bug, the consumer's callback included, must not end the thread for good:
                # what the connection handed over was not acknowledged and comes again.
                log.exception(kv("fleet_mqtt_failed", error=_words(exc)))
                accepted = False
            if accepted:
                delay_s = b.reconnect_min_s  # the next break is a new outage: retry at once
            if self._stop.is_set():
                break
            # Jitter: a plant's services restarted together must not reconnect in step.
            self._stop.wait(delay_s * random.uniform(0.8, 1.2))
            delay_s = min(delay_s * 2, b.reconnect_max_s)

    def _connect_once(self) -> bool:
        """One connection, from opening the socket to its end; True if the broker accepted it
        (every accepted connection ends by an exception, except at stop)."""
        b = self.broker
        try:
            sock = self._open()
        except OSError as exc:
            log.warning(kv("fleet_mqtt_connect_failed", host=b.host, port=b.port, error=exc))
            return False
        try:
            self._session(sock)
        except BrokerRefused as exc:
            log.error(kv("fleet_mqtt_refused", host=b.host, port=b.port, reason=exc))
        except (OSError, wire.MalformedPacket, TimeoutError) as exc:
            level = logging.INFO if self._stop.is_set() else logging.WARNING
            log.log(level, kv("fleet_mqtt_disconnected", reason=_words(exc)))
        finally:
            accepted = self.connected.is_set()
            self._closed(sock)
        return accepted

    def _open(self) -> socket.socket:
        b = self.broker
        raw = socket.create_connection((b.host, b.port), timeout=CONNECT_TIMEOUT_S)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = raw if self._tls is None else self._tls.wrap_socket(raw, server_hostname=b.host)
        except BaseException:
            raw.close()
            raise
        sock.settimeout(float(b.keepalive_s))  # a write or a record that stalls that long: dead
        return sock

    def _closed(self, sock: socket.socket) -> None:
        with self._lock:
            self._generation += 1
        self.connected.clear()
        self.subscribed.clear()
        sock.close()

    def _session(self, sock: socket.socket) -> None:
        """One connection from CONNECT to its end."""
        b = self.broker
        self._unacked = 0  # the broker resends what the last connection left unacknowledged
        reader = wire.PacketReader(self._maximum_packet_size)
        sock.sendall(
            wire.connect(
                b.client_id,
                keepalive_s=b.keepalive_s,
                clean_start=False,
                session_expiry_s=NEVER_EXPIRES,
                receive_maximum=b.max_inflight,
                maximum_packet_size=self._maximum_packet_size,
                username=b.username,
                password=self._password if b.username is not None else None,
            )
        )
        connack, early = self._connack(sock, reader)
        keepalive_s = float(connack.properties.get(wire.SERVER_KEEP_ALIVE, b.keepalive_s))
        generation = self.generation
        self.connected.set()
        log.info(
            kv(
                "fleet_mqtt_connected",
                host=b.host,
                port=b.port,
                client_id=b.client_id,
                session_present=str(connack.session_present).lower(),
            )
        )
        # Subscribing again is harmless with retain handling 1: retained messages come only for
        # a subscription the session did not hold (the first start, or a new source).
        sock.sendall(wire.subscribe(1, self._filters, 1, RETAIN_SEND_IF_NEW_SUBSCRIPTION))
        self._handle(early, generation)
        self._serve(sock, reader, generation, keepalive_s)

    def _connack(
        self, sock: socket.socket, reader: wire.PacketReader
    ) -> tuple[wire.ConnAck, list[wire.Packet]]:
        """CONNACK, and what came in the same read after it."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            data = sock.recv(READ_CHUNK)
            if not data:
                raise ConnectionError("the broker closed the connection before CONNACK")
            packets = reader.feed(data)
            if not packets:
                continue
            first, early = packets[0], packets[1:]
            if not isinstance(first, wire.ConnAck):
                raise wire.MalformedPacket(f"{type(first).__name__} before CONNACK")
            if 0 < first.reason_code < 0x80:
                # No MQTT 5 reason code: an MQTT 3.1.1 server's return code (1: unacceptable
                # protocol version). Not a success, whatever follows.
                raise BrokerRefused(f"not an MQTT 5 server (return code {first.reason_code:#04x})")
            if first.reason_code:
                raise BrokerRefused(_reason(first.reason_code, first.properties))
            # A resumed session's unacknowledged messages follow CONNACK at once (section 4.4),
            # so one read may hold them; nothing else can come before the SUBSCRIBE is sent.
            for p in early:
                if not isinstance(p, wire.Publish | wire.Disconnect):
                    raise wire.MalformedPacket(f"{type(p).__name__} before SUBSCRIBE was sent")
            return first, early
        raise TimeoutError("no CONNACK")

    def _serve(
        self, sock: socket.socket, reader: wire.PacketReader, generation: int, keepalive_s: float
    ) -> None:
        last_sent = time.monotonic()
        ping_sent: float | None = None
        pending_ssl = isinstance(sock, ssl.SSLSocket)
        while True:
            if self._stop.is_set():
                self._send_acks(sock, generation)
                sock.sendall(wire.DISCONNECT)
                return
            # Flow control on this side too: mosquitto (2.0) stops honouring Receive Maximum
            # once acknowledgements flow and sends a whole backlog at once, which this process
            # would hold parsed in memory. With Receive Maximum messages unacknowledged the
            # socket is not read: TCP holds the rest back at the broker.
            reading = self._unacked < self.broker.max_inflight
            ready = reading and pending_ssl and sock.pending() > 0  # type: ignore[attr-defined]
            if not ready:
                watched = [sock, self._wake_r] if reading else [self._wake_r]
                readable, _, _ = select.select(watched, [], [], 0.5)
                ready = sock in readable
                if self._wake_r in readable:
                    self._drain_wake()
            if self._send_acks(sock, generation):
                last_sent = time.monotonic()
            if ready:
                data = sock.recv(READ_CHUNK)
                if not data:
                    raise ConnectionError("the broker closed the connection")
                self._handle(reader.feed(data), generation)
                ping_sent = None  # anything the broker sends shows the connection alive
            now = time.monotonic()
            if ping_sent is not None and reading and now - ping_sent > keepalive_s:
                raise TimeoutError(f"no PINGRESP within the keep alive ({keepalive_s:g} s)")
            if not reading:
                ping_sent = None  # unread, a PINGRESP may be waiting behind the backlog
            if keepalive_s and ping_sent is None and now - last_sent >= keepalive_s / 2:
                # Half the keep alive: the broker closes a silent client at 1.5 times it.
                sock.sendall(wire.PINGREQ)
                last_sent = now
                ping_sent = now if reading else None

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while self._wake_r.recv(4096):
                pass

    def _send_acks(self, sock: socket.socket, generation: int) -> bool:
        out: list[bytes] = []
        while self._acks:
            acked_on, packet_ids = self._acks.popleft()
            if acked_on == generation:
                out.extend(wire.puback(i) for i in packet_ids)
        if out:
            sock.sendall(b"".join(out))
            self._unacked -= len(out)
        return bool(out)

    def _handle(self, packets: list[wire.Packet], generation: int) -> None:
        """Deliver the messages, follow the rest (a PINGRESP needs nothing: whatever arrives
        shows the connection alive, _serve)."""
        deliveries = []
        for p in packets:
            if isinstance(p, wire.Publish):
                if p.qos > 1:  # this client subscribed at QoS 1: the broker must downgrade
                    raise wire.MalformedPacket("PUBLISH at QoS 2 on a QoS 1 subscription")
                deliveries.append(Delivery(generation, p.packet_id, p.qos, p.topic, p.payload))
            elif isinstance(p, wire.PingResp):
                pass
            elif isinstance(p, wire.SubAck):
                self._suback(p)
            elif isinstance(p, wire.Disconnect):
                detail = {} if p.reason is None else {wire.REASON_STRING: p.reason}
                raise ConnectionError(f"the broker disconnected: {_reason(p.reason_code, detail)}")
            else:
                raise wire.MalformedPacket(f"an unexpected {type(p).__name__}")
        if deliveries:
            self._unacked += sum(1 for d in deliveries if d.qos)
            self._on_messages(deliveries)

    def _suback(self, p: wire.SubAck) -> None:
        refused = [f"{code:#x}" for code in p.reason_codes if code >= 0x80]
        if refused:
            log.error(kv("fleet_mqtt_subscribe_refused", reasons=",".join(refused)))
            return
        self.subscribed.set()
        log.info(kv("fleet_mqtt_subscribed", topics=len(p.reason_codes)))


# Reason codes of CONNACK and DISCONNECT worth a name in the log (section 2.4).
_REASONS = {
    0x00: "normal disconnection",
    0x80: "unspecified error",
    0x81: "malformed packet",
    0x82: "protocol error",
    0x84: "unsupported protocol version",
    0x85: "client identifier not valid",
    0x86: "bad user name or password",
    0x87: "not authorized",
    0x88: "server unavailable",
    0x89: "server busy",
    0x8B: "server shutting down",
    0x8D: "keep alive timeout",
    0x8E: "session taken over",
    0x95: "packet too large",
    0x97: "quota exceeded",
    0x9C: "use another server",
    0x9D: "server moved",
}


def _reason(code: int, properties: Mapping[int, object]) -> str:
    text = f"{_REASONS.get(code, 'reason')} ({code:#04x})"
    detail = properties.get(wire.REASON_STRING)
    return f"{text}: {detail}" if isinstance(detail, str) else text


def _words(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
