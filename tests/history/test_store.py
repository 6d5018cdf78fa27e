"""HistoryStore: pragmas, atomic cycle records, migrations, ordering, concurrent readers."""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.estimation.backlash.result import BacklashResult
from agent.health.status import TrendPoint
from agent.history.records import Estimate, estimates_for
from agent.history.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    StoreError,
    iso_utc,
    migrate,
    schema_version,
)
from agent.history.store import HistoryStore

T0 = datetime(2024, 5, 1, 8, 0, tzinfo=UTC)


def result(amplitude: float = 0.02, backlash: float | None = 8e-4) -> BacklashResult:
    t = np.linspace(0.0, 1.0, 200)
    fitted = amplitude * np.exp(-20 * t) * np.sin(2 * np.pi * 40 * t)
    return BacklashResult(
        amplitude_rad_s=amplitude,
        backlash_rad=backlash,
        rmse_rad_s=0.001,
        residual_rms_rad_s=0.004,
        params={"A_rad_s": amplitude, "tau_per_s": 20.0},
        evaluations=1500,
        restarts=1,
        converged=True,
        stop_reason="tolfun",
        fit_seconds=1.2,
        seed=1,
        period_metadata_s=1.0,
        period_estimated_s=1.001,
        period_mismatch=float("nan"),
        time_s=t,
        residual_rad_s=fitted + 0.001,
        fitted_rad_s=fitted,
    )


def add(
    store: HistoryStore, day: float, value: float, joint: str = "j1", outcome: str = "ok"
) -> int:
    start = T0 + timedelta(days=day)
    return store.record_cycle(
        controller="robot",
        joint=joint,
        kind="backlash",
        started_at=start,
        finished_at=start + timedelta(seconds=30),
        outcome=outcome,
        estimates=[Estimate("backlash_rad", value, "rad")],
        status="ok",
        status_reason="fine",
    )


def count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "history.sqlite"


def test_pragmas_wal_normal_foreign_keys(db: Path) -> None:
    with HistoryStore(db) as store:
        assert store.pragma("journal_mode") == "wal"
        assert store.pragma("synchronous") == 1  # NORMAL
        assert store.pragma("foreign_keys") == 1
        assert store.version == SCHEMA_VERSION
        with pytest.raises(StoreError):
            store.pragma("journal_mode; DROP TABLE cycles")
    # WAL is a property of the file: a plain connection sees it too.
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_record_cycle_round_trip(db: Path) -> None:
    r = result()
    with HistoryStore(db) as store:
        cid = store.record_cycle(
            controller="robot",
            joint="j2",
            kind="backlash",
            started_at=T0,
            finished_at="2024-05-01T10:00:30+02:00",
            estimates=estimates_for(r),
            status="watch",
            status_reason="backlash above watch",
            capture_path=Path("/c/x.npz"),
        )
        rec = store.latest("robot", "j2")
    assert rec is not None and rec.id == cid
    assert rec.started_at == "2024-05-01T08:00:00.000000Z"
    assert rec.finished_at == "2024-05-01T08:00:30.000000Z"  # +02:00 normalised to UTC
    assert rec.outcome == "ok" and rec.status == "watch"
    assert rec.status_reason == "backlash above watch" and rec.capture_path == "/c/x.npz"
    assert [e.indicator for e in rec.estimates] == ["amplitude_rad_s", "backlash_rad"]
    amp = rec.estimate("amplitude_rad_s")
    assert amp is not None and amp.value == pytest.approx(0.02) and amp.unit == "rad/s"
    assert amp.detail["evaluations"] == 1500
    assert amp.detail["period_mismatch"] is None  # NaN stored as JSON null
    backlash = rec.estimate("backlash_rad")
    assert backlash is not None and backlash.value == pytest.approx(8e-4)
    assert rec.to_dict()["estimates"][1]["indicator"] == "backlash_rad"


def test_uncalibrated_result_records_only_amplitude() -> None:
    assert [e.indicator for e in estimates_for(result(backlash=None))] == ["amplitude_rad_s"]


def test_exception_inside_transaction_leaves_nothing(db: Path) -> None:
    with HistoryStore(db) as store:
        add(store, 0, 1e-3)
        with pytest.raises(RuntimeError, match="power cut"), store.transaction():
            add(store, 1, 2e-3)
            add(store, 2, 3e-3)
            raise RuntimeError("power cut")
        assert [p.value for p in store.history("robot", "j1", "backlash_rad")] == [1e-3]
    assert count(db, "cycles") == 1 and count(db, "estimates") == 1
    assert count(db, "verdicts") == 1


def test_failing_estimate_rolls_back_the_cycle(db: Path) -> None:
    with HistoryStore(db) as store:
        # The second estimate's detail cannot be encoded: the cycle row already written and the
        # first estimate must go too.
        with pytest.raises(TypeError):
            store.record_cycle(
                controller="robot",
                joint="j1",
                kind="backlash",
                started_at=T0,
                finished_at=None,
                estimates=[
                    Estimate("amplitude_rad_s", 0.1, "rad/s"),
                    Estimate("backlash_rad", 1e-3, "rad", {"bad": object()}),
                ],
                status="ok",
            )
        with pytest.raises(StoreError, match="not a finite number"):
            store.record_cycle(
                controller="robot",
                joint="j1",
                kind="backlash",
                started_at=T0,
                finished_at=None,
                estimates=[
                    Estimate("amplitude_rad_s", 0.1, "rad/s"),
                    Estimate("backlash_rad", float("nan"), "rad"),
                ],
            )
        assert store.cycles() == []
        # The connection is usable after the rollback.
        add(store, 0, 1e-3)
    assert (count(db, "cycles"), count(db, "estimates"), count(db, "verdicts")) == (1, 1, 1)


def test_invalid_records_are_refused(db: Path) -> None:
    with HistoryStore(db) as store:
        with pytest.raises(StoreError, match="outcome 'done'"):
            add(store, 0, 1e-3, outcome="done")
        with pytest.raises(StoreError, match="timezone-aware"):
            store.record_cycle(
                controller="r",
                joint="j",
                kind="k",
                started_at=datetime(2024, 1, 1),
                finished_at=None,
            )
        with pytest.raises(StoreError, match="ISO 8601"):
            store.record_cycle(
                controller="r", joint="j", kind="k", started_at="yesterday", finished_at=None
            )
        with pytest.raises(StoreError, match="record_rejected"):
            store.record_rejected(
                controller="r",
                joint="j",
                kind="k",
                started_at=T0,
                finished_at=None,
                reason="x",
                outcome="ok",
            )
        # The foreign key holds: an estimate needs its cycle.
        with pytest.raises(sqlite3.IntegrityError), store.transaction() as conn:
            conn.execute(
                "INSERT INTO estimates (cycle_id, indicator, value, unit)"
                " VALUES (999, 'backlash_rad', 1.0, 'rad')"
            )
    assert count(db, "estimates") == 0


def test_migration_from_an_older_version(db: Path) -> None:
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db, isolation_level=None)
    assert migrate(conn, MIGRATIONS[:1]) == 1
    conn.execute(
        "INSERT INTO cycles (controller, joint, kind, started_at, outcome)"
        " VALUES ('robot', 'j1', 'backlash', '2024-01-01T00:00:00.000000Z', 'ok')"
    )
    conn.execute(
        "INSERT INTO estimates (cycle_id, indicator, value, unit)"
        " VALUES (1, 'backlash_rad', 0.5e-3, 'rad')"
    )
    conn.close()

    with HistoryStore(db) as store:
        assert store.version == SCHEMA_VERSION > 1
        assert store.history("robot", "j1", "backlash_rad") == [
            TrendPoint("2024-01-01T00:00:00.000000Z", 0.5e-3)
        ]
    with sqlite3.connect(db) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY 1")]
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert schema_version(conn) == SCHEMA_VERSION
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert {"cycles_joint_time", "estimates_indicator"} <= indexes
    # Opening again applies nothing twice.
    with HistoryStore(db) as store:
        assert store.version == SCHEMA_VERSION


def test_refuses_a_newer_schema(db: Path) -> None:
    HistoryStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, 'from the future', '2030-01-01')")
    with pytest.raises(StoreError, match=r"schema version 99 is newer than this agent knows"):
        HistoryStore(db)


def test_unusable_files_are_named_in_the_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database, just forty-odd bytes of text" * 10)
    with pytest.raises(StoreError, match=r"garbage\.sqlite: cannot open"):
        HistoryStore(garbage)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE cycles (x)")  # someone else's database
    with pytest.raises(StoreError, match=r"foreign\.sqlite: cannot bring .* to schema version"):
        HistoryStore(foreign)
    with sqlite3.connect(foreign) as conn:  # the failed migration left nothing half-done
        assert schema_version(conn) == 0
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "estimates" not in tables


def test_migrations_are_numbered_in_order() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    conn = sqlite3.connect(":memory:", isolation_level=None)
    with pytest.raises(StoreError, match="numbered"):
        migrate(conn, MIGRATIONS[1:])


def test_history_order_filters_and_limit(db: Path) -> None:
    with HistoryStore(db) as store:
        for day, value in [(3, 4.0), (0, 1.0), (2, 3.0), (1, 2.0)]:
            add(store, day, value)
        add(store, 1.5, 99.0, outcome="aborted")  # not an ok cycle: no trend point
        add(store, 1.7, 98.0, joint="j2")
        store.record_rejected(
            controller="robot",
            joint="j1",
            kind="backlash",
            started_at=T0 + timedelta(days=5),
            finished_at=None,
            reason="capture too short: 12 samples, expected >= 1000",
        )
        points = store.history("robot", "j1", "backlash_rad")
        assert [p.value for p in points] == [1.0, 2.0, 3.0, 4.0]
        assert points[0].time == T0
        assert [p.value for p in store.history("robot", "j1", "backlash_rad", limit=2)] == [3, 4]
        assert store.history("robot", "j1", "amplitude_rad_s") == []
        latest = store.latest("robot", "j1")
        assert latest is not None and latest.outcome == "rejected" and latest.estimates == ()
        assert "too short" in latest.reason
        latest_ok = store.latest("robot", "j1", outcome="ok")
        assert latest_ok is not None and latest_ok.estimates[0].value == 4.0
        assert store.latest("robot", "nope") is None
        recent = store.cycles(limit=3)
        assert [c.outcome for c in recent] == ["rejected", "ok", "ok"]
        assert len(store.cycles(limit=100)) == 7


def test_reader_sees_only_committed_data_while_a_write_is_open(db: Path) -> None:
    with HistoryStore(db) as writer, HistoryStore(db, timeout_s=0.5) as reader:
        add(writer, 0, 1.0)
        with writer.transaction():
            add(writer, 1, 2.0)
            # WAL: the reader neither waits for the writer nor sees its uncommitted rows.
            assert [p.value for p in reader.history("robot", "j1", "backlash_rad")] == [1.0]
        assert [p.value for p in reader.history("robot", "j1", "backlash_rad")] == [1.0, 2.0]


def test_concurrent_reader_thread_while_writing(db: Path) -> None:
    HistoryStore(db).close()
    n = 150
    seen: list[int] = []
    errors: list[BaseException] = []
    done, ready = threading.Event(), threading.Event()

    def read() -> None:
        try:
            with HistoryStore(db) as reader:
                seen.append(len(reader.history("robot", "j1", "backlash_rad")))
                ready.set()
                while not done.is_set():
                    seen.append(len(reader.history("robot", "j1", "backlash_rad")))
                seen.append(len(reader.history("robot", "j1", "backlash_rad")))
        except BaseException as exc:  # reported to the main thread below
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=read)
    thread.start()
    assert ready.wait(timeout=30)
    try:
        with HistoryStore(db) as writer:
            for i in range(n):
                add(writer, i, float(i))
    finally:
        done.set()
        thread.join(timeout=30)
    assert not errors
    assert seen == sorted(seen)  # every read saw a whole number of committed cycles, never less
    assert seen[-1] == n and len(seen) >= 2


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.datetimes(
            min_value=datetime(1970, 1, 2),
            max_value=datetime(2200, 1, 1),
            timezones=st.sampled_from(
                [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]
            ),
        ),
        min_size=2,
        max_size=8,
    )
)
def test_iso_text_orders_like_time(moments: list[datetime]) -> None:
    texts = [iso_utc(m) for m in moments]
    assert len({len(t) for t in texts}) == 1
    by_text = sorted(range(len(moments)), key=lambda i: (texts[i], i))
    by_time = sorted(range(len(moments)), key=lambda i: (moments[i], i))
    assert by_text == by_time
    assert all(datetime.fromisoformat(t) == m for t, m in zip(texts, moments, strict=True))


def test_latest_of_a_kind_and_the_report_link(db: Path) -> None:
    with HistoryStore(db) as store:
        first = add(store, 0, 1e-3)
        store.record_cycle(
            controller="robot",
            joint="j1",
            kind="stiffness",
            started_at=T0 + timedelta(days=1),
            finished_at=None,
            estimates=[Estimate("stiffness_nm_rad", 3e6, "N·m/rad")],
            trigger="manual",
        )
        latest = store.latest("robot", "j1")
        backlash = store.latest("robot", "j1", kind="backlash")
        assert latest is not None and (latest.kind, latest.trigger) == ("stiffness", "manual")
        assert backlash is not None and backlash.id == first and backlash.ne107 == "normal"
        assert store.latest("robot", "j1", outcome="ok", kind="nope") is None
        store.record_report("3a1f0c6e-7c1d-4e5b-9b8a-0f0e0d0c0b0a", T0, "/r/report.json", [first])
        linked = store.latest("robot", "j1", kind="backlash")
        assert linked is not None and linked.report_path == "/r/report.json"


def test_intervals_round_trip_with_the_values(db: Path) -> None:
    """Each backlash estimate's interval and ambiguity come back with its point of history."""
    r = replace(
        result(), amplitude_low_rad_s=0.018, amplitude_high_rad_s=0.022, backlash_low_rad=7e-4,
        backlash_high_rad=9.5e-4, ambiguous=True, uncertainty={"backlash": {"low_rad": 7e-4}},
    )  # fmt: skip
    with HistoryStore(db) as store:
        store.record_cycle(
            controller="robot", joint="j1", kind="backlash", started_at=T0, finished_at=None,
            estimates=estimates_for(r),
        )  # fmt: skip
        (amp,) = store.history("robot", "j1", "amplitude_rad_s")
        (gap,) = store.history("robot", "j1", "backlash_rad")
        rec = store.latest("robot", "j1")
    assert amp == TrendPoint(amp.time_iso, 0.02, 0.018, 0.022, True)
    assert gap == TrendPoint(gap.time_iso, 8e-4, 7e-4, 9.5e-4, True)
    assert rec is not None
    detail = rec.estimate("backlash_rad")
    assert detail is not None and detail.detail["uncertainty"] == {"low_rad": 7e-4}


def test_old_and_damaged_rows_load_without_an_interval(db: Path) -> None:
    """Rows recorded before intervals were (no such keys in their detail), and a detail that is
    not JSON at all, still load: their points simply have no interval."""
    with HistoryStore(db) as store:
        for day in range(3):
            store.record_cycle(
                controller="r", joint="j", kind="backlash",
                started_at=T0 + timedelta(days=day), finished_at=None,
                estimates=[Estimate("backlash_rad", 1e-3 + day * 1e-4, "rad")],
            )  # fmt: skip
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE estimates SET detail_json = 'not json' WHERE id = 2")
        conn.execute(
            "UPDATE estimates SET detail_json = ? WHERE id = 3",
            ('{"interval_low": "x", "interval_high": null, "ambiguous": 1}',),
        )
    with HistoryStore(db) as store:
        hist = store.history("r", "j", "backlash_rad")
    assert [p.value for p in hist] == pytest.approx([1e-3, 1.1e-3, 1.2e-3])
    assert all(p.interval is None for p in hist)
    assert hist[2].ambiguous and not hist[1].ambiguous
