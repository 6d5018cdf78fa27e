"""The database schema, versioned in the repo: agent/fleet/migrations/NNNN_name.sql, applied in
order, each in its own transaction with its row in schema_version, so a crash mid-way leaves the
schema at the last whole version. An advisory lock keeps two starting services from applying the
same version at once. A database newer than this code is refused, not written to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from agent.errors import ConfigError

# Any fixed number: the lock only has to be the same for every jha fleet on this database.
_LOCK_KEY = 0x6A686166  # "jhaf"
_NAME = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> tuple[Migration, ...]:
    found = []
    for entry in resources.files("agent.fleet.migrations").iterdir():
        m = _NAME.fullmatch(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations are not numbered 1..n: {[m.name for m in found]}")
    return tuple(found)


def migrate(conn: Any) -> list[str]:
    """Bring the schema up to date on a psycopg connection; the names applied now."""
    known = migrations()
    with conn.transaction():
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
    try:
        with conn.transaction():
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
        current = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
        conn.commit()
        if current > len(known):
            raise ConfigError(
                f"the fleet database is at schema version {current}, newer than this jha "
                f"({len(known)}): upgrade jha fleet before running it on this database"
            )
        applied = []
        for m in known[current:]:
            with conn.transaction():
                conn.execute(m.sql)
                conn.execute(
                    "INSERT INTO schema_version (version, name) VALUES (%s, %s)",
                    (m.version, m.name),
                )
            applied.append(m.name)
        return applied
    finally:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
