"""The store-and-forward outbox: order, acknowledgement, the bound (oldest reports dropped, latest
health kept), restart, kill -9 mid-write, and a corrupt file."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.publish.mqtt.message import OutMessage
from agent.publish.mqtt.outbox import Outbox, OutboxError
from tests.support.paths import ROOT


def report(mid: str, size: int = 10) -> OutMessage:
    return OutMessage(mid, "report", "jha/r/report", b"r" * size, retain=False)


def health(mid: str, joint: str = "J1", size: int = 10) -> OutMessage:
    topic = f"jha/r/{joint}/health"
    return OutMessage(mid, "health", topic, b"h" * size, retain=True, supersedes=topic)


def ids(box: Outbox) -> list[str]:
    return [q.message.message_id for q in box.pending(0, 10_000)]


def test_put_pending_ack_in_order(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.sqlite3", 100, 10_000) as box:
        box.put([report("r1"), health("h1")])
        box.put([report("r2")])
        queued = box.pending(0, 10)
        assert [q.message for q in queued] == [report("r1"), health("h1"), report("r2")]
        assert [q.message.message_id for q in box.pending(queued[0].seq, 10)] == ["h1", "r2"]
        assert box.ack([queued[0].seq, queued[2].seq, 999]) == 2
        assert ids(box) == ["h1"]
        assert box.stats().messages == 1


def test_newer_health_supersedes_unsent_older_one(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.sqlite3", 100, 10_000) as box:
        box.put([report("r1"), health("h1", "J1"), health("k1", "J2")])
        result = box.put([report("r2"), health("h2", "J1")])
        assert result.superseded == 1
        assert ids(box) == ["r1", "k1", "r2", "h2"]
        assert box.stats().superseded_total == 1


def test_bound_drops_oldest_reports_never_latest_health(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "agent.publish.mqtt.outbox")
    with Outbox(tmp_path / "o.sqlite3", max_messages=10, max_bytes=10_000) as box:
        for i in range(8):
            box.put([report(f"r{i}"), health(f"h{i}", "J1"), health(f"k{i}", "J2")])
        queued = ids(box)
        assert len(queued) == 10
        assert {"h7", "k7"} <= set(queued)
        assert [m for m in queued if m.startswith("r")] == [f"r{i}" for i in range(8)]
        box.put([report("r8"), health("h8", "J1")])
        # 8 reports + h8 + k7 + r8 = 11 rows: the oldest report goes.
        assert ids(box)[0] == "r1"
        assert box.stats().dropped_total == 1
    assert "event=mqtt_outbox_drop message_id=r0" in caplog.text
    assert "reason=max_messages" in caplog.text


def test_byte_bound_drops_reports_until_under(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.sqlite3", max_messages=1000, max_bytes=1000) as box:
        box.put([health("h", size=300)])
        for i in range(5):
            box.put([report(f"r{i}", size=300)])
        assert ids(box) == ["h", "r3", "r4"]
        assert box.stats().payload_bytes == 900
        assert box.stats().dropped_total == 3
        # Health alone past the bound is kept: it is never dropped.
        box.put([health("h2", "J2", size=900)])
        assert ids(box) == ["h", "h2"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["report", "J1", "J2", "J3"]), st.integers(1, 400)),
        min_size=1,
        max_size=30,
    )
)
def test_bound_properties(ops: list[tuple[str, int]]) -> None:
    with Outbox(":memory:", max_messages=6, max_bytes=1500) as box:
        latest: dict[str, str] = {}
        for n, (what, size) in enumerate(ops):
            m = report(f"m{n}", size) if what == "report" else health(f"m{n}", what, size)
            box.put([m])
            if what != "report":
                latest[what] = m.message_id
            queued = box.pending(0, 1000)
            held = {q.message.message_id for q in queued}
            assert set(latest.values()) <= held  # the latest health of every joint is kept
            reports = [q for q in queued if q.message.kind == "report"]
            over = len(queued) > 6 or sum(len(q.message.payload) for q in queued) > 1500
            assert not (over and reports)  # over the bound only when no report is left
            seqs = [q.seq for q in queued]
            assert seqs == sorted(seqs)


def test_survives_reopen_with_sequence_never_reused(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    with Outbox(path, 100, 10_000) as box:
        box.put([report("r1"), report("r2")])
        last = box.pending(0, 10)[-1].seq
        box.ack([q.seq for q in box.pending(0, 10)])
    with Outbox(path, 100, 10_000) as box:
        box.put([report("r3")])
        assert box.pending(0, 10)[0].seq > last
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_one_user_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    first = Outbox(path, 100, 10_000)
    with pytest.raises(OutboxError, match="in use by another publisher"):
        Outbox(path, 100, 10_000)
    first.close()
    Outbox(path, 100, 10_000).close()


def test_a_message_id_is_queued_once(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.sqlite3", 100, 10_000) as box:
        box.put([report("r1"), health("h1")])
        box.put([report("r2"), report("r1"), health("h1")])  # a retry of the same report
        assert ids(box) == ["r1", "r2", "h1"]


def test_a_failed_write_queues_nothing(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    with Outbox(path, 100, 10_000) as box:
        box.put([report("r1")])
        unwritable = OutMessage("r3", "report", "t", object(), retain=False)  # type: ignore[arg-type]
        with pytest.raises(OutboxError, match=r"o\.sqlite3: MQTT outbox write failed"):
            box.put([report("r2"), unwritable])
        assert ids(box) == ["r1"]  # r2 went with the failed transaction


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("payload", "text, not bytes", "payload of type str, expected bytes"),
        ("payload", 7, "payload of type int"),
        ("kind", "bogus", "kind 'bogus', expected one of report, health, status"),
        ("topic", "a/b/#", "topic 'a/b/#' is no MQTT topic name"),
        ("topic", b"jha/r/report", "topic b'jha/r/report' is no MQTT topic name"),
        ("retain", 5, "retain 5, expected 0 or 1"),
        ("supersedes", b"x", "supersedes b'x', expected text or null"),
        ("message_id", "", "message_id ''"),
    ],
)
def test_a_damaged_row_is_discarded_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, column: str, value: object, why: str
) -> None:
    # Found by the outbox fuzzer (tests/fuzz/test_fuzz_outbox.py): such a row used to crash
    # the reader or reach the broker as a wrong message, and would block everything behind it.
    path = tmp_path / "o.sqlite3"
    with Outbox(path, 100, 10_000) as box:
        box.put([report("r1"), report("r2"), report("r3")])
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE outbox SET {column} = ? WHERE message_id = 'r2'", (value,))
    db.close()
    with Outbox(path, 100, 10_000) as box:
        assert ids(box) == ["r1", "r3"]
        assert box.stats().discarded_total == 1
        assert box.stats().messages == 2
        assert [q.message.message_id for q in box.pending(0, 1)] == ["r1"]
    assert "event=mqtt_outbox_discard" in caplog.text
    assert why in caplog.text


def test_text_that_is_not_utf8_is_one_bad_row_not_a_dead_outbox(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    with Outbox(path, 100, 10_000) as box:
        box.put([report("r1"), report("r2")])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE outbox SET topic = CAST(X'6A68612FFF' AS TEXT) WHERE message_id='r1'")
    db.close()
    with Outbox(path, 100, 10_000) as box:
        assert ids(box) == ["r2"]


def test_a_damaged_schema_name_is_an_outbox_error(tmp_path: Path) -> None:
    # Found by the outbox fuzzer: SQLite's message quotes the name, which Python cannot decode.
    path = tmp_path / "o.sqlite3"
    Outbox(path, 100, 10_000).close()
    data = bytearray(path.read_bytes())
    at = data.find(b"indexsqlite_autoindex_c")
    assert at > 0
    data[at + 5] = 0x80
    path.write_bytes(bytes(data))
    with pytest.raises(OutboxError, match=r"o\.sqlite3: "):
        Outbox(path, 100, 10_000)


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(OutboxError, match=r"o\.sqlite3: not a usable MQTT outbox"):
        Outbox(path, 100, 10_000)


def test_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    sqlite3.connect(path).execute("PRAGMA user_version=99").connection.close()
    with pytest.raises(OutboxError, match="version 99 is newer"):
        Outbox(path, 100, 10_000)


_WRITER = textwrap.dedent("""
    import sys
    from agent.publish.mqtt.outbox import Outbox
    from agent.publish.mqtt.message import OutMessage
    box = Outbox(sys.argv[1], 1_000_000, 1 << 30)
    n = 0
    while True:
        batch = [OutMessage(f"m{n}-{k}", "report", "t", b"x" * 2000, False) for k in range(3)]
        box.put(batch)
        # Printed only after put() returned: from here on the daemon believes it is queued.
        print(n, flush=True)
        n += 1
""")


def test_kill_9_mid_write_loses_nothing_that_was_queued(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite3"
    for round_ in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        confirmed = []
        for line in proc.stdout:
            confirmed.append(int(line))
            if len(confirmed) >= 30 + 17 * round_:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        proc.stdout.close()
        with Outbox(path, 1_000_000, 1 << 30) as box:
            held = set(ids(box))
            for n in confirmed:
                assert {f"m{n}-0", f"m{n}-1", f"m{n}-2"} <= held
            # A batch is whole or absent: never a torn report.
            batches = {m.rsplit("-", 1)[0] for m in held}
            assert all({f"{b}-0", f"{b}-1", f"{b}-2"} <= held for b in batches)
            box.ack([q.seq for q in box.pending(0, 1_000_000)])
