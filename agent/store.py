"""History of test cycles and their estimates in SQLite, with an ordered list of schema migrations.

Pragmas, and why:
  journal_mode=WAL   readers (`jha report`, a dashboard) never block the daemon's writes and the
                     daemon never blocks them; a crash mid-write leaves the last commit intact.
  synchronous=NORMAL in WAL mode this cannot corrupt the database: a power cut can only lose the
                     last few commits since the previous checkpoint. Those are re-runnable test
                     cycles (their capture files are written atomically elsewhere), while FULL
                     would fsync on every commit and wear the edge PC's flash for nothing.
  foreign_keys=ON    estimates and verdicts cannot outlive or precede their cycle.

Schema changes are new entries appended to MIGRATIONS, never edits of old ones: each runs in its
own transaction together with the row that records it in `schema_version`.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from agent.errors import EX_SOFTWARE, AgentError
from agent.estimation.results import BacklashResult

OUTCOMES = ("ok", "aborted", "rejected", "error")

# What a backlash cycle records (estimates_for); every other indicator is "other" to the report.
BACKLASH_INDICATORS = ("amplitude_rad_s", "backlash_rad")

# Fixed-width UTC text so that ORDER BY on the text is chronological order.
_ISO_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


class StoreError(AgentError):
    """The history database cannot be used (newer schema, bad record...)."""

    exit_code = EX_SOFTWARE


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: tuple[str, ...]


# Statuses are deliberately not CHECK-constrained: NAMUR NE 107 statuses will join them, and a
# CHECK cannot be altered in SQLite without rebuilding the table. Outcomes are a closed set.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "cycles, estimates, verdicts",
        (
            """CREATE TABLE cycles (
                id           INTEGER PRIMARY KEY,
                controller   TEXT NOT NULL,
                joint        TEXT NOT NULL,
                kind         TEXT NOT NULL,
                started_at   TEXT NOT NULL,
                finished_at  TEXT,
                outcome      TEXT NOT NULL
                             CHECK (outcome IN ('ok', 'aborted', 'rejected', 'error')),
                reason       TEXT NOT NULL DEFAULT '',
                capture_path TEXT
            )""",
            """CREATE TABLE estimates (
                id          INTEGER PRIMARY KEY,
                cycle_id    INTEGER NOT NULL REFERENCES cycles(id) ON DELETE CASCADE,
                indicator   TEXT NOT NULL,
                value       REAL NOT NULL,
                unit        TEXT NOT NULL,
                detail_json TEXT NOT NULL DEFAULT '{}',
                UNIQUE (cycle_id, indicator)
            )""",
            """CREATE TABLE verdicts (
                id       INTEGER PRIMARY KEY,
                cycle_id INTEGER NOT NULL UNIQUE REFERENCES cycles(id) ON DELETE CASCADE,
                joint    TEXT NOT NULL,
                status   TEXT NOT NULL,
                reason   TEXT NOT NULL DEFAULT ''
            )""",
        ),
    ),
    Migration(
        2,
        "indexes for per-joint history queries",
        (
            "CREATE INDEX cycles_joint_time ON cycles (controller, joint, started_at)",
            "CREATE INDEX estimates_indicator ON estimates (indicator, cycle_id)",
        ),
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version


@dataclass(frozen=True)
class Estimate:
    """One indicator value to record with a cycle; `detail` must be JSON-serialisable."""

    indicator: str
    value: float
    unit: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "indicator": self.indicator,
            "value": self.value,
            "unit": self.unit,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True)
class TrendPoint:
    time_iso: str
    value: float

    @property
    def time(self) -> datetime:
        return datetime.fromisoformat(self.time_iso)

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time_iso, "value": self.value}


@dataclass(frozen=True)
class CycleRecord:
    id: int
    controller: str
    joint: str
    kind: str
    started_at: str
    finished_at: str | None
    outcome: str
    reason: str
    capture_path: str | None
    estimates: tuple[Estimate, ...] = ()
    status: str | None = None
    status_reason: str | None = None

    def estimate(self, indicator: str) -> Estimate | None:
        return next((e for e in self.estimates if e.indicator == indicator), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "controller": self.controller,
            "joint": self.joint,
            "kind": self.kind,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "outcome": self.outcome,
            "reason": self.reason,
            "capture_path": self.capture_path,
            "estimates": [e.to_dict() for e in self.estimates],
            "status": self.status,
            "status_reason": self.status_reason,
        }


def iso_utc(moment: datetime | str) -> str:
    """Timezone-aware datetime (or ISO text with an offset) -> fixed-width ISO UTC text."""
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError as exc:
            raise StoreError(f"time {moment!r}: expected ISO 8601 text, e.g. "
                             "2024-05-01T12:00:00Z") from exc
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise StoreError(f"time {moment.isoformat()}: expected a timezone-aware time (UTC)")
    return moment.astimezone(UTC).strftime(_ISO_FORMAT)


def estimates_for(result: BacklashResult) -> tuple[Estimate, ...]:
    """The indicators a backlash fit contributes to the history (fit details on the amplitude)."""
    detail = result.to_dict(evidence=False)
    found = [Estimate("amplitude_rad_s", result.amplitude_rad_s, "rad/s", detail)]
    if result.backlash_rad is not None:
        found.append(Estimate("backlash_rad", result.backlash_rad, "rad"))
    return tuple(found)


def schema_version(conn: sqlite3.Connection) -> int:
    """The version recorded in the database; 0 for a database without our tables."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if row is None:
        return 0
    (version,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    return int(version)


def migrate(
    conn: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS, where: str = ""
) -> int:
    """Apply the migrations newer than the database's version, each in its own transaction.

    `conn` must be in autocommit mode (isolation_level=None). Returns the resulting version.
    """
    known = migrations[-1].version if migrations else 0
    if [m.version for m in migrations] != list(range(1, len(migrations) + 1)):
        raise StoreError("migrations must be numbered 1, 2, 3... in order")
    current = schema_version(conn)
    if current > known:
        raise StoreError(
            f"{where or 'history database'}: schema version {current} is newer than this agent "
            f"knows ({known}); upgrade the agent or point it at another state_dir"
        )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        " version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    for migration in migrations[current:]:
        # IMMEDIATE: take the write lock first, so two agents opening the same file at once
        # serialise here and the second one sees the first one's version.
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema_version(conn) >= migration.version:
                conn.execute("ROLLBACK")
                continue
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.description, iso_utc(datetime.now(UTC))),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return schema_version(conn)


def connect(path: str | Path, timeout_s: float = 10.0) -> sqlite3.Connection:
    """Open the database file with our pragmas, in autocommit mode (we issue BEGIN ourselves)."""
    conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


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
            raise StoreError(f"{self.path}: cannot bring the history database to schema "
                             f"version {SCHEMA_VERSION}: {exc}") from exc
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
        outcome: str = "ok",
        reason: str = "",
        capture_path: str | Path | None = None,
    ) -> int:
        """Write one cycle with its estimates and verdict in one transaction; returns its id."""
        if outcome not in OUTCOMES:
            raise StoreError(f"cycle outcome {outcome!r}: expected one of {', '.join(OUTCOMES)}")
        started = iso_utc(started_at)
        finished = None if finished_at is None else iso_utc(finished_at)
        with self.transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO cycles (controller, joint, kind, started_at, finished_at, outcome,"
                " reason, capture_path) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (controller, joint, kind, started, finished, outcome, reason,
                 None if capture_path is None else str(capture_path)),
            )
            cycle_id = cursor.lastrowid
            assert cycle_id is not None
            for est in estimates:
                if not math.isfinite(est.value):
                    raise StoreError(
                        f"{controller}/{joint} estimate {est.indicator}: value {est.value} is not "
                        "a finite number"
                    )
                conn.execute(
                    "INSERT INTO estimates (cycle_id, indicator, value, unit, detail_json)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (cycle_id, est.indicator, float(est.value), est.unit,
                     json.dumps(_json_safe(dict(est.detail)), allow_nan=False, sort_keys=True)),
                )
            if status is not None:
                conn.execute(
                    "INSERT INTO verdicts (cycle_id, joint, status, reason) VALUES (?, ?, ?, ?)",
                    (cycle_id, joint, str(status), status_reason),
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
        outcome: str = "rejected",
        capture_path: str | Path | None = None,
    ) -> int:
        """A cycle that produced no estimate (rejected capture, aborted motion, error)."""
        if outcome == "ok":
            raise StoreError("record_rejected: outcome must be 'aborted', 'rejected' or 'error'")
        return self.record_cycle(
            controller=controller, joint=joint, kind=kind, started_at=started_at,
            finished_at=finished_at, outcome=outcome, reason=reason, capture_path=capture_path,
        )

    # -- reading ---------------------------------------------------------------------------

    def history(
        self, controller: str, joint: str, indicator: str, limit: int | None = None
    ) -> list[TrendPoint]:
        """Values of one indicator from successful cycles, oldest first (the last `limit`)."""
        rows = self._conn.execute(
            "SELECT c.started_at, e.value FROM estimates e JOIN cycles c ON c.id = e.cycle_id"
            " WHERE c.controller = ? AND c.joint = ? AND e.indicator = ? AND c.outcome = 'ok'"
            " ORDER BY c.started_at DESC, c.id DESC LIMIT ?",
            (controller, joint, indicator, -1 if limit is None else int(limit)),
        ).fetchall()
        return [TrendPoint(t, float(v)) for t, v in reversed(rows)]

    def indicators(
        self, controller: str, joint: str, exclude: Sequence[str] = BACKLASH_INDICATORS
    ) -> list[tuple[str, str]]:
        """(indicator, unit) recorded by successful cycles of a joint, by name; the backlash
        ones left out. The unit is the latest cycle's (a unit should never change anyway)."""
        rows = self._conn.execute(
            "SELECT e.indicator, e.unit FROM estimates e JOIN cycles c ON c.id = e.cycle_id"
            " WHERE c.controller = ? AND c.joint = ? AND c.outcome = 'ok'"
            " ORDER BY c.started_at, c.id",
            (controller, joint),
        ).fetchall()
        found = {str(i): str(u) for i, u in rows if i not in exclude}
        return sorted(found.items())

    def joints(self, controller: str) -> list[str]:
        """Every joint of a controller with a cycle in the history, in order of first cycle."""
        rows = self._conn.execute(
            "SELECT joint FROM cycles WHERE controller = ? GROUP BY joint"
            " ORDER BY MIN(started_at), MIN(id)",
            (controller,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def latest(
        self, controller: str, joint: str, outcome: str | None = None
    ) -> CycleRecord | None:
        """The most recent cycle of a joint (of the given outcome, if any), with its estimates."""
        sql = "SELECT * FROM cycles WHERE controller = ? AND joint = ?"
        args: list[Any] = [controller, joint]
        if outcome is not None:
            sql += " AND outcome = ?"
            args.append(outcome)
        row = self._conn.execute(sql + " ORDER BY started_at DESC, id DESC LIMIT 1", args)
        found = self._records(row)
        return found[0] if found else None

    def cycles(self, limit: int = 50) -> list[CycleRecord]:
        """The most recent cycles of every joint, newest first."""
        rows = self._conn.execute(
            "SELECT * FROM cycles ORDER BY started_at DESC, id DESC LIMIT ?", (int(limit),)
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
                "SELECT status, reason FROM verdicts WHERE cycle_id = ?", (r["id"],)
            ).fetchone()
            records.append(
                CycleRecord(
                    id=r["id"], controller=r["controller"], joint=r["joint"], kind=r["kind"],
                    started_at=r["started_at"], finished_at=r["finished_at"],
                    outcome=r["outcome"], reason=r["reason"], capture_path=r["capture_path"],
                    estimates=tuple(Estimate(i, float(v), u, json.loads(d))
                                    for i, v, u, d in est_rows),
                    status=None if verdict is None else verdict[0],
                    status_reason=None if verdict is None else verdict[1],
                )
            )
        return records


def _json_safe(value: Any) -> Any:
    """NaN/inf become null (strict JSON); anything json cannot encode raises TypeError."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
