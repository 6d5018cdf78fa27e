"""MQTT publisher: per-joint retained health, full reports, and the agent's online/offline status,
QoS 1, through a store-and-forward outbox on disk (agent.publish.mqtt.outbox).

Threads, and why: paho's network loop and our sender run in two threads of their own, so the
daemon's event loop never waits on the broker. `publish()` only writes the outbox (in an executor
thread: the write fsyncs) and wakes the sender. The sender hands the oldest unsent messages to
paho, at most `max_inflight` at a time, and deletes each from the outbox when paho reports its
PUBACK (on_publish; the callback only queues the mid, because paho calls it holding a lock that
publish() also takes). A message handed to paho stays with paho across reconnects: paho resends
it, flagged DUP, once connected again; so the sender never hands the same row twice within one
process. After a restart everything still in the outbox is sent again in order; a message whose
PUBACK arrived just before a crash is therefore sent twice, with the same message_id.

Connection: our network thread connects (TLS, verified unless `tls_insecure`), runs paho's loop
until the connection ends, then waits with exponential backoff (jittered, reset after a
connection that the broker accepted) and connects again. Failures are logged with their reason;
the password is never part of any message (see agent.publish.mqtt.security).

The agent's status topic holds "online" (published at each connection) or "offline": the last
will (retained, sent by the broker when the connection dies) or published on a clean close.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import random
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from agent.config.mqtt import MqttSettings
from agent.publish.base import HealthPublisher
from agent.publish.mqtt.outbox import Outbox, OutboxError, OutboxStats, PutResult
from agent.publish.mqtt.payloads import OutMessage, report_messages, status_payload, status_topic
from agent.publish.mqtt.security import Secret, read_password_file, tls_context
from agent.report.model import Report

log = logging.getLogger("jha.mqtt")

OUTBOX_FILE = "mqtt_outbox.sqlite3"
_LOOP_TIMEOUT_S = 0.5
_SENDER_POLL_S = 1.0


def default_client_id() -> str:
    return f"jha-{socket.gethostname()}"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
        self._password: Secret | None = (
            read_password_file(settings.password_file) if settings.password_file else None
        )
        self._tls = tls_context(settings)
        self.status_topic = status_topic(settings.topic_prefix, self.client_id)
        self._client = self._make_client()
        self._outbox: Outbox | None = None
        self._stop = threading.Event()  # network thread: no more connecting
        self._sender_stop = threading.Event()
        self._wake = threading.Event()
        self._connected = threading.Event()
        self._idle = threading.Event()  # outbox empty and nothing in flight
        self._acks: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._ack_lock = threading.Lock()  # never held while calling paho (see _on_publish)
        self._inflight: dict[int, int] = {}  # paho mid -> outbox seq; sender thread only
        self._handed_seq = 0  # highest seq handed to paho; sender thread only
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._final: OutboxStats | None = None  # the outbox as close() left it
        self._connects = 0
        self._handed = 0
        self._acknowledged = 0
        self._too_large = 0
        self._last_error: str | None = None
        self._accepted_since_wait = False

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
        if not s.tls and self._password is not None:
            log.warning(
                'event=mqtt_plaintext_password host=%s warning="tls is off: the '
                'password crosses the network in clear text"',
                s.host,
            )
        self._wake.set()  # the sender's first look at the outbox is immediate
        for target, name in ((self._network_main, "net"), (self._sender_main, "send")):
            thread = threading.Thread(target=target, name=f"jha-mqtt-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    async def publish(self, report: Report) -> None:
        """Queue the report's messages durably (raises OutboxError if the disk refuses)."""
        if self._outbox is None or self._closed:
            raise RuntimeError("MqttPublisher.publish() outside start() ... close()")
        outbox = self._outbox

        def queue_report() -> tuple[tuple[OutMessage, ...], PutResult]:
            # JSON of a long history takes a while too: off the event loop with the write.
            messages = self._fitting(
                report_messages(report, self.settings.topic_prefix, _now_iso())
            )
            return messages, outbox.put(messages)

        messages, result = await asyncio.to_thread(queue_report)
        self._idle.clear()
        self._wake.set()
        log.info(
            "event=mqtt_queued messages=%d report_message_ids=%s dropped=%d superseded=%d",
            len(messages),
            ",".join(m.message_id for m in messages if m.kind == "report"),
            len(result.dropped),
            result.superseded,
        )

    async def close(self) -> None:
        await asyncio.to_thread(self.close_blocking)

    def _fitting(self, messages: tuple[OutMessage, ...]) -> tuple[OutMessage, ...]:
        limit = self.settings.max_payload_bytes
        for m in messages:
            if len(m.payload) > limit:
                self._too_large += 1
                log.error(
                    "event=mqtt_message_too_large message_id=%s topic=%s payload_bytes=%d "
                    "max_payload_bytes=%d",
                    m.message_id,
                    m.topic,
                    len(m.payload),
                    limit,
                )
        return tuple(m for m in messages if len(m.payload) <= limit)

    # -- for the daemon's status, tests and benchmarks -----------------------------------------

    def stats(self) -> MqttStats:
        box = self._final
        if box is None and self._outbox is not None and not self._closed:
            box = self._outbox.stats()
        return MqttStats(
            connected=self._connected.is_set(),
            connects=self._connects,
            handed=self._handed,
            acknowledged=self._acknowledged,
            queued=0 if box is None else box.messages,
            payload_bytes=0 if box is None else box.payload_bytes,
            dropped_total=0 if box is None else box.dropped_total,
            superseded_total=0 if box is None else box.superseded_total,
            too_large=self._too_large,
            last_error=self._last_error,
        )

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until every queued message is acknowledged; False on timeout."""
        return self._idle.wait(timeout_s)

    def wait_connected(self, timeout_s: float) -> bool:
        return self._connected.wait(timeout_s)

    def unprocessed_acks(self) -> int:
        """PUBACKs received whose outbox rows are not deleted yet (0 once the sender caught up:
        after a disconnect, the outbox then holds exactly what the broker did not confirm)."""
        with self._ack_lock:
            return self._acks.qsize()

    def close_blocking(self) -> None:
        """Flush for up to close_timeout_s, publish "offline", disconnect, close the outbox.
        What is not acknowledged by then stays in the outbox for the next start."""
        if self._closed or self._outbox is None:
            self._closed = True
            return
        deadline = time.monotonic() + self.settings.close_timeout_s
        if self._connected.is_set():
            self._idle.wait(max(0.0, deadline - time.monotonic()))
        self._sender_stop.set()
        self._wake.set()
        self._threads[1].join(timeout=10.0)
        offline_sent = False
        if self._connected.is_set():
            info = self._client.publish(
                self.status_topic,
                status_payload(self.client_id, False, _now_iso(), "shutdown"),
                qos=1,
                retain=True,
            )
            try:
                info.wait_for_publish(max(0.5, deadline - time.monotonic()))
                offline_sent = info.is_published()
            except (RuntimeError, ValueError):
                offline_sent = False
        self._stop.set()
        self._client.disconnect()
        self._threads[0].join(timeout=10.0)
        self._take_acks()
        self._final = self._outbox.stats()
        self._outbox.close()
        self._closed = True
        log.info(
            "event=mqtt_closed offline_published=%s queued_left=%d",
            str(offline_sent).lower(),
            self._final.messages,
        )

    # -- paho ----------------------------------------------------------------------------------

    def _make_client(self) -> paho.Client:
        s = self.settings
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            clean_session=True,
            protocol=paho.MQTTv311,
        )
        client.max_inflight_messages_set(s.max_inflight)
        if s.username is not None:
            client.username_pw_set(
                s.username, None if self._password is None else self._password.reveal()
            )
        if self._tls is not None:
            client.tls_set_context(self._tls)
        client.will_set(
            self.status_topic,
            status_payload(self.client_id, False, None, "connection lost"),
            qos=1,
            retain=True,
        )
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        # Unless an external loop is registered, paho writes a publish to the socket from the
        # calling thread: the sender thread and the network thread then drive one SSL object at
        # once, which OpenSSL does not allow (TLS links dropped with "Unspecified error"). With
        # this hook paho only queues the packet and wakes client.loop() in the network thread,
        # which then does every read and every write.
        client.on_socket_register_write = _write_in_network_thread
        return client

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        s = self.settings
        if reason.is_failure:
            hint = ""
            if str(reason) in ("Not authorized", "Bad user name or password"):
                hint = (
                    f" (check username {s.username!r} and the password in {s.password_file})"
                    if s.username
                    else " (the broker wants a login)"
                )
            self._last_error = f"broker refused the connection: {reason}{hint}"
            log.error(
                "event=mqtt_connect_refused host=%s port=%d username=%s reason=%s",
                s.host,
                s.port,
                s.username,
                _quote(f"{reason}{hint}"),
            )
            return
        self._connects += 1
        self._last_error = None
        self._accepted_since_wait = True
        client.publish(
            self.status_topic,
            status_payload(self.client_id, True, _now_iso(), "connected"),
            qos=1,
            retain=True,
        )
        self._connected.set()
        log.info(
            "event=mqtt_connected host=%s port=%d client_id=%s tls=%s",
            s.host,
            s.port,
            self.client_id,
            s.tls,
        )
        if s.tls_insecure:
            log.warning(
                'event=mqtt_tls_insecure host=%s warning="server certificate NOT '
                "verified (tls_insecure: true): anyone on the path can impersonate "
                'the broker"',
                s.host,
            )
        self._wake.set()

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        was_connected = self._connected.is_set()
        self._connected.clear()
        if was_connected:
            level = logging.INFO if self._stop.is_set() else logging.WARNING
            log.log(
                level,
                "event=mqtt_disconnected host=%s reason=%s in_flight=%d",
                self.settings.host,
                _quote(str(reason)),
                len(self._inflight),
            )

    def _on_publish(
        self, client: paho.Client, userdata: Any, mid: int, reason: Any, properties: Any
    ) -> None:
        self._acks.put(mid)
        self._wake.set()

    def _network_main(self) -> None:
        s = self.settings
        delay = s.reconnect_min_s
        while not self._stop.is_set():
            self._accepted_since_wait = False
            try:
                self._client.connect(s.host, s.port, s.keepalive_s)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                self._last_error = f"connect failed: {exc}"
                log.warning(
                    "event=mqtt_connect_failed host=%s port=%d error=%s retry_in_s=%.3g",
                    s.host,
                    s.port,
                    _quote(str(exc)),
                    delay,
                )
            else:
                try:
                    rc = MQTTErrorCode.MQTT_ERR_SUCCESS
                    while rc == MQTTErrorCode.MQTT_ERR_SUCCESS:
                        rc = self._client.loop(timeout=_LOOP_TIMEOUT_S)
                except Exception as exc:  # e.g. raised by a callback: reconnect, never die
                    log.exception("event=mqtt_loop_error error=%s", _quote(repr(exc)))
                self._connected.clear()
            if self._stop.is_set():
                break
            if self._accepted_since_wait:
                delay = s.reconnect_min_s
            # Jitter: a fleet of agents must not reconnect in step after a broker restart.
            self._stop.wait(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2.0, s.reconnect_max_s)

    # -- sender --------------------------------------------------------------------------------

    def _sender_main(self) -> None:
        while True:
            self._wake.wait(_SENDER_POLL_S)
            self._wake.clear()
            try:
                self._take_acks()
                if self._sender_stop.is_set():
                    return
                if self._connected.is_set():
                    self._hand_over()
                self._update_idle()
            except OutboxError as exc:
                self._last_error = str(exc)
                log.error("event=mqtt_outbox_error error=%s", _quote(str(exc)))
                self._sender_stop.wait(_SENDER_POLL_S)
            except Exception as exc:  # a bug must not end delivery silently: log, go on
                log.exception("event=mqtt_sender_error error=%s", _quote(repr(exc)))
                self._sender_stop.wait(_SENDER_POLL_S)

    def _hand_over(self) -> None:
        assert self._outbox is not None
        room = self.settings.max_inflight - len(self._inflight)
        while room > 0 and self._connected.is_set():
            batch = self._outbox.pending(self._handed_seq, room)
            if not batch:
                return
            for queued in batch:
                m = queued.message
                try:
                    info = self._client.publish(m.topic, m.payload, qos=1, retain=m.retain)
                except ValueError as exc:  # e.g. over MQTT's 256 MB: it never will be sent
                    self._outbox.discard(queued.seq, f"message {m.message_id}: {exc}")
                    continue
                # NO_CONN: paho keeps the message and sends it after the next CONNACK.
                if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
                    log.warning(
                        "event=mqtt_publish_refused message_id=%s rc=%s",
                        m.message_id,
                        paho.error_string(info.rc),
                    )
                    return
                self._inflight[info.mid] = queued.seq
                self._handed_seq = queued.seq
                self._handed += 1
            room = self.settings.max_inflight - len(self._inflight)

    def _take_acks(self) -> None:
        # Under _ack_lock, so that unprocessed_acks() never sees an ack taken off the queue
        # whose row is not deleted yet.
        with self._ack_lock:
            seqs = []
            while True:
                try:
                    mid = self._acks.get_nowait()
                except queue.Empty:
                    break
                seq = self._inflight.pop(mid, None)
                if seq is not None:  # else the status message, which is not in the outbox
                    seqs.append(seq)
            if seqs and self._outbox is not None:
                self._outbox.ack(seqs)
                self._acknowledged += len(seqs)

    def _update_idle(self) -> None:
        assert self._outbox is not None
        if not self._inflight and not self._outbox.pending(self._handed_seq, 1):
            self._idle.set()
        else:
            self._idle.clear()


def _write_in_network_thread(client: paho.Client, userdata: Any, sock: Any) -> None:
    """paho's register-write hook: nothing to do, the network thread's loop() writes."""


def _quote(text: str) -> str:
    """A logfmt value: quoted, inner quotes escaped, on one line."""
    flat = " ".join(text.split())
    return '"' + flat.replace("\\", "\\\\").replace('"', '\\"') + '"'
