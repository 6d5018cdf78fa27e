"""The MQTT side of `jha fleet`: a persistent session (agent.fleet.mqtt_session: MQTT 5, clean
start off, a session that never expires, a fixed client id) subscribed at QoS 1 to every
source's report, health and status topics, acknowledged by hand.

Threads, and why: the session's thread parses what arrives (overlapping the writer's wait on
the database) and queues it; a writer thread stores a batch in one transaction and, once it is
committed, acknowledges its messages. A message is therefore acknowledged only when it is in the
database (or refused for good): kill -9 at any point loses nothing, because the broker
redelivers whatever was not acknowledged, and the store ignores what it already holds.
Acknowledgements go in the order the messages came (MQTT asks for it), and only on the
connection that received them.

A refused message (agent.fleet.messages) is logged, counted and acknowledged: redelivering it
would never make it valid.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from agent.fleet.binding import Bindings
from agent.fleet.messages import Message, PayloadError, ahead_of_clock, parse_message
from agent.fleet.mqtt_session import Delivery, SubscriberSession
from agent.fleet.settings import FleetSettings
from agent.fleet.store import BatchResult, Store
from agent.logfmt import kv
from agent.publish.mqtt.security import tls_context

log = logging.getLogger(__name__)

# Messages per transaction: at most half of what the broker may have in flight by default
# (broker.max_inflight), so that it keeps sending while a batch is being committed.
BATCH_MAX = 500
BATCH_WINDOW_S = 0.02
PARTITIONS_EVERY_S = 3600.0  # this month's and next month's partitions, and the retention
PARTITIONS_RETRY_S = 60.0  # after the database refused them (a lock wait, a lost connection)
# The largest packet the broker may send this client (CONNECT's Maximum Packet Size): a payload
# at max_payload_bytes with room for its topic and properties. The broker drops a larger one
# (and logs it) instead of sending it: this process never buffers an unbounded packet.
_PACKET_HEADROOM = 128 * 1024
# The rejection counter's name for an id stored before with another time (agent.fleet.store).
REPLAYED = "id stored before with another time"
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
    packet_id: int
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
        self.bindings = Bindings.of(settings.sources)
        self._queue: queue.Queue[list[_Incoming]] = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._received = self._stored = self._duplicates = self._db_errors = 0
        self._rejected: Counter[str] = Counter()
        self._failpoint = os.environ.get(FAILPOINT_ENV, "")
        self.session = SubscriberSession(
            settings.broker,
            broker_password,
            self._filters(),
            self._on_messages,
            settings.max_payload_bytes + _PACKET_HEADROOM,
            tls_context(settings.broker),
        )
        self.connected = self.session.connected
        self.subscribed = self.session.subscribed
        self._writer = threading.Thread(target=self._write_loop, name="jha-fleet-writer")

    def _filters(self) -> list[str]:
        group = self.settings.broker.shared_group
        share = "" if group is None else f"$share/{group}/"
        return [
            f"{share}{prefix}/{pattern}"
            for prefix in self.prefixes
            for pattern in ("+/report", "+/+/health", "agent/+/status")
        ]

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._writer.start()
        self.session.start()

    def stop(self) -> None:
        """End the writer (its batch committed and acknowledged, or left for redelivery), then
        disconnect: what is not acknowledged stays queued at the broker."""
        self._stop.set()
        self._writer.join(timeout=30)
        self.session.stop()

    def alive(self) -> bool:
        return self._writer.is_alive() and self.session.alive()

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

    # -- the session's thread ------------------------------------------------------------------

    def _on_messages(self, deliveries: list[Delivery]) -> None:
        limit = self.settings.max_payload_bytes
        now = datetime.now(UTC)
        incoming = []
        for d in deliveries:
            try:
                message: Message | None = parse_message(d.topic, d.payload, self.prefixes, limit)
            except PayloadError as exc:
                self._reject(d.topic, len(d.payload), str(exc))
                message = None
            if message is not None:
                refused = ahead_of_clock(message, now, self.settings.max_clock_skew_s)
                refused = refused or self.bindings.problem(message)
                if refused is not None:
                    self._reject(d.topic, len(d.payload), refused)
                    message = None
            incoming.append(_Incoming(d.generation, d.packet_id, d.qos, message))
        with self._lock:
            self._received += len(deliveries)
        self._queue.put(incoming)

    # -- the writer ----------------------------------------------------------------------------

    def _write_loop(self) -> None:
        next_partitions = 0.0  # at once: the month may have turned while the service was away
        carried: list[_Incoming] = []  # parsed, not yet in a batch
        while not self._stop.is_set():
            # Between batches, on this thread: the partitions' DDL never waits on our own rows.
            if time.monotonic() >= next_partitions:
                kept = self._keep_partitions()
                wait_s = PARTITIONS_EVERY_S if kept else PARTITIONS_RETRY_S
                next_partitions = time.monotonic() + wait_s
            if carried:
                batch, carried = carried, []
            else:
                try:
                    batch = self._queue.get(timeout=0.2)
                except queue.Empty:
                    continue
            # Group commit: what arrives within BATCH_WINDOW_S shares one transaction (one
            # fsync); a lone message waits at most that long.
            deadline = time.monotonic() + BATCH_WINDOW_S
            while len(batch) < BATCH_MAX:
                try:
                    batch += self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
            # Never more than BATCH_MAX: a batch holds its messages unacknowledged until its
            # commit, and the session reads nothing past max_inflight unacknowledged; a batch of
            # everything parsed would leave it nothing to read while that batch is committed.
            batch, carried = batch[:BATCH_MAX], batch[BATCH_MAX:]
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
            self._duplicates += result.duplicates - result.replayed
            if result.replayed:
                self._rejected[REPLAYED] += result.replayed
        if result.duplicates > result.replayed:
            log.info(kv("fleet_duplicates", count=result.duplicates - result.replayed))
        if result.replayed:
            log.warning(kv("fleet_message_rejected", reason=REPLAYED, count=result.replayed))
        if self._failpoint == "after_commit":
            os._exit(137)  # what kill -9 right after the commit leaves: nothing acknowledged
        by_connection: dict[int, list[int]] = {}
        for item in batch:
            if item.qos > 0:
                by_connection.setdefault(item.generation, []).append(item.packet_id)
        for generation, packet_ids in by_connection.items():
            self.session.ack(generation, packet_ids)

    def _keep_partitions(self) -> bool:
        """False when the database refused or was away: tried again in PARTITIONS_RETRY_S (rows
        of a month without its partition wait in the default one meanwhile, nothing is lost)."""
        retention = self.settings.database.retention_months
        try:
            dropped = self.store.keep_partitions(retention)
        except psycopg.Error as exc:  # a lost database shows again at the next batch
            log.warning(
                kv(
                    "fleet_partitions_failed",
                    error=" ".join(str(exc).split())[:300],
                    retry_s=PARTITIONS_RETRY_S,
                )
            )
            return False
        if dropped:
            log.info(kv("fleet_history_dropped", partitions=dropped, retention_months=retention))
        return True

    def _one_by_one(self, parsed: list[Message]) -> BatchResult:
        stored = duplicates = replayed = 0
        for m in parsed:
            try:
                r = self.store.store_batch([m])
                stored, duplicates = stored + r.stored, duplicates + r.duplicates
                replayed += r.replayed
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:
                self._rejected["database refused"] += 1
                log.warning(kv("fleet_message_rejected", reason=f"database: {type(exc).__name__}"))
        return BatchResult(stored, duplicates, replayed)

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
