"""What maintenance should do about a joint, and by when: the line a planner acts on.

From the joint's verdict and its trend's forecast (agent.health.trend): past the alert limit,
service now; past the watch limit, service before the alert limit's forecast date, taken at the
early end of its 95 % interval (a planner who keeps that date is late at most 1 time in 40); a
failed cycle, check the test set-up; no valid estimate, what is missing. Severity orders the
rows of the table and the page: the joint to act on first comes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Protocol, TypeVar

from agent.health.status import Ne107, Status
from agent.health.trend import Forecast, Trend

# Higher first: out of specification, a failed measurement, watch, no estimate, ok.
_SEVERITY = {
    Ne107.OUT_OF_SPECIFICATION: 4,
    Ne107.FAILURE: 3,
    Ne107.MAINTENANCE_REQUIRED: 2,
    Ne107.CHECK_FUNCTION: 1,
    Ne107.NORMAL: 0,
}


@dataclass(frozen=True)
class Recommendation:
    action: str
    severity: int
    service_by: date | None = None  # the early end of the alert limit's forecast interval
    forecast_date: date | None = None  # the trend line's own crossing

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "severity": self.severity,
            "service_by": None if self.service_by is None else self.service_by.isoformat(),
            "alert_forecast": None
            if self.forecast_date is None
            else self.forecast_date.isoformat(),
        }


def _on(trend: Trend, days: float) -> date:
    return (datetime.fromisoformat(trend.last_time_iso) + timedelta(days=days)).date()


def _ahead(fc: Forecast | None) -> Forecast | None:
    return fc if fc is not None and not fc.reached else None


def recommend(
    status: Status,
    signal: Ne107,
    trend: Trend | None,
    *,
    error: str | None = None,
    outcome: str | None = None,
    has_value: bool = True,
    reason: str = "",
) -> Recommendation:
    """The recommendation for a joint's verdict (JointReport.recommendation passes its own)."""
    severity = _SEVERITY.get(signal, 1)
    if outcome == "dry_run":
        return Recommendation("none: dry run, nothing measured", 0)
    if signal is Ne107.FAILURE:
        return Recommendation(f"check the test cycle: {error or 'it failed'}", severity)
    if status is Status.ALERT or signal is Ne107.OUT_OF_SPECIFICATION:
        return Recommendation("service now: past the alert limit", severity)
    alert = None if trend is None else _ahead(trend.forecast_alert)
    if status is Status.WATCH or signal is Ne107.MAINTENANCE_REQUIRED:
        if trend is not None and alert is not None:
            by, on = _on(trend, alert.days_low), _on(trend, alert.days)
            return Recommendation(
                f"plan service before {by.isoformat()} (alert limit forecast for {on.isoformat()})",
                severity,
                by,
                on,
            )
        why = (
            trend.forecast_withheld
            if trend is not None and trend.forecast_withheld
            else "no alert date forecast yet"
        )
        return Recommendation(f"plan service: past the watch limit; {why}", severity)
    if signal is Ne107.CHECK_FUNCTION or not has_value:
        return Recommendation(f"no valid estimate yet: {reason}", severity)
    watch = None if trend is None else _ahead(trend.forecast_watch)
    if trend is not None and watch is not None:
        on = _on(trend, watch.days)
        return Recommendation(f"none; watch limit forecast for {on.isoformat()}", severity)
    return Recommendation("none", severity)


class _Recommended(Protocol):
    @property
    def recommendation(self) -> Recommendation: ...


R = TypeVar("R", bound=_Recommended)


def by_severity(joints: Sequence[R]) -> list[R]:
    """Most severe first; equal ones keep their order (machine, then joint)."""
    return sorted(joints, key=lambda j: -j.recommendation.severity)
