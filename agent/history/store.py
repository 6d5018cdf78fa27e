"""History of test cycles, their estimates, verdicts and reports in SQLite.

The schema, its pragmas and its migrations are in agent.history.schema; what a row holds
(cycles, estimates, reports, outcomes and triggers) in agent.history.records.

Slightly over 400 lines on purpose: HistoryStore is one class over one SQLite file; its record
types and schema are already records.py and schema.py.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from agent.health.status import TrendPoint
from agent.history.records import (
    AMBIGUOUS,
    BACKLASH_INDICATORS,
    CLOCK_STEP_S,
    CLOCKED_TRIGGERS,
    INTERVAL_HIGH,
    INTERVAL_LOW,
    OUTCOMES,
    TRIGGERS,
    CycleRecord,
    Estimate,
    Outcome,
    ReportRecord,
    detail_json,
    detail_key_sql,
    finite_number,
    verdict_ne107,
)
from agent.history.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    StoreError,
    connect,
    iso_utc,
    migrate,
)


class HistoryStore:
    """The agent's history: one SQLite file, migrated to SCHEMA_VERSION on open.

    One instance per thread (sqlite3 connections are not shared across threads); several
    processes may open the same file.
    """

    def __init__(self, path: str | Path, timeout_s: float = 10.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = connect(self.path, timeout_s)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the history database: {exc}") from exc
        self._depth = 0
        try:
            self.version = migrate(self._conn, MIGRATIONS, where=str(self.path))
        except sqlite3.Error as exc:
            self._conn.close()
            raise StoreError(
                f"{self.path}: cannot bring the history database to schema "
                f"version {SCHEMA_VERSION}: {exc}"
            ) from exc
        except BaseException:
            self._conn.close()
            raise

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def pragma(self, name: str) -> Any:
        """The value of a pragma on this connection (journal_mode, synchronous, foreign_keys)."""
        if not name.isidentifier():
            raise StoreError(f"pragma {name!r}: expected a pragma name")
        return self._conn.execute(f"PRAGMA {name}").fetchone()[0]

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All writes inside commit together or not at all; nested use joins the outer one."""
        if self._depth:
            self._depth += 1
            try:
                yield self._conn
            finally:
                self._depth -= 1
            return
        self._conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException:
            # Also when COMMIT itself fails: the connection must not stay inside a transaction.
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        finally:
            self._depth = 0

    # -- writing ---------------------------------------------------------------------------

    def record_cycle(
        self,
        *,
        controller: str,
        joint: str,
        kind: str,
        started_at: datetime | str,
        finished_at: datetime | str | None,
        estimates: Sequence[Estimate] = (),
        status: str | None = None,
        status_reason: str = "",
        outcome: str = Outcome.OK,
        reason: str = "",
        capture_path: str | Path | None = None,
        trigger: str | None = None,
        ne107: str | None = None,
    ) -> int:
        """Write one cycle with its estimates and verdict in one transaction; returns its id.

        `ne107` defaults to agent.health.status.ne107_of(status) (failure for an error outcome).
        """
        if outcome not in OUTCOMES:
            raise StoreError(f"cycle outcome {outcome!r}: expected one of {', '.join(OUTCOMES)}")
        if trigger is not None and trigger not in TRIGGERS:
            raise StoreError(f"cycle trigger {trigger!r}: expected one of {', '.join(TRIGGERS)}")
        started = iso_utc(started_at)
        finished = None if finished_at is None else iso_utc(finished_at)
        if status is not None:
            ne107 = verdict_ne107(str(status), outcome, ne107)
        with self.transaction() as conn:
            seq_at = started
            if trigger in CLOCKED_TRIGGERS:
                marks = ", ".join("?" for _ in CLOCKED_TRIGGERS)
                (before,) = conn.execute(
                    f"SELECT MAX(seq_at) FROM cycles WHERE controller = ? AND trigger IN ({marks})",
                    (controller, *CLOCKED_TRIGGERS),
                ).fetchone()
                if before is not None and _seconds(before) - _seconds(started) > CLOCK_STEP_S:
                    seq_at = before
            cursor = conn.execute(
                "INSERT INTO cycles (controller, joint, kind, started_at, finished_at, outcome,"
                " reason, capture_path, trigger, seq_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    controller,
                    joint,
                    kind,
                    started,
                    finished,
                    outcome,
                    reason,
                    None if capture_path is None else str(capture_path),
                    trigger,
                    seq_at,
                ),
            )
            cycle_id = cursor.lastrowid
            if cycle_id is None:
                raise StoreError(f"{controller}/{joint}: SQLite gave the new cycle no row id")
            for est in estimates:
                if not math.isfinite(est.value):
                    raise StoreError(
                        f"{controller}/{joint} estimate {est.indicator}: value {est.value} is not "
                        "a finite number"
                    )
                conn.execute(
                    "INSERT INTO estimates (cycle_id, indicator, value, unit, detail_json)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (
                        cycle_id,
                        est.indicator,
                        float(est.value),
                        est.unit,
                        detail_json(est.detail),
                    ),
                )
            if status is not None:
                conn.execute(
                    "INSERT INTO verdicts (cycle_id, joint, status, reason, ne107)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (cycle_id, joint, str(status), status_reason, ne107),
                )
        return cycle_id

    def record_rejected(
        self,
        *,
        controller: str,
        joint: str,
        kind: str,
        started_at: datetime | str,
        finished_at: datetime | str | None,
        reason: str,
        outcome: str = Outcome.REJECTED,
        capture_path: str | Path | None = None,
        trigger: str | None = None,
    ) -> int:
        """A cycle that produced no estimate (rejected capture, aborted motion, error)."""
        if outcome == Outcome.OK:
            raise StoreError("record_rejected: outcome must be 'aborted', 'rejected' or 'error'")
        return self.record_cycle(
            controller=controller,
            joint=joint,
            kind=kind,
            started_at=started_at,
            finished_at=finished_at,
            outcome=outcome,
            reason=reason,
            capture_path=capture_path,
            trigger=trigger,
        )

    def record_report(
        self,
        message_id: str,
        created_at: datetime | str,
        path: str | Path | None,
        cycle_ids: Sequence[int],
    ) -> int:
        """Note that the cycles went into the report `message_id` (written at `path`); a cycle
        already in a report moves to this one. Returns the report's row id."""
        if not message_id:
            raise StoreError("record_report: expected a non-empty message id")
        created = iso_utc(created_at)
        with self.transaction() as conn:
            try:
                cursor = conn.execute(
                    "INSERT INTO reports (message_id, created_at, path) VALUES (?, ?, ?)",
                    (message_id, created, None if path is None else str(path)),
                )
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"report {message_id}: already recorded ({exc})") from exc
            report_id = cursor.lastrowid
            if report_id is None:
                raise StoreError(f"report {message_id}: SQLite gave it no row id")
            for cycle_id in cycle_ids:
                changed = conn.execute(
                    "UPDATE cycles SET report_id = ? WHERE id = ?", (report_id, int(cycle_id))
                ).rowcount
                if changed != 1:
                    raise StoreError(f"report {message_id}: no cycle with id {cycle_id}")
        return report_id

    # -- reading ---------------------------------------------------------------------------

    def history(
        self, controller: str, joint: str, indicator: str, limit: int | None = None
    ) -> list[TrendPoint]:
        """Values of one indicator from successful cycles, oldest first (the last `limit`);
        in the order the cycles ran, which is time order unless the clock was stepped back
        (CLOCKED_TRIGGERS)."""
        # The interval comes from the detail where one was recorded (records.detail_key_sql).
        rows = self._conn.execute(
            f"SELECT c.started_at, e.value, {detail_key_sql(INTERVAL_LOW)},"
            f" {detail_key_sql(INTERVAL_HIGH)}, {detail_key_sql(AMBIGUOUS)}"
            " FROM estimates e JOIN cycles c ON c.id = e.cycle_id"
            " WHERE c.controller = ? AND c.joint = ? AND e.indicator = ? AND c.outcome = ?"
            " ORDER BY c.seq_at DESC, c.id DESC LIMIT ?",
            (controller, joint, indicator, Outcome.OK, -1 if limit is None else int(limit)),
        ).fetchall()
        return [
            TrendPoint(t, float(v), finite_number(lo), finite_number(hi), amb == 1)
            for t, v, lo, hi, amb in reversed(rows)
        ]

    def history_with_detail(
        self, controller: str, joint: str, indicator: str
    ) -> list[tuple[TrendPoint, dict[str, Any]]]:
        """Like history() (every point), each point with the detail recorded with it (e.g. the
        relative standard deviation `rel_std_pct` an identification gave it)."""
        rows = self._conn.execute(
            "SELECT c.started_at, e.value, e.detail_json FROM estimates e"
            " JOIN cycles c ON c.id = e.cycle_id"
            " WHERE c.controller = ? AND c.joint = ? AND e.indicator = ? AND c.outcome = ?"
            " ORDER BY c.seq_at, c.id",
            (controller, joint, indicator, Outcome.OK),
        ).fetchall()
        found: list[tuple[TrendPoint, dict[str, Any]]] = []
        for t, v, text in rows:
            try:
                detail = json.loads(text)
            except ValueError:  # a damaged detail only loses what it said, not the value
                detail = {}
            found.append((TrendPoint(t, float(v)), detail if isinstance(detail, dict) else {}))
        return found

    def indicators(
        self, controller: str, joint: str, exclude: Sequence[str] = BACKLASH_INDICATORS
    ) -> list[tuple[str, str]]:
        """(indicator, unit) recorded by successful cycles of a joint, by name; the backlash
        ones left out. The unit is the latest cycle's (a unit should never change anyway)."""
        rows = self._conn.execute(
            "SELECT e.indicator, e.unit FROM estimates e JOIN cycles c ON c.id = e.cycle_id"
            " WHERE c.controller = ? AND c.joint = ? AND c.outcome = ?"
            " ORDER BY c.seq_at, c.id",
            (controller, joint, Outcome.OK),
        ).fetchall()
        found = {str(i): str(u) for i, u in rows if i not in exclude}
        return sorted(found.items())

    def joints(self, controller: str) -> list[str]:
        """Every joint of a controller with a cycle in the history, in order of first cycle."""
        rows = self._conn.execute(
            "SELECT joint FROM cycles WHERE controller = ? GROUP BY joint"
            " ORDER BY MIN(seq_at), MIN(id)",
            (controller,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def latest(
        self, controller: str, joint: str, outcome: str | None = None, kind: str | None = None
    ) -> CycleRecord | None:
        """The most recent cycle of a joint (of the given outcome and kind, if any), with its
        estimates."""
        sql = _CYCLE_SELECT + " WHERE controller = ? AND joint = ?"
        args: list[Any] = [controller, joint]
        if outcome is not None:
            sql += " AND outcome = ?"
            args.append(outcome)
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        row = self._conn.execute(sql + " ORDER BY seq_at DESC, cycles.id DESC LIMIT 1", args)
        found = self._records(row)
        return found[0] if found else None

    def evidence_to_keep(self) -> list[tuple[str | None, str | None]]:
        """(capture path, report path) of the cycles retention must not prune: each joint's
        latest cycle of each kind (and its latest with a capture), and each joint's latest
        judged cycle when that verdict is watch or alert (an open finding)."""
        return self._conn.execute(
            """
            WITH captured AS (
                SELECT id, ROW_NUMBER() OVER (PARTITION BY controller, joint, kind
                                              ORDER BY seq_at DESC, id DESC) AS rn
                FROM cycles WHERE capture_path IS NOT NULL),
            latest AS (
                SELECT id, ROW_NUMBER() OVER (PARTITION BY controller, joint, kind
                                              ORDER BY seq_at DESC, id DESC) AS rn
                FROM cycles),
            judged AS (
                SELECT c.id, v.status, ROW_NUMBER() OVER (PARTITION BY c.controller, c.joint
                                                          ORDER BY c.seq_at DESC, c.id DESC) AS rn
                FROM cycles c JOIN verdicts v ON v.cycle_id = c.id)
            SELECT c.capture_path, r.path FROM cycles c LEFT JOIN reports r ON r.id = c.report_id
            WHERE c.id IN (SELECT id FROM captured WHERE rn = 1)
               OR c.id IN (SELECT id FROM latest WHERE rn = 1)
               OR c.id IN (SELECT id FROM judged WHERE rn = 1 AND status IN ('watch', 'alert'))
            """
        ).fetchall()

    def report(self, message_id: str) -> ReportRecord | None:
        """A recorded report with the ids of its cycles, oldest first."""
        row = self._conn.execute(
            "SELECT id, message_id, created_at, path FROM reports WHERE message_id = ?",
            (message_id,),
        ).fetchone()
        if row is None:
            return None
        ids = self._conn.execute(
            "SELECT id FROM cycles WHERE report_id = ? ORDER BY id", (row[0],)
        ).fetchall()
        return ReportRecord(row[1], row[2], row[3], tuple(int(i) for (i,) in ids))

    def cycles(self, limit: int = 50) -> list[CycleRecord]:
        """The most recent cycles of every joint, newest first."""
        rows = self._conn.execute(
            _CYCLE_SELECT + " ORDER BY seq_at DESC, cycles.id DESC LIMIT ?", (int(limit),)
        )
        return self._records(rows)

    def _records(self, cursor: sqlite3.Cursor) -> list[CycleRecord]:
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
        records = []
        for r in rows:
            est_rows = self._conn.execute(
                "SELECT indicator, value, unit, detail_json FROM estimates WHERE cycle_id = ?"
                " ORDER BY id",
                (r["id"],),
            ).fetchall()
            verdict = self._conn.execute(
                "SELECT status, reason, ne107 FROM verdicts WHERE cycle_id = ?", (r["id"],)
            ).fetchone()
            records.append(
                CycleRecord(
                    id=r["id"],
                    controller=r["controller"],
                    joint=r["joint"],
                    kind=r["kind"],
                    started_at=r["started_at"],
                    finished_at=r["finished_at"],
                    outcome=r["outcome"],
                    reason=r["reason"],
                    capture_path=r["capture_path"],
                    estimates=tuple(
                        Estimate(i, float(v), u, json.loads(d)) for i, v, u, d in est_rows
                    ),
                    status=None if verdict is None else verdict[0],
                    status_reason=None if verdict is None else verdict[1],
                    ne107=None if verdict is None else verdict[2],
                    trigger=r["trigger"],
                    report_message_id=r["report_message_id"],
                    report_path=r["report_path"],
                )
            )
        return records


# Cycles with the report they went into (the column names are those of CycleRecord).
_CYCLE_SELECT = (
    "SELECT cycles.*, reports.message_id AS report_message_id, reports.path AS report_path"
    " FROM cycles LEFT JOIN reports ON reports.id = cycles.report_id"
)


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()
