"""Schema migrations of the history: a v1 database with rows in it is brought to the current
version with nothing lost; NE 107 is backfilled from the old status; triggers and report links
are recorded from then on; a newer database is refused."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.health.status import Ne107, Status, TrendPoint, ne107_of
from agent.history.records import TRIGGERS, Estimate
from agent.history.schema import MIGRATIONS, SCHEMA_VERSION, StoreError, migrate, schema_version
from agent.history.store import HistoryStore

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _iso(day: int) -> str:
    return (T0 + timedelta(days=day)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# (joint, day, outcome, status or None, backlash value or None)
V1_ROWS = [
    ("j1", 0, "ok", "ok", 0.5e-3),
    ("j1", 1, "ok", "watch", 1.1e-3),
    ("j1", 2, "ok", "alert", 2.2e-3),
    ("j2", 0, "ok", "unknown", 0.4e-3),
    ("j2", 1, "error", "unknown", None),  # an analysis error with a verdict row
    ("j2", 2, "rejected", None, None),
    ("j3", 0, "aborted", None, None),
]


def v1_database(path: Path) -> None:
    """A database as the version-1 agent left it: MIGRATIONS[:1] and rows written in its SQL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    assert migrate(conn, MIGRATIONS[:1]) == 1
    for joint, day, outcome, status, value in V1_ROWS:
        cur = conn.execute(
            "INSERT INTO cycles (controller, joint, kind, started_at, finished_at, outcome,"
            " reason, capture_path) VALUES ('robot', ?, 'backlash', ?, ?, ?, ?, ?)",
            (
                joint,
                _iso(day),
                _iso(day),
                outcome,
                "" if outcome == "ok" else f"{outcome} why",
                f"/captures/{joint}/{day}.npz",
            ),
        )
        cid = cur.lastrowid
        if value is not None:
            conn.execute(
                "INSERT INTO estimates (cycle_id, indicator, value, unit, detail_json)"
                " VALUES (?, 'backlash_rad', ?, 'rad', '{\"seed\": 3}')",
                (cid, value),
            )
        if status is not None:
            conn.execute(
                "INSERT INTO verdicts (cycle_id, joint, status, reason) VALUES (?, ?, ?, ?)",
                (cid, joint, status, f"{status} because"),
            )
    conn.close()


def dump(path: Path, table: str, columns: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(path) as conn:
        return list(conn.execute(f"SELECT {columns} FROM {table} ORDER BY id"))


def test_v1_database_migrates_with_nothing_lost(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    v1_database(db)
    cycle_cols = (
        "id, controller, joint, kind, started_at, finished_at, outcome, reason, capture_path"
    )
    before = {
        t: dump(db, t, c)
        for t, c in (
            ("cycles", cycle_cols),
            ("estimates", "id, cycle_id, indicator, value, unit, detail_json"),
            ("verdicts", "id, cycle_id, joint, status, reason"),
        )
    }
    with HistoryStore(db) as store:
        assert store.version == SCHEMA_VERSION >= 3
        assert store.history("robot", "j1", "backlash_rad") == [
            TrendPoint(_iso(0), 0.5e-3),
            TrendPoint(_iso(1), 1.1e-3),
            TrendPoint(_iso(2), 2.2e-3),
        ]
        rec = store.latest("robot", "j1")
        assert rec is not None and rec.status == "alert" and rec.ne107 == "out_of_specification"
        assert rec.trigger is None and rec.report_message_id is None  # unknown for old cycles
        assert rec.estimates[0].detail == {"seed": 3}
    after = {
        t: dump(db, t, c)
        for t, c in (
            ("cycles", cycle_cols),
            ("estimates", "id, cycle_id, indicator, value, unit, detail_json"),
            ("verdicts", "id, cycle_id, joint, status, reason"),
        )
    }
    assert after == before
    with sqlite3.connect(db) as conn:
        assert schema_version(conn) == SCHEMA_VERSION
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY 1")]
        ne = dict(conn.execute("SELECT status || ':' || cycle_id, ne107 FROM verdicts"))
        triggers = {r[0] for r in conn.execute("SELECT trigger FROM cycles")}
        assert conn.execute("SELECT COUNT(*) FROM reports").fetchone()[0] == 0
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert triggers == {None}
    # Backfill: our status mapped as ne107_of maps it; an unknown verdict of an error cycle
    # is a failure, of an ok cycle a check-function.
    assert ne == {
        "ok:1": "normal",
        "watch:2": "maintenance_required",
        "alert:3": "out_of_specification",
        "unknown:4": "check_function",
        "unknown:5": "failure",
    }
    for key, signal in ne.items():
        status, cid = key.split(":")
        failed = V1_ROWS[int(cid) - 1][2] == "error"
        assert ne107_of(Status(status), failed=failed).value == signal


def test_every_intermediate_version_migrates(tmp_path: Path) -> None:
    for k in range(1, len(MIGRATIONS)):
        db = tmp_path / f"v{k}.sqlite"
        conn = sqlite3.connect(db, isolation_level=None)
        assert migrate(conn, MIGRATIONS[:k]) == k
        conn.execute(
            "INSERT INTO cycles (controller, joint, kind, started_at, outcome)"
            " VALUES ('c', 'j', 'backlash', '2024-01-01T00:00:00.000000Z', 'ok')"
        )
        conn.close()
        with HistoryStore(db) as store:
            assert store.version == SCHEMA_VERSION
            assert [c.joint for c in store.cycles()] == ["j"]


def test_new_cycles_record_trigger_ne107_and_report(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    v1_database(db)
    with HistoryStore(db) as store:
        ids = [
            store.record_cycle(
                controller="robot",
                joint="j1",
                kind="backlash",
                started_at=T0 + timedelta(days=10),
                finished_at=None,
                estimates=[Estimate("backlash_rad", 1e-3, "rad")],
                status=Status.WATCH,
                trigger="production_stop",
            ),
            store.record_cycle(
                controller="robot",
                joint="j2",
                kind="backlash",
                started_at=T0 + timedelta(days=10),
                finished_at=None,
                status="unknown",
                outcome="error",
                reason="fit blew up",
                trigger="schedule",
            ),
            store.record_cycle(
                controller="robot",
                joint="j3",
                kind="backlash",
                started_at=T0 + timedelta(days=10),
                finished_at=None,
                status="ok",
                ne107="check_function",
                trigger="on_demand",
            ),
            store.record_rejected(
                controller="robot",
                joint="j4",
                kind="backlash",
                started_at=T0 + timedelta(days=10),
                finished_at=None,
                reason="interlock: mode",
                trigger="once",
            ),
        ]
        message_id = str(uuid.uuid4())
        store.record_report(
            message_id, T0 + timedelta(days=10), tmp_path / "r" / "report.json", ids[:3]
        )
        j1, j2, j3, j4 = (store.latest("robot", j) for j in ("j1", "j2", "j3", "j4"))
        assert j1 is not None and (j1.ne107, j1.trigger) == (
            "maintenance_required",
            "production_stop",
        )
        assert j2 is not None and (j2.ne107, j2.trigger) == ("failure", "schedule")
        assert j3 is not None and j3.ne107 == Ne107.CHECK_FUNCTION  # the caller's word wins
        assert j4 is not None and (j4.ne107, j4.trigger, j4.report_message_id) == (
            None,
            "once",
            None,
        )
        assert j1.report_message_id == message_id
        assert j1.report_path == str(tmp_path / "r" / "report.json")
        assert j1.to_dict()["report_message_id"] == message_id
        rep = store.report(message_id)
        assert rep is not None and rep.cycle_ids == tuple(ids[:3])
        assert rep.to_dict()["message_id"] == message_id
        assert store.report(str(uuid.uuid4())) is None
        # Refusals name what was wrong; nothing of a refused write stays.
        with pytest.raises(StoreError, match="trigger 'cron'"):
            store.record_cycle(
                controller="robot",
                joint="j1",
                kind="backlash",
                started_at=T0,
                finished_at=None,
                trigger="cron",
            )
        with pytest.raises(StoreError, match="ne107 'green'"):
            store.record_cycle(
                controller="robot",
                joint="j1",
                kind="backlash",
                started_at=T0,
                finished_at=None,
                status="ok",
                ne107="green",
            )
        with pytest.raises(StoreError, match="already recorded"):
            store.record_report(message_id, T0, None, [])
        with pytest.raises(StoreError, match="no cycle with id 9999"):
            store.record_report(str(uuid.uuid4()), T0, None, [ids[3], 9999])
        assert store.latest("robot", "j4") == j4  # the failed record_report moved nothing
        assert len(store.cycles(limit=100)) == len(V1_ROWS) + 4
    assert set(TRIGGERS) >= {"production_stop", "schedule", "on_demand", "once"}


def test_newer_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    v1_database(db)
    HistoryStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO schema_version VALUES (?, 'from a newer agent', '2030-01-01')",
            (SCHEMA_VERSION + 1,),
        )
    before = db.read_bytes()
    with pytest.raises(
        StoreError,
        match=rf"history\.sqlite: schema version {SCHEMA_VERSION + 1} "
        rf"is newer than this agent knows \({SCHEMA_VERSION}\)",
    ):
        HistoryStore(db)
    with sqlite3.connect(db) as conn:
        assert schema_version(conn) == SCHEMA_VERSION + 1
    assert len(before) > 0


def test_a_failing_migration_leaves_the_previous_version(tmp_path: Path) -> None:
    """Each migration is one transaction: a broken one leaves the database at the last good
    version, with its data."""
    db = tmp_path / "history.sqlite"
    v1_database(db)
    broken = (
        *MIGRATIONS[:2],
        type(MIGRATIONS[2])(
            3, "broken", ("ALTER TABLE verdicts ADD COLUMN ne107 TEXT", "THIS IS NOT SQL")
        ),
    )
    conn = sqlite3.connect(db, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, broken)
    assert schema_version(conn) == 2
    columns = {r[1] for r in conn.execute("PRAGMA table_info(verdicts)")}
    assert "ne107" not in columns
    conn.close()
    with HistoryStore(db) as store:  # the real migration still applies afterwards
        assert store.version == SCHEMA_VERSION
        assert len(store.cycles(limit=100)) == len(V1_ROWS)
