"""The MQTT side of `jha fleet`: a persistent session (MQTT 5, clean_start false, a session that
never expires, a fixed client id) subscribed at QoS 1 to every source's report, health and
status topics, with manual acknowledgements.

Threads, and why: paho's network thread only queues what arrives; a writer thread parses a batch,
stores it in one transaction and, once it is committed, acknowledges each message. A message is
therefore acknowledged only when it is in the database (or refused for good): kill -9 at any
point loses nothing, because the broker redelivers whatever was not acknowledged, and the store
ignores what it already holds. Acknowledgements are sent in the order the messages came (MQTT
asks for it), and only on the connection that received them: after a reconnect the broker
redelivers with packet ids that may be reused, so an old id must not be acknowledged.

A refused message (agent.fleet.messages) is logged, counted and acknowledged: redelivering it
would never make it valid.
"""

from __future__ import annotations

import logging
import os
import queue
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
import psycopg
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from agent.errors import ConfigError
from agent.fleet.messages import Message, PayloadError, parse_message
from agent.fleet.settings import BrokerSettings, FleetSettings
from agent.fleet.store import BatchResult, Store
from agent.logfmt import kv

log = logging.getLogger(__name__)

BATCH_MAX = 1000  # messages per transaction
BATCH_WINDOW_S = 0.02
_NEVER_EXPIRES = 0xFFFFFFFF  # MQTT 5 session expiry interval: the broker keeps the session
# A fault point for the tests' kill -9 at the worst moment: committed, not acknowledged.
FAILPOINT_ENV = "JHA_FLEET_FAILPOINT"


@dataclass(frozen=True)
class IngestStats:
    connected: bool
    received: int
    stored: int
    duplicates: int
    rejected: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    db_errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class _Incoming:
    generation: int  # the connection it came on
    mid: int
    qos: int
    message: Message | None  # None: refused (logged and counted when it arrived)


class Ingest:
    def __init__(
        self,
        settings: FleetSettings,
        store: Store,
        broker_password: str | None,
        reconnect_store: Callable[[], Store] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self._reconnect_store = reconnect_store  # () -> Store, after a lost database link
        self.prefixes = tuple(s.topic_prefix for s in settings.sources)
        self.connected = threading.Event()
        self.subscribed = threading.Event()  # the broker confirmed this connection's SUBSCRIBE
        self._queue: queue.Queue[_Incoming] = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._generation = 0
        self._received = self._stored = self._duplicates = self._db_errors = 0
        self._rejected: Counter[str] = Counter()
        self._failpoint = os.environ.get(FAILPOINT_ENV, "")
        self.client = self._make_client(settings.broker, broker_password)
        self._writer = threading.Thread(target=self._write_loop, name="jha-fleet-writer")

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        b = self.settings.broker
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = _NEVER_EXPIRES
        props.ReceiveMaximum = b.max_inflight
        self.client.connect_async(
            b.host, b.port, b.keepalive_s, clean_start=False, properties=props
        )
        self._writer.start()
        self.client.loop_start()

    def stop(self) -> None:
        """Disconnect (what is not acknowledged stays queued at the broker), end the writer."""
        self._stop.set()
        self.client.disconnect()
        self.client.loop_stop()
        self._writer.join(timeout=30)

    def alive(self) -> bool:
        return self._writer.is_alive()

    def stats(self) -> IngestStats:
        with self._lock:
            return IngestStats(
                self.connected.is_set(),
                self._received,
                self._stored,
                self._duplicates,
                sum(self._rejected.values()),
                dict(self._rejected),
                self._db_errors,
            )

    # -- paho ----------------------------------------------------------------------------------

    def _make_client(self, b: BrokerSettings, password: str | None) -> paho.Client:
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=b.client_id,
            protocol=paho.MQTTv5,
            manual_ack=True,
        )
        # paho's type hints say int; its back-off arithmetic takes seconds as floats.
        client.reconnect_delay_set(b.reconnect_min_s, b.reconnect_max_s)  # type: ignore[arg-type]
        if b.username is not None:
            client.username_pw_set(b.username, password)
        context = _tls(b)
        if context is not None:
            client.tls_set_context(context)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        client.on_subscribe = self._on_subscribe
        return client

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        b = self.settings.broker
        if reason.is_failure:
            log.error(kv("fleet_mqtt_refused", host=b.host, port=b.port, reason=str(reason)))
            return
        # Subscribing again is harmless with retain handling 1: retained messages come only
        # for a subscription the session did not hold (the first start, or a new source).
        options = SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB)
        group = self.settings.broker.shared_group
        share = "" if group is None else f"$share/{group}/"
        topics = []
        for prefix in self.prefixes:
            for pattern in ("+/report", "+/+/health", "agent/+/status"):
                topics.append((f"{share}{prefix}/{pattern}", options))
        client.subscribe(topics)
        self.connected.set()
        log.info(
            kv(
                "fleet_mqtt_connected",
                host=b.host,
                port=b.port,
                client_id=b.client_id,
                session_present=str(bool(flags.session_present)).lower(),
            )
        )

    def _on_subscribe(
        self, client: paho.Client, userdata: Any, mid: int, reasons: Any, properties: Any
    ) -> None:
        refused = [str(r) for r in reasons if r.is_failure]
        if refused:
            log.error(kv("fleet_mqtt_subscribe_refused", reasons=",".join(refused)))
            return
        self.subscribed.set()
        log.info(kv("fleet_mqtt_subscribed", topics=len(reasons)))

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        with self._lock:
            self._generation += 1
        self.connected.clear()
        self.subscribed.clear()
        level = logging.INFO if self._stop.is_set() else logging.WARNING
        log.log(level, kv("fleet_mqtt_disconnected", reason=str(reason)))

    def _on_message(self, client: paho.Client, userdata: Any, msg: paho.MQTTMessage) -> None:
        with self._lock:
            generation = self._generation
            self._received += 1
        # Parsed here, in paho's thread, so that it overlaps the writer's wait on the database.
        try:
            message: Message | None = parse_message(
                msg.topic, msg.payload, self.prefixes, self.settings.max_payload_bytes
            )
        except PayloadError as exc:
            self._reject(msg.topic, len(msg.payload), str(exc))
            message = None
        self._queue.put(_Incoming(generation, msg.mid, msg.qos, message))

    # -- the writer ----------------------------------------------------------------------------

    def _write_loop(self) -> None:
        while not self._stop.is_set():
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            # Group commit: what arrives within BATCH_WINDOW_S shares one transaction (one
            # fsync); a lone message waits at most that long.
            batch = [first]
            deadline = time.monotonic() + BATCH_WINDOW_S
            while len(batch) < BATCH_MAX:
                try:
                    batch.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            self._write(batch)

    def _write(self, batch: list[_Incoming]) -> None:
        parsed = [item.message for item in batch if item.message is not None]
        while not self._stop.is_set():
            try:
                result = self.store.store_batch(parsed)
                break
            except psycopg.OperationalError as exc:
                self._database_lost(exc)
            except psycopg.Error as exc:
                # One message the database refuses must not hold back the others: one by one.
                log.warning(kv("fleet_batch_refused", error=type(exc).__name__, size=len(parsed)))
                result = self._one_by_one(parsed)
                break
        else:
            return  # stopping: nothing acknowledged, the broker redelivers at the next start
        with self._lock:
            self._stored += result.stored
            self._duplicates += result.duplicates
            current = self._generation
        if result.duplicates:
            log.info(kv("fleet_duplicates", count=result.duplicates))
        if self._failpoint == "after_commit":
            os._exit(137)  # what kill -9 right after the commit leaves: nothing acknowledged
        for item in batch:
            if item.qos > 0 and item.generation == current:
                self.client.ack(item.mid, item.qos)

    def _one_by_one(self, parsed: list[Message]) -> BatchResult:
        stored = duplicates = 0
        for m in parsed:
            try:
                r = self.store.store_batch([m])
                stored, duplicates = stored + r.stored, duplicates + r.duplicates
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                self._rejected["database refused"] += 1
                log.warning(kv("fleet_message_rejected", reason=f"database: {type(exc).__name__}"))
        return BatchResult(stored, duplicates)

    def _database_lost(self, exc: Exception) -> None:
        with self._lock:
            self._db_errors += 1
        log.warning(kv("fleet_database_error", error=" ".join(str(exc).split())[:300]))
        self._stop.wait(1.0)
        if self._reconnect_store is None:
            return
        try:
            self.store = self._reconnect_store()
        except psycopg.Error as again:
            log.warning(kv("fleet_database_reconnect_failed", error=type(again).__name__))

    def _reject(self, topic: str, size: int, reason: str) -> None:
        with self._lock:
            self._rejected[reason.split(":")[0]] += 1
        log.warning(
            kv(
                "fleet_message_rejected",
                topic=topic[:200].encode("unicode_escape").decode("ascii"),
                bytes=size,
                reason=reason,
            )
        )


def _tls(b: BrokerSettings) -> ssl.SSLContext | None:
    """Verified TLS unless tls_insecure, as the agent's publisher (agent.publish.mqtt.security)."""
    if not b.tls:
        return None
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=b.ca_file)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if b.cert_file is not None and b.key_file is not None:
            ctx.load_cert_chain(b.cert_file, b.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"broker TLS files cannot be loaded: {exc}") from None
    if b.tls_insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
