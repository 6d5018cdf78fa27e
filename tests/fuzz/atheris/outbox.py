"""atheris target `mqtt_outbox`: the MQTT messages the agent reads back from its outbox.

The agent subscribes to nothing: the MQTT payloads it reads are its own, queued in the SQLite
outbox (agent/publish/mqtt/outbox.py) and read back by the sender and after every restart. The
input damages a real outbox file written by Outbox.put; the first byte picks how:
  0, 1: rows appended with any values in any column: each value is `tag, n, n bytes` with tag
        NULL, INTEGER, REAL, TEXT, BLOB, or text that is not UTF-8 (what SQLite keeps when
        another writer or a damaged page put it there); with 1, one schema change first;
  2:    bytes of the file itself overwritten (`offset hi, offset lo, value` triples).
Then Outbox() opens it, pending() reads what would be sent, ack() acknowledges one.

Property (tests/fuzz/test_fuzz_outbox.py states the same): QueuedMessages whose OutMessage
fields have their declared types, in send order, or OutboxError naming the file; never
another exception.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sqlite3
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.publish.mqtt.outbox import Outbox, OutboxError
from tests.fuzz.atheris.oracle import SCRATCH, Target, check, guarded
from tests.fuzz.cases.outbox import check_message, seed_file

_DIR = SCRATCH / f"jha-atheris-outbox-{os.getpid()}"
_SERIAL = itertools.count()
COLUMNS = ("seq", "message_id", "kind", "topic", "payload", "retain", "supersedes")
SCHEMA_EDITS = (
    "DROP TABLE counters",
    "PRAGMA user_version=2",
    "PRAGMA user_version=-1",
    "DROP INDEX outbox_supersedes; ALTER TABLE outbox DROP COLUMN supersedes",
    "ALTER TABLE outbox RENAME COLUMN topic TO t",
    "DELETE FROM outbox",
    "DROP TABLE outbox; CREATE TABLE outbox (seq, message_id, kind, topic, payload, retain, "
    "supersedes)",
)
_TEXT_NOT_UTF8 = 5


class _Checks:
    def check(self, ok: bool, what: str) -> None:
        check(ok, what)


def _value(tag: int, raw: bytes) -> tuple[str, Any]:
    """(SQL placeholder, parameter) of one column value."""
    kind = tag % 6
    if kind == 0:
        return "?", None
    if kind == 1:
        return "?", int.from_bytes(raw[:8].ljust(8, b"\0"), "little", signed=True)
    if kind == 2:
        return "?", struct.unpack("<d", raw[:8].ljust(8, b"\0"))[0]
    if kind == 3:
        return "?", raw.decode("utf-8", "replace")
    if kind == 4:
        return "?", raw
    return "CAST(? AS TEXT)", raw  # the bytes kept as TEXT, UTF-8 or not


def _rows(body: bytes) -> Iterator[list[tuple[str, Any]]]:
    values: list[tuple[str, Any]] = []
    pos = 0
    while pos + 2 <= len(body):
        tag, n = body[pos], body[pos + 1] % 48
        values.append(_value(tag, body[pos + 2 : pos + 2 + n]))
        pos += 2 + n
        if len(values) == len(COLUMNS):
            yield values
            values = []


def _prepare(data: bytes, path: Path) -> None:
    seed = bytearray(seed_file())
    mode, body = data[0] % 3, data[1:]
    if mode == 2:
        for i in range(0, len(body) - 2, 3):
            offset = (body[i] << 8 | body[i + 1]) % len(seed)
            seed[offset] = body[i + 2]
        path.write_bytes(bytes(seed))
        return
    path.write_bytes(bytes(seed))
    db = sqlite3.connect(path, isolation_level=None)
    try:
        if mode == 1 and body:
            with contextlib.suppress(sqlite3.Error):
                db.executescript(SCHEMA_EDITS[body[0] % len(SCHEMA_EDITS)])
            body = body[1:]
        for row in _rows(body):
            marks = ", ".join(m for m, _ in row)
            # A row the table's constraints refuse is no state the file can hold: skipped.
            with contextlib.suppress(sqlite3.Error):
                db.execute(
                    f"INSERT INTO outbox ({', '.join(COLUMNS)}) VALUES ({marks})",
                    [v for _, v in row],
                )
    finally:
        db.close()


def _outbox(data: bytes) -> None:
    if not data:
        return
    _DIR.mkdir(exist_ok=True)
    for leftover in _DIR.iterdir():
        leftover.unlink(missing_ok=True)
    # A new name per input: a connection left open by a failed open must not reach into the
    # next input's file.
    path = _DIR / f"outbox-{next(_SERIAL)}.sqlite"
    _prepare(data, path)
    try:
        with Outbox(path, max_messages=100, max_bytes=1 << 20) as box:
            queued = box.pending(0, 100)
            seqs = [q.seq for q in queued]
            check(seqs == sorted(set(seqs)), f"send order {seqs}")
            for q in queued:
                check(type(q.seq) is int and q.seq > 0, f"seq {q.seq!r}")
                check_message(_Checks(), q.message)  # type: ignore[arg-type]
            box.ack(seqs[:1])
    except OutboxError as exc:
        check(path.name in str(exc), f"OutboxError not naming the file: {exc}")


def _record(*values: tuple[int, bytes]) -> bytes:
    return b"".join(bytes((tag, len(raw))) + raw for tag, raw in values)


@functools.cache
def _row_seeds() -> tuple[bytes, ...]:
    good = _record(
        (0, b""),
        (3, b"r-9"),
        (3, b"report"),
        (3, b"jha/robot1/report"),
        (4, b'{"joints":[]}'),
        (1, b"\0"),
        (0, b""),
    )
    health = _record(
        (1, b"\x09"),
        (3, b"h-9"),
        (3, b"health"),
        (3, b"jha/r/a1/health"),
        (4, b"{}"),
        (1, b"\1"),
        (3, b"jha/r/a1/health"),
    )
    odd = _record(
        (0, b""),
        (5, b"m\xff"),
        (3, b"status"),
        (5, b"jha/\xfe"),
        (3, b"x"),
        (2, b"\0" * 7 + b"\x40"),
        (4, b"\x80"),
    )
    return (b"\0" + good + health, b"\1\3" + good + odd, b"\0" + odd)


def seeds() -> Iterator[bytes]:
    yield from _row_seeds()
    yield b"\2" + bytes((0x0D, 0xC2, 0x80))  # a byte of sqlite_master's object names


TARGET = Target("mqtt_outbox", guarded(_outbox), seeds, doc=__doc__ or "")
