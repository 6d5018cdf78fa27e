"""The fleet's PostgreSQL store (psycopg 3): one transaction per batch of messages, committed
before any of them is acknowledged to the broker (agent.fleet.ingest). Each kind of row is
written with one statement (its columns as arrays); the statements go in one round trip.

Idempotent by the agents' message ids: a duplicate inserts nothing (ON CONFLICT DO NOTHING) and
moves nothing (the newest-health pointer and a machine's last report time only move forward),
so a QoS 1 redelivery or a replay of old messages leaves the database as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any

import orjson
import psycopg

from agent.fleet.messages import HealthMessage, Message, ReportMessage, StatusMessage
from agent.fleet.migrate import migrate

# Each kind of row goes in one statement whose parameters are one array per column, sent in
# binary (psycopg's %b: no quoting, no escaping, a length per element). Against one executemany
# row by row (issue 17's burst, 500-message batches): the writer's Python time per batch 18 ms ->
# 7 ms, PostgreSQL's 28 ms -> 22 ms, and far fewer socket waits, each of which then waits for the
# GIL that the session's parsing holds. Rows are inserted in their arrays' order (WITH
# ORDINALITY, ORDER BY), the lock order store_batch chooses. Ids travel as text and become uuid
# in the statement; PostgreSQL validates the json columns as before. (Arrays in text format were
# six times slower: every quote in a document escaped, then parsed back.)
#
# Each id is claimed first (report_ids, message_ids: 0005), with its time: only the rows whose
# claim this statement made are stored, so an id replayed with another time (the partitioned
# keys would let it in as a second row) is not; the first of a batch's copies of an id wins.
_REPORT = (
    "WITH r AS (SELECT DISTINCT ON (report_id) report_id::uuid AS report_id, prefix, machine,"
    " host, created_at, document, n"
    " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::timestamptz[], %b::text[])"
    " WITH ORDINALITY AS r(report_id, prefix, machine, host, created_at, document, n)"
    " ORDER BY report_id, n),"
    " claimed AS (INSERT INTO report_ids (report_id, created_at)"
    " SELECT report_id, created_at FROM r ORDER BY n ON CONFLICT DO NOTHING RETURNING report_id)"
    " INSERT INTO reports (report_id, prefix, machine, host, created_at, document)"
    " SELECT report_id, prefix, machine, host, created_at, document::json FROM r"
    " WHERE report_id IN (SELECT report_id FROM claimed) ORDER BY n ON CONFLICT DO NOTHING"
)
# Rows of a batch whose id was claimed with another time (after the batch's own claims).
_REPORT_REPLAYS = (
    "SELECT count(*) FROM unnest(%b::text[], %b::timestamptz[]) AS r(id, at)"
    " JOIN report_ids i ON i.report_id = r.id::uuid AND i.created_at <> r.at"
)
_HEALTH_REPLAYS = (
    "SELECT count(*) FROM unnest(%b::text[], %b::timestamptz[]) AS r(id, at)"
    " JOIN message_ids i ON i.message_id = r.id::uuid AND i.report_created_at <> r.at"
)
_HEALTH_COLUMNS = (
    "message_id, report_id, prefix, machine, joint, status, ne107, indicator, value, unit,"
    " estimated_at, report_created_at, next_limit, forecast_at, forecast_low, forecast_high,"
    " reason, recommendation, spark, document, indicators"
)
_HEALTH = (
    "WITH r AS (SELECT DISTINCT ON (message_id::uuid) *"
    " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
    " %b::text[], %b::text[], %b::float8[], %b::text[], %b::timestamptz[], %b::timestamptz[],"
    " %b::text[], %b::timestamptz[], %b::timestamptz[], %b::timestamptz[], %b::text[],"
    " %b::text[], %b::text[], %b::text[], %b::text[])"
    f" WITH ORDINALITY AS r({_HEALTH_COLUMNS}, n) ORDER BY message_id::uuid, n),"
    " claimed AS (INSERT INTO message_ids (message_id, report_created_at)"
    " SELECT message_id::uuid, report_created_at FROM r"
    " ORDER BY n ON CONFLICT DO NOTHING RETURNING message_id)"
    f" INSERT INTO joint_health ({_HEALTH_COLUMNS})"
    " SELECT message_id::uuid, report_id::uuid, prefix, machine, joint, status,"
    " ne107, indicator, value, unit, estimated_at, report_created_at, next_limit, forecast_at,"
    " forecast_low, forecast_high, reason, recommendation::jsonb, spark, document::json,"
    # A list of names per row (arrays of arrays must be rectangular): a JSON array each.
    " ARRAY(SELECT json_array_elements_text(indicators::json))"
    " FROM r WHERE message_id::uuid IN (SELECT message_id FROM claimed)"
    " ORDER BY n ON CONFLICT DO NOTHING"
)
_MACHINE = (
    "INSERT INTO machines (prefix, machine, site, line, last_report_at, client_id)"
    " SELECT prefix, machine, site, line, last_report_at, client_id"
    " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::timestamptz[], %b::text[])"
    " WITH ORDINALITY AS r(prefix, machine, site, line, last_report_at, client_id, n)"
    " ORDER BY n ON CONFLICT (prefix, machine) DO UPDATE"
    " SET last_report_at = EXCLUDED.last_report_at, site = EXCLUDED.site, line = EXCLUDED.line,"
    " client_id = coalesce(EXCLUDED.client_id, machines.client_id)"
    " WHERE machines.last_report_at < EXCLUDED.last_report_at"
)
_STATUS = (
    "INSERT INTO agent_status (prefix, client_id, state, at, document)"
    " SELECT prefix, client_id, state, at, document::jsonb"
    " FROM unnest(%b::text[], %b::text[], %b::text[], %b::timestamptz[], %b::text[])"
    " WITH ORDINALITY AS r(prefix, client_id, state, at, document, n)"
    " ORDER BY n ON CONFLICT (prefix, client_id) DO UPDATE"
    " SET state = EXCLUDED.state, at = EXCLUDED.at, document = EXCLUDED.document,"
    " received_at = now()"
)


def _columns(rows: list[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows as one list per column: the parameters of a statement above."""
    return [list(column) for column in zip(*rows, strict=True)]


# Sort keys, never whole rows (two messages that claim one id may differ where one holds None,
# which does not compare): reports by id; health by joint, then id, so that the trigger that
# moves each joint's newest-health pointer locks the joints in one order too.
_FIRST = itemgetter(0)
_JOINT_THEN_ID = itemgetter(2, 3, 4, 0)


# The first instant of the month `retention_months` before this one (UTC).
_DROP_BEFORE = (
    "SELECT fleet_drop_before((date_trunc('month', now() AT TIME ZONE 'UTC')"
    " - make_interval(months => %s)) AT TIME ZONE 'UTC')"
)


@dataclass(frozen=True)
class Placement:
    site: str
    line: str


@dataclass(frozen=True)
class BatchResult:
    stored: int  # new rows (an agent status, an upsert, counts as stored)
    duplicates: int  # messages the database already held (replays included)
    replayed: int = 0  # of the duplicates: an id stored before with another time, refused


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
        """Write every message and commit once; on an error nothing of the batch stays.

        Rows go in key order: two transactions at once (two services in one shared
        subscription, or a redelivery racing its original) then take their row locks in the
        same order and wait for each other instead of deadlocking."""
        reports = [m for m in messages if isinstance(m, ReportMessage)]
        healths = [m for m in messages if isinstance(m, HealthMessage)]
        # An upsert may not touch one row twice in one statement: a client's newest status
        # (the last to arrive) stands for its others, as if each had been stored in turn.
        statuses = list(
            {(m.prefix, m.client_id): m for m in messages if isinstance(m, StatusMessage)}.values()
        )
        machines = self._machine_rows(reports, healths)
        # The statements in one round trip (a pipeline), then the commit. (A commit inside the
        # pipeline hung on a batch of 4,000 messages in psycopg 3.3: kept out.)
        stored = sum(isinstance(m, StatusMessage) for m in messages)  # each one an upsert
        try:
            with (
                self.conn.cursor() as report_cur,
                self.conn.cursor() as health_cur,
                self.conn.cursor() as other_cur,
            ):
                with self.conn.pipeline():
                    if reports:
                        rows = sorted(map(_report_row, reports), key=_FIRST)
                        report_cur.execute(_REPORT, _columns(rows))
                    if healths:
                        # The newest-health pointer (joint_latest) follows by a trigger (0002).
                        rows = sorted(map(_health_row, healths), key=_JOINT_THEN_ID)
                        health_cur.execute(_HEALTH, _columns(rows))
                    if machines:
                        other_cur.execute(_MACHINE, _columns(machines))
                    if statuses:
                        other_cur.execute(_STATUS, _columns([_status_row(m) for m in statuses]))
                stored += (report_cur.rowcount if reports else 0) + (
                    health_cur.rowcount if healths else 0
                )
                replayed = 0
                if stored < len(messages):  # only then can a row be a replay: no cost otherwise
                    replayed = self._replays(other_cur, reports, healths)
            self.conn.commit()
        except BaseException:
            if not self.conn.closed:
                self.conn.rollback()
            raise
        return BatchResult(stored, len(messages) - stored, replayed)

    @staticmethod
    def _replays(
        cur: psycopg.Cursor[Any], reports: list[ReportMessage], healths: list[HealthMessage]
    ) -> int:
        found = 0
        for sql, ids, times in (
            (_REPORT_REPLAYS, [m.report_id for m in reports], [m.created_at for m in reports]),
            (
                _HEALTH_REPLAYS,
                [m.message_id for m in healths],
                [m.report_created_at for m in healths],
            ),
        ):
            if ids:
                row = cur.execute(sql, [ids, times]).fetchone()
                found += 0 if row is None else int(row[0])
        return found

    def _machine_rows(
        self, reports: list[ReportMessage], healths: list[HealthMessage]
    ) -> list[tuple[Any, ...]]:
        """Per machine, its newest report time and the agent the newest message names."""
        newest: dict[tuple[str, str], tuple[datetime, str | None]] = {}
        for key, at, client_id in [
            ((m.prefix, m.machine), m.created_at, m.client_id) for m in reports
        ] + [((m.prefix, m.machine), m.report_created_at, m.client_id) for m in healths]:
            if key not in newest or newest[key][0] < at:
                newest[key] = (at, client_id)
        rows = []
        for (prefix, machine), (at, client_id) in sorted(newest.items()):  # one lock order
            place = self.placements[prefix]
            rows.append((prefix, machine, place.site, place.line, at, client_id))
        return rows

    def keep_partitions(self, retention_months: int | None, lock_timeout_s: float = 5.0) -> int:
        """This month's and next month's partitions made (migration 0004), and with a retention
        the history before it dropped; the number of monthly partitions dropped.

        Attaching or dropping a partition waits for every reader of the table (a plan being
        read, an operator's long query) and runs on the ingest's writer: past `lock_timeout_s`
        it gives up (psycopg.errors.LockNotAvailable) rather than hold up the ingest, and is
        tried again later."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(
                    "SELECT set_config('lock_timeout', %s, true)", (f"{lock_timeout_s * 1000:.0f}",)
                )
                cur.execute("SELECT fleet_month_partition(now())")
                cur.execute("SELECT fleet_month_partition(now() + interval '1 month')")
                dropped = 0
                if retention_months is not None:
                    row = cur.execute(_DROP_BEFORE, (retention_months,)).fetchone()
                    dropped = 0 if row is None else int(row[0])
            self.conn.commit()
        except BaseException:
            if not self.conn.closed:
                self.conn.rollback()
            raise
        return dropped

    def counts(self) -> dict[str, int]:
        """Rows per table (for tests and the benchmark)."""
        out = {}
        for table in ("reports", "joint_health", "joint_latest", "machines", "agent_status"):
            row = self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            out[table] = 0 if row is None else int(row[0])
        self.conn.commit()
        return out


def _report_row(m: ReportMessage) -> tuple[Any, ...]:
    return (m.report_id, m.prefix, m.machine, m.host, m.created_at, m.text)


def _health_row(m: HealthMessage) -> tuple[Any, ...]:
    f = m.forecast
    return (
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
        m.reason,
        None if m.recommendation is None else orjson.dumps(m.recommendation).decode(),
        m.spark,
        m.text,
        orjson.dumps(m.indicator_names).decode(),
    )


def _status_row(m: StatusMessage) -> tuple[Any, ...]:
    return (m.prefix, m.client_id, m.state, m.at, m.text)
