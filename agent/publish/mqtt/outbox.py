"""Store-and-forward outbox: every MQTT message is on disk before it is sent, and leaves the disk
only once the broker has acknowledged it.

Why SQLite (WAL, synchronous=FULL) rather than one fsync'd file per message: the messages of one
report go in with one transaction (all or none), the send order is the AUTOINCREMENT sequence
(never reused, so it survives deletes), and the size bound and the "latest health per joint"
rule are single queries. synchronous=FULL, unlike the history's NORMAL, fsyncs the WAL at each
commit: a message the daemon was told is queued must survive a power cut too, and this table
sees one commit per report, so the cost is a few fsyncs per cycle. A kill -9 at any point
leaves either the whole commit or nothing of it.

One publisher at a time: the outbox is claimed with an exclusive flock on `<file>.lock` (released
by close, or by the kernel when the process dies); a second claimant gets an OutboxError.

Bound: past `max_messages` rows or `max_bytes` payload bytes, the oldest full reports are
dropped first (each drop logged and counted in `counters`). Health rows are never dropped: a
new health message of a joint replaces the unsent older one of the same topic instead (retained
topics only ever show the latest), so there is at most one per joint.

Slightly over 400 lines on purpose: Outbox is one class around one SQLite file, and its row
checks belong with the queries that read the rows.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from agent.errors import EX_IOERR, AgentError
from agent.publish.mqtt.message import MessageKind, OutMessage

log = logging.getLogger(__name__)

OUTBOX_VERSION = 1
OUTBOX_FILE = "mqtt_outbox.sqlite3"  # in the state directory
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS outbox (
        seq        INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id TEXT NOT NULL UNIQUE,
        kind       TEXT NOT NULL,
        topic      TEXT NOT NULL,
        payload    BLOB NOT NULL,
        retain     INTEGER NOT NULL,
        supersedes TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS outbox_supersedes ON outbox (supersedes)",
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


# SQLite's own errors, and a UnicodeDecodeError when an error message quotes a damaged name in
# the file's schema (Python cannot decode the message, so it is no sqlite3.Error).
_DB_ERRORS = (sqlite3.Error, UnicodeDecodeError)
_KINDS = tuple(k.value for k in MessageKind)
_TOPIC_FORBIDDEN = ("+", "#", "\x00")


def _row_problem(row: tuple[Any, ...]) -> str | None:
    """Why a row read back cannot be sent as it is; None when it can."""
    _, mid, kind, topic, payload, retain, sup = row
    if type(mid) is not str or not mid:
        return f"message_id {_short(mid)}"
    if kind not in _KINDS:
        return f"message {mid}: kind {_short(kind)}, expected one of {', '.join(_KINDS)}"
    if type(topic) is not str or not topic or any(c in topic for c in _TOPIC_FORBIDDEN):
        return f"message {mid}: topic {_short(topic)} is no MQTT topic name"
    try:
        if len(topic.encode("utf-8")) > 65535:
            return f"message {mid}: topic longer than MQTT allows"
    except UnicodeEncodeError:
        return f"message {mid}: topic {_short(topic)} is not UTF-8"
    if type(payload) is not bytes:
        return f"message {mid}: payload of type {type(payload).__name__}, expected bytes"
    if type(retain) is not int or retain not in (0, 1):
        return f"message {mid}: retain {_short(retain)}, expected 0 or 1"
    if sup is not None and type(sup) is not str:
        return f"message {mid}: supersedes {_short(sup)}, expected text or null"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _quote(text: str) -> str:
    return '"' + " ".join(text.split()).replace("\\", "\\\\").replace('"', '\\"') + '"'


class OutboxError(AgentError):
    """The outbox file cannot be opened or written (corrupt, disk full, newer version)."""

    exit_code = EX_IOERR


@dataclass(frozen=True)
class QueuedMessage:
    seq: int
    message: OutMessage


@dataclass(frozen=True)
class PutResult:
    """What one put did besides queueing: messages dropped by the bound, health superseded."""

    dropped: tuple[str, ...]  # message ids of dropped reports, oldest first
    superseded: int

    def to_dict(self) -> dict[str, Any]:
        return {"dropped": list(self.dropped), "superseded": self.superseded}


@dataclass(frozen=True)
class OutboxStats:
    messages: int
    payload_bytes: int
    dropped_total: int
    superseded_total: int
    discarded_total: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "payload_bytes": self.payload_bytes,
            "dropped_total": self.dropped_total,
            "superseded_total": self.superseded_total,
            "discarded_total": self.discarded_total,
        }


class Outbox:
    """The on-disk queue. Thread-safe: one connection behind a lock (the daemon's executor
    threads put, the sender thread reads and acknowledges)."""

    def __init__(self, path: str | Path, max_messages: int, max_bytes: int) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError("outbox bounds must be positive")
        self.path = Path(path)
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._owner = self._claim()
        try:
            self._db = self._open()
        except BaseException:
            self._release()
            raise

    def _claim(self) -> int | None:
        """An exclusive flock on `<outbox>.lock`: two senders draining one outbox would send
        everything twice and out of order. The kernel drops the lock when the process dies."""
        if str(self.path) == ":memory:":
            return None
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise OutboxError(f"{lock_path}: cannot open the MQTT outbox lock: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise OutboxError(
                f"{self.path}: the MQTT outbox is in use by another publisher (lock "
                f"{lock_path}); close it first"
            ) from None
        return fd

    def _release(self) -> None:
        if self._owner is not None:
            os.close(self._owner)  # closing the descriptor releases the flock
            self._owner = None

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            # Text that is not UTF-8 (a damaged row) must not make every read fail: it is
            # decoded losslessly here and refused row by row (_row_problem).
            db.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        except (OSError, *_DB_ERRORS) as exc:
            raise OutboxError(f"{self.path}: cannot open the MQTT outbox: {exc}") from exc
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > OUTBOX_VERSION:
                raise OutboxError(
                    f"{self.path}: outbox version {version} is newer than this agent's "
                    f"({OUTBOX_VERSION}); refusing to touch it"
                )
            # A damaged page can hand rows back out of seq order, and the sender's cursor would
            # then skip or repeat messages: such a file is refused whole (found by atheris).
            damage = db.execute("PRAGMA quick_check").fetchone()[0]
            if damage != "ok":
                raise OutboxError(
                    f"{self.path}: damaged MQTT outbox ({' '.join(str(damage).split())}); move it "
                    "aside to start empty"
                )
            # seq must be the rowid (INTEGER PRIMARY KEY): in a table of another making it holds
            # any value, text that is not UTF-8 too, and the sender's cursor and every delete
            # go by it (found by atheris).
            seq = [c for c in db.execute("PRAGMA table_info(outbox)") if c[1] == "seq"]
            if seq and (str(seq[0][2]).upper() != "INTEGER" or seq[0][5] != 1):
                raise OutboxError(
                    f"{self.path}: table outbox is not this agent's (seq is not its INTEGER "
                    "PRIMARY KEY); move it aside to start empty"
                )
            with _transaction(db):
                for statement in _SCHEMA:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version={OUTBOX_VERSION}")
        except _DB_ERRORS as exc:
            db.close()
            raise OutboxError(
                f"{self.path}: not a usable MQTT outbox ({exc}); move it aside to start empty"
            ) from exc
        except OutboxError:
            db.close()
            raise
        return db

    def put(self, messages: Sequence[OutMessage]) -> PutResult:
        """Queue `messages` in one durable transaction, then enforce the bound."""
        superseded = 0
        with self._lock, self._guard("write"), _transaction(self._db):
            for m in messages:
                if m.supersedes is not None:
                    superseded += self._db.execute(
                        "DELETE FROM outbox WHERE supersedes = ?", (m.supersedes,)
                    ).rowcount
                # A message id already queued is not queued again: publishing the same report
                # twice (a retry) is harmless.
                self._db.execute(
                    "INSERT INTO outbox (message_id, kind, topic, payload, retain, supersedes)"
                    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING",
                    (m.message_id, m.kind, m.topic, m.payload, int(m.retain), m.supersedes),
                )
            dropped = self._enforce_bound()
            self._bump("dropped_total", len(dropped))
            self._bump("superseded_total", superseded)
        for message_id, topic, size, why in dropped:
            log.warning(
                "event=mqtt_outbox_drop message_id=%s topic=%s payload_bytes=%d reason=%s",
                message_id,
                topic,
                size,
                why,
            )
        return PutResult(tuple(d[0] for d in dropped), superseded)

    def _enforce_bound(self) -> list[tuple[str, str, int, str]]:
        count, total = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox"
        ).fetchone()
        dropped: list[tuple[str, str, int, str]] = []
        if count <= self.max_messages and total <= self.max_bytes:
            return dropped
        rows = self._db.execute(
            "SELECT seq, message_id, topic, LENGTH(payload) FROM outbox"
            " WHERE kind = ? ORDER BY seq",
            (MessageKind.REPORT,),
        ).fetchall()
        for seq, message_id, topic, size in rows:
            if count <= self.max_messages and total <= self.max_bytes:
                break
            why = "max_messages" if count > self.max_messages else "max_bytes"
            self._db.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
            count, total = count - 1, total - size
            dropped.append((message_id, topic, size, why))
        return dropped

    def pending(self, after_seq: int = 0, limit: int = 100) -> list[QueuedMessage]:
        """Queued messages with seq > after_seq, oldest first.

        A row that cannot be a message (damaged file, or written by something else: a value of
        another type, an unknown kind, a topic MQTT refuses) would block everything behind it,
        so it is discarded, logged and counted (`discarded_total`)."""
        found: list[QueuedMessage] = []
        with self._lock, self._guard("read"):
            while len(found) < limit:
                rows = self._db.execute(
                    "SELECT seq, message_id, kind, topic, payload, retain, supersedes FROM outbox"
                    " WHERE seq > ? ORDER BY seq LIMIT ?",
                    (after_seq, limit - len(found)),
                ).fetchall()
                bad = []
                for row in rows:
                    problem = _row_problem(row)
                    if problem is None:
                        seq, mid, kind, topic, payload, retain, sup = row
                        found.append(
                            QueuedMessage(
                                seq,
                                OutMessage(
                                    mid, MessageKind(kind), topic, payload, bool(retain), sup
                                ),
                            )
                        )
                    else:
                        bad.append((row[0], problem))
                if bad:
                    self._discard(bad)
                if not rows or not bad:
                    break
                after_seq = rows[-1][0]
        return found

    def discard(self, seq: int, reason: str) -> None:
        """Delete a message that can never be sent (the client refused it), logged and counted."""
        with self._lock, self._guard("write"):
            self._discard([(seq, reason)])

    def _discard(self, bad: list[tuple[int, str]]) -> None:
        with _transaction(self._db):
            for seq, _ in bad:
                self._db.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
            self._bump("discarded_total", len(bad))
        for seq, problem in bad:
            log.error(
                "event=mqtt_outbox_discard file=%s seq=%d reason=%s",
                self.path,
                seq,
                _quote(problem),
            )

    def ack(self, seqs: Iterable[int]) -> int:
        """Delete acknowledged messages (missing ones, superseded or dropped meanwhile, are
        fine); returns how many rows went."""
        batch = list(seqs)
        if not batch:
            return 0
        with self._lock, self._guard("write"), _transaction(self._db):
            return sum(
                self._db.execute("DELETE FROM outbox WHERE seq = ?", (seq,)).rowcount
                for seq in batch
            )

    def stats(self) -> OutboxStats:
        with self._lock, self._guard("read"):
            count, total = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox"
            ).fetchone()
            counters = dict(self._db.execute("SELECT name, value FROM counters").fetchall())
        return OutboxStats(
            count,
            total,
            counters.get("dropped_total", 0),
            counters.get("superseded_total", 0),
            counters.get("discarded_total", 0),
        )

    def __len__(self) -> int:
        return self.stats().messages

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._release()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _bump(self, name: str, by: int) -> None:
        if by:
            self._db.execute(
                "INSERT INTO counters (name, value) VALUES (?, ?)"
                " ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                (name, by),
            )

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """Turns sqlite3 errors into an OutboxError naming the file and the operation."""
        try:
            yield
        except _DB_ERRORS as exc:
            raise OutboxError(f"{self.path}: MQTT outbox {what} failed: {exc}") from exc


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any error (the connection is in autocommit)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:  # some errors (disk full) have rolled back already
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
