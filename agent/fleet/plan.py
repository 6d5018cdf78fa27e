"""The maintenance plan: the newest health of every joint of every machine, filtered, sorted by
status (alert, watch, unknown, ok) and then by the date its next limit is forecast (the soonest
first; no forecast last), with the forecast's interval, the trend's newest points and the
report it came from. A machine with no report for stale_after_s is stale.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from agent.health.status import Status

FILTERS = ("site", "line", "machine", "indicator")


@dataclass(frozen=True)
class PlanFilter:
    site: str | None = None
    line: str | None = None
    machine: str | None = None
    indicator: str | None = None
    history: bool = False  # the trends' points in the JSON (the page needs only the sparkline)


@dataclass(frozen=True)
class PlanRow:
    site: str
    line: str
    prefix: str
    machine: str
    joint: str
    status: Status
    ne107: str
    reason: str | None
    indicator: str
    value: float | None
    unit: str | None
    estimated_at: datetime
    next_limit: str | None
    forecast_at: datetime | None
    forecast_low: datetime | None
    forecast_high: datetime | None
    recommendation: dict[str, Any] | None
    history: tuple[tuple[str, float], ...]  # empty unless asked for (PlanFilter.history)
    spark: str | None  # polyline coordinates of the trend (agent.fleet.spark)
    report_id: str
    report_stored: bool
    last_report_at: datetime
    stale: bool
    # The machine's agent as its retained status topic last said: "online", "offline", or None
    # (an agent that does not name itself, or whose status never arrived), and since when.
    agent_state: str | None = None
    agent_since: datetime | None = None


# The plan's rows, filtered and in the plan's order (status, then the next limit's date, soonest
# first, none last; names in byte order so the order is the same on every database).
_BASE = """
SELECT m.site, m.line, h.prefix, h.machine, h.joint, h.status, h.ne107,
       h.reason, h.indicator, h.value, h.unit, h.estimated_at, h.next_limit,
       h.forecast_at, h.forecast_low, h.forecast_high, h.recommendation,
       CASE WHEN %(history)s THEN h.document->'history' END AS history,
       h.report_id::text AS report_id,
       EXISTS (SELECT 1 FROM reports r WHERE r.report_id = h.report_id
               AND r.created_at = h.report_created_at) AS report_stored,
       m.last_report_at, h.spark, m.last_report_at < %(stale_before)s AS stale,
       CASE h.status WHEN 'alert' THEN 0 WHEN 'watch' THEN 1 WHEN 'unknown' THEN 2 ELSE 3 END
           AS severity,
       m.client_id, a.state AS agent_state, coalesce(a.at, a.received_at) AS agent_since
FROM joint_latest l
JOIN joint_health h ON h.message_id = l.message_id AND h.report_created_at = l.report_created_at
JOIN machines m ON m.prefix = l.prefix AND m.machine = l.machine
LEFT JOIN agent_status a ON a.prefix = m.prefix AND a.client_id = m.client_id
WHERE (%(site)s::text IS NULL OR m.site = %(site)s)
  AND (%(line)s::text IS NULL OR m.line = %(line)s)
  AND (%(machine)s::text IS NULL OR m.machine = %(machine)s)
  AND (%(indicator)s::text IS NULL OR h.indicator = %(indicator)s
       OR %(indicator)s = ANY (h.indicators))
"""
_ORDER = (
    'severity, forecast_at ASC NULLS LAST, site COLLATE "C", line COLLATE "C", '
    'machine COLLATE "C", joint COLLATE "C"'
)
_ROWS = f"SELECT * FROM ({_BASE}) p ORDER BY {_ORDER}"
# The JSON API's rows, built by PostgreSQL: for thousands of joints several times faster than
# building and encoding objects in Python. Times in UTC (the reader's session time zone).
_FIELDS = """
    'site', site, 'line', line, 'topic_prefix', prefix, 'machine', machine, 'joint', joint,
    'status', status, 'ne107', ne107, 'reason', reason, 'indicator', indicator, 'value', value,
    'unit', unit, 'estimated_at', estimated_at,
    'forecast', CASE WHEN next_limit IS NOT NULL THEN json_build_object('limit', next_limit,
        'at', forecast_at, 'interval', json_build_array(forecast_low, forecast_high)) END,
    'recommendation', recommendation, 'report_id', report_id,
    'report_url', CASE WHEN report_stored THEN '/reports/' || report_id END,
    'last_report_at', last_report_at, 'stale', stale,
    'agent', CASE WHEN client_id IS NOT NULL THEN json_build_object('client_id', client_id,
        'state', agent_state, 'since', agent_since) END"""
# json, not jsonb: built once and sent, it needs no binary form (twice as fast here).
_HISTORY = ", 'history', history"
_JSON = {
    with_history: f"""
SELECT coalesce(json_agg(json_build_object({_FIELDS}{_HISTORY if with_history else ""})
    ORDER BY {_ORDER}), '[]')::text
FROM ({_BASE}) p
"""
    for with_history in (False, True)
}


class PlanReader:
    """Read-only queries of the web side, on a connection of their own (autocommit)."""

    def __init__(
        self, connect: Callable[[], psycopg.Connection[Any]], stale_after_s: float
    ) -> None:
        self._connect = connect
        self.conn: psycopg.Connection[Any] | None = None
        self.stale_after = timedelta(seconds=stale_after_s)
        self._lock = threading.Lock()  # one psycopg connection, many HTTP threads

    def plan(self, f: PlanFilter, now: datetime | None = None) -> list[PlanRow]:
        """The plan's rows, in the plan's order."""
        return [self._row(r) for r in self._query(_ROWS, self._params(f, now))]

    def plan_json(self, f: PlanFilter, now: datetime | None = None) -> str:
        """The plan as a JSON array, built by the database (the keys of _JSON)."""
        return str(self._query(_JSON[f.history], self._params(f, now))[0][0])

    def _params(self, f: PlanFilter, now: datetime | None) -> dict[str, Any]:
        return {**f.__dict__, "stale_before": (now or datetime.now(UTC)) - self.stale_after}

    def report(self, report_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT document FROM reports WHERE report_id = %s", (report_id,))
        return None if not rows else dict(rows[0][0])

    def _query(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        """The rows, on a new connection when the last one broke (a database restart)."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self.conn is None or self.conn.closed:
                        self.conn = self._connect()
                    return self.conn.execute(sql, params).fetchall()
                except psycopg.OperationalError:
                    if self.conn is not None:
                        self.conn.close()
                    self.conn = None
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def _row(self, r: tuple[Any, ...]) -> PlanRow:
        history = tuple(
            (str(p.get("time")), float(p["value"]))
            for p in (r[17] or [])
            if isinstance(p, dict) and isinstance(p.get("value"), int | float)
        )
        return PlanRow(
            site=r[0],
            line=r[1],
            prefix=r[2],
            machine=r[3],
            joint=r[4],
            status=Status(r[5]),
            ne107=r[6],
            reason=r[7],
            indicator=r[8],
            value=r[9],
            unit=r[10],
            estimated_at=r[11],
            next_limit=r[12],
            forecast_at=r[13],
            forecast_low=r[14],
            forecast_high=r[15],
            recommendation=r[16] if isinstance(r[16], dict) else None,
            history=history,
            spark=r[21],
            report_id=r[18],
            report_stored=bool(r[19]),
            last_report_at=r[20],
            stale=bool(r[22]),
            agent_state=r[25],
            agent_since=r[26],
        )
