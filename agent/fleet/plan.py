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

    def to_dict(self) -> dict[str, Any]:
        def iso(t: datetime | None) -> str | None:
            return None if t is None else t.astimezone(UTC).isoformat()

        return {
            "site": self.site,
            "line": self.line,
            "topic_prefix": self.prefix,
            "machine": self.machine,
            "joint": self.joint,
            "status": self.status.value,
            "ne107": self.ne107,
            "reason": self.reason,
            "indicator": self.indicator,
            "value": self.value,
            "unit": self.unit,
            "estimated_at": iso(self.estimated_at),
            "forecast": None
            if self.next_limit is None
            else {
                "limit": self.next_limit,
                "at": iso(self.forecast_at),
                "interval": [iso(self.forecast_low), iso(self.forecast_high)],
            },
            "recommendation": self.recommendation,
            **(
                {"history": [{"time": t, "value": v} for t, v in self.history]}
                if self.history
                else {}
            ),
            "report_id": self.report_id,
            "report_url": f"/reports/{self.report_id}" if self.report_stored else None,
            "last_report_at": iso(self.last_report_at),
            "stale": self.stale,
        }


_SEVERITY = {Status.ALERT: 0, Status.WATCH: 1, Status.UNKNOWN: 2, Status.OK: 3}

_QUERY = """
SELECT m.site, m.line, h.prefix, h.machine, h.joint, h.status, h.ne107,
       h.reason, h.indicator, h.value, h.unit, h.estimated_at, h.next_limit,
       h.forecast_at, h.forecast_low, h.forecast_high, h.recommendation,
       CASE WHEN %(history)s THEN h.history END, h.report_id::text,
       EXISTS (SELECT 1 FROM reports r WHERE r.report_id = h.report_id), m.last_report_at,
       h.spark
FROM joint_latest l
JOIN joint_health h ON h.message_id = l.message_id
JOIN machines m ON m.prefix = l.prefix AND m.machine = l.machine
WHERE (%(site)s::text IS NULL OR m.site = %(site)s)
  AND (%(line)s::text IS NULL OR m.line = %(line)s)
  AND (%(machine)s::text IS NULL OR m.machine = %(machine)s)
  AND (%(indicator)s::text IS NULL OR h.indicator = %(indicator)s
       OR h.document->'indicators' @> jsonb_build_array(jsonb_build_object('name', %(indicator)s)))
"""


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
        now = now or datetime.now(UTC)
        rows = self._query(_QUERY, f.__dict__)
        plan = [self._row(r, now) for r in rows]
        plan.sort(key=_order)
        return plan

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

    def _row(self, r: tuple[Any, ...], now: datetime) -> PlanRow:
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
            stale=now - r[20] > self.stale_after,
        )


def _order(row: PlanRow) -> tuple[Any, ...]:
    far = datetime.max.replace(tzinfo=UTC)
    return (
        _SEVERITY[row.status],
        row.forecast_at or far,
        row.site,
        row.line,
        row.machine,
        row.joint,
    )
