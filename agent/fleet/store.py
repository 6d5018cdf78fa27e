"""The fleet's PostgreSQL store (psycopg 3): one transaction per batch of messages, committed
before any of them is acknowledged to the broker (agent.fleet.ingest).

Idempotent by the agents' message ids: a duplicate inserts nothing (ON CONFLICT DO NOTHING) and
moves nothing (the newest-health pointer only moves forward in report time), so a QoS 1
redelivery or a replay of old messages leaves the database as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from agent.fleet.messages import HealthMessage, Message, ReportMessage, StatusMessage
from agent.fleet.migrate import migrate


@dataclass(frozen=True)
class Placement:
    site: str
    line: str


@dataclass(frozen=True)
class BatchResult:
    stored: int  # new rows
    duplicates: int  # messages the database already held


def connect(conninfo: str, password: str | None = None) -> psycopg.Connection[Any]:
    """A connection that is not in autocommit: every write belongs to one explicit commit."""
    if password is None:
        return psycopg.connect(conninfo, connect_timeout=10)
    return psycopg.connect(conninfo, connect_timeout=10, password=password)


class Store:
    def __init__(self, conn: psycopg.Connection[Any], placements: dict[str, Placement]) -> None:
        self.conn = conn
        self.placements = placements

    def migrate(self) -> list[str]:
        return migrate(self.conn)

    def store_batch(self, messages: Sequence[Message]) -> BatchResult:
        """Write every message and commit once; on an error nothing of the batch stays."""
        stored = 0
        try:
            with self.conn.cursor() as cur:
                for m in messages:
                    stored += self._store(cur, m)
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise
        return BatchResult(stored, len(messages) - stored)

    def _store(self, cur: psycopg.Cursor[Any], m: Message) -> int:
        if isinstance(m, ReportMessage):
            cur.execute(
                "INSERT INTO reports (report_id, prefix, machine, host, created_at, document)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (m.report_id, m.prefix, m.machine, m.host, m.created_at, Jsonb(m.document)),
            )
            new = cur.rowcount
            self._machine(cur, m.prefix, m.machine, m.created_at)
            return new
        if isinstance(m, HealthMessage):
            return self._health(cur, m)
        return self._status(cur, m)

    def _machine(self, cur: psycopg.Cursor[Any], prefix: str, machine: str, at: Any) -> None:
        place = self.placements[prefix]
        cur.execute(
            "INSERT INTO machines (prefix, machine, site, line, last_report_at)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (prefix, machine) DO UPDATE"
            " SET last_report_at = EXCLUDED.last_report_at, site = EXCLUDED.site,"
            " line = EXCLUDED.line WHERE machines.last_report_at < EXCLUDED.last_report_at",
            (prefix, machine, place.site, place.line, at),
        )

    def _health(self, cur: psycopg.Cursor[Any], m: HealthMessage) -> int:
        f = m.forecast
        cur.execute(
            "INSERT INTO joint_health (message_id, report_id, prefix, machine, joint, status,"
            " ne107, indicator, value, unit, estimated_at, report_created_at, next_limit,"
            " forecast_at, forecast_low, forecast_high, document) VALUES"
            " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            (
                m.message_id,
                m.report_id,
                m.prefix,
                m.machine,
                m.joint,
                m.status.value,
                m.ne107.value,
                m.indicator,
                m.value,
                m.unit,
                m.estimated_at,
                m.report_created_at,
                None if f is None else f.limit_name,
                None if f is None else f.at,
                None if f is None else f.low,
                None if f is None else f.high,
                Jsonb(m.document),
            ),
        )
        new = cur.rowcount
        if new:
            cur.execute(
                "INSERT INTO joint_latest (prefix, machine, joint, message_id, report_created_at,"
                " estimated_at) VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (prefix, machine, joint) DO UPDATE"
                " SET message_id = EXCLUDED.message_id,"
                " report_created_at = EXCLUDED.report_created_at,"
                " estimated_at = EXCLUDED.estimated_at"
                " WHERE (joint_latest.report_created_at, joint_latest.estimated_at)"
                " < (EXCLUDED.report_created_at, EXCLUDED.estimated_at)",
                (m.prefix, m.machine, m.joint, m.message_id, m.report_created_at, m.estimated_at),
            )
        self._machine(cur, m.prefix, m.machine, m.report_created_at)
        return new

    def _status(self, cur: psycopg.Cursor[Any], m: StatusMessage) -> int:
        cur.execute(
            "INSERT INTO agent_status (prefix, client_id, state, at, document)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (prefix, client_id) DO UPDATE"
            " SET state = EXCLUDED.state, at = EXCLUDED.at, document = EXCLUDED.document,"
            " received_at = now()",
            (m.prefix, m.client_id, m.state, m.at, Jsonb(m.document)),
        )
        return 1

    def counts(self) -> dict[str, int]:
        """Rows per table (for tests, the benchmark and `jha fleet` status logs)."""
        out = {}
        for table in ("reports", "joint_health", "joint_latest", "machines", "agent_status"):
            row = self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            out[table] = 0 if row is None else int(row[0])
        self.conn.commit()
        return out
