"""The history database's schema: pragmas, connection, and the ordered list of migrations.

Pragmas, and why:
  journal_mode=WAL   readers (`jha report`, a dashboard) never block the daemon's writes and the
                     daemon never blocks them; a crash mid-write leaves the last commit intact.
  synchronous=NORMAL in WAL mode this cannot corrupt the database: a power cut can only lose the
                     last few commits since the previous checkpoint. Those are re-runnable test
                     cycles (their capture files are written atomically elsewhere), while FULL
                     would fsync on every commit and wear the edge PC's flash for nothing.
  foreign_keys=ON    estimates and verdicts cannot outlive or precede their cycle.

Schema changes are new entries appended to MIGRATIONS, never edits of old ones: each runs in its
own transaction together with the row that records it in `schema_version`. A database whose
version is newer than the last migration here is refused (StoreError), never written to.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent.errors import EX_SOFTWARE, AgentError

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


# Statuses are deliberately not CHECK-constrained: a CHECK cannot be altered in SQLite without
# rebuilding the table. Outcomes are a closed set. A shipped migration is never edited, and it
# depends on no code that may change later (hence the literal NE 107 mapping in version 3).
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
    Migration(
        3,
        "NE 107 status per verdict, cycle trigger, the report each cycle went into",
        (
            "ALTER TABLE verdicts ADD COLUMN ne107 TEXT",
            # Old verdicts: NE 107 from our status as agent.health.status.ne107_of maps it (a
            # verdict row always belongs to a finished cycle, so never 'running').
            """UPDATE verdicts SET ne107 = CASE
                 WHEN status = 'ok' THEN 'normal'
                 WHEN status = 'watch' THEN 'maintenance_required'
                 WHEN status = 'alert' THEN 'out_of_specification'
                 WHEN (SELECT outcome FROM cycles WHERE cycles.id = verdicts.cycle_id) = 'error'
                   THEN 'failure'
                 ELSE 'check_function' END""",
            # NULL for the cycles recorded before triggers were: what started them is unknown.
            "ALTER TABLE cycles ADD COLUMN trigger TEXT",
            """CREATE TABLE reports (
                id         INTEGER PRIMARY KEY,
                message_id TEXT NOT NULL UNIQUE,
                created_at TEXT NOT NULL,
                path       TEXT
            )""",
            "ALTER TABLE cycles ADD COLUMN report_id INTEGER REFERENCES reports(id)"
            " ON DELETE SET NULL",
            "CREATE INDEX cycles_report ON cycles (report_id)",
        ),
    ),
    Migration(
        4,
        "history order that survives the wall clock being stepped back",
        (
            # The time a cycle sorts by: its started_at, except that a cycle timed by the
            # daemon's own clock never sorts before one the daemon recorded earlier (see
            # agent.history.store.HistoryStore.record_cycle). Old rows sort by their started_at.
            "ALTER TABLE cycles ADD COLUMN seq_at TEXT",
            "UPDATE cycles SET seq_at = started_at",
            "CREATE INDEX cycles_joint_seq ON cycles (controller, joint, seq_at)",
        ),
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version


def iso_utc(moment: datetime | str) -> str:
    """Timezone-aware datetime (or ISO text with an offset) -> fixed-width ISO UTC text."""
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError as exc:
            raise StoreError(
                f"time {moment!r}: expected ISO 8601 text, e.g. 2024-05-01T12:00:00Z"
            ) from exc
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise StoreError(f"time {moment.isoformat()}: expected a timezone-aware time (UTC)")
    return moment.astimezone(UTC).strftime(_ISO_FORMAT)


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
