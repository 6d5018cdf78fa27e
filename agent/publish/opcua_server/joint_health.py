"""What the OPC UA health server shows of each joint, derived from a report: its NE 107 signal,
status, indicator values with their units, and the forecast of the next limit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.health.status import Ne107, Status, ne107_of
from agent.publish.opcua_server.units import unit_of
from agent.report.model import JointReport, Report


@dataclass(frozen=True)
class IndicatorValue:
    name: str
    value: float  # SI; NaN when there is no valid value
    unit: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "unit": self.unit}


@dataclass(frozen=True)
class JointHealth:
    """What the server shows of one joint, derived from a report."""

    controller: str
    joint: str
    ne107: Ne107
    status: Status
    reason: str
    indicator: str
    error: str
    indicators: tuple[IndicatorValue, ...]
    forecast_limit: str
    forecast_days: float
    forecast_days_low: float
    forecast_days_high: float
    last_estimate: datetime | None
    message_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "controller": self.controller,
            "joint": self.joint,
            "ne107": self.ne107.value,
            "ne107_letter": self.ne107.letter,
            "status": self.status.value,
            "reason": self.reason,
            "indicator": self.indicator,
            "error": self.error,
            "indicators": [i.to_dict() for i in self.indicators],
            "forecast_limit": self.forecast_limit,
            "forecast_days": self.forecast_days,
            "forecast_days_low": self.forecast_days_low,
            "forecast_days_high": self.forecast_days_high,
            "last_estimate": None if self.last_estimate is None else self.last_estimate.isoformat(),
            "message_id": self.message_id,
        }


def _finite_or_nan(value: float | None) -> float:
    return float(value) if value is not None and math.isfinite(value) else math.nan


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def signal_of(j: JointReport) -> Ne107:
    """The joint's NE 107 signal: the report's own when it carries one."""
    given = getattr(j, "ne107", None)
    if isinstance(given, Ne107):
        return given
    return ne107_of(j.status, failed=j.error is not None)


def message_id_of(report: Report) -> str:
    return str(getattr(report, "message_id", "") or "")


def joint_health(report: Report, j: JointReport) -> JointHealth:
    values: dict[str, IndicatorValue] = {}
    judged_unit = unit_of(j.indicator_name)
    values[j.indicator_name] = IndicatorValue(
        j.indicator_name, _finite_or_nan(j.value), judged_unit
    )
    if j.result is not None:  # both forms of the backlash estimate when there is one
        values.setdefault(
            "amplitude_rad_s",
            IndicatorValue("amplitude_rad_s", _finite_or_nan(j.result.amplitude_rad_s), "rad/s"),
        )
        if j.result.backlash_rad is not None:
            values.setdefault(
                "backlash_rad",
                IndicatorValue("backlash_rad", _finite_or_nan(j.result.backlash_rad), "rad"),
            )
    times = [parse_time(j.history[-1].time_iso)] if j.history else []
    for s in j.indicators:
        latest = s.latest
        values[s.indicator] = IndicatorValue(
            s.indicator,
            _finite_or_nan(None if latest is None else latest.value),
            unit_of(s.indicator, s.unit),
        )
        if latest is not None:
            times.append(parse_time(latest.time_iso))
    known = [t for t in times if t is not None]
    limit, days, low, high = "", math.nan, math.nan, math.nan
    if j.trend is not None:
        fc = j.trend.forecast_watch
        if fc is None or fc.reached or j.status is not Status.OK:
            fc = j.trend.forecast_alert or fc
        if fc is not None:
            limit, days, low = fc.limit_name.value, fc.days, fc.days_low
            high = math.inf if fc.days_high is None else fc.days_high
    return JointHealth(
        controller=j.controller,
        joint=j.joint,
        ne107=signal_of(j),
        status=j.status,
        reason=j.verdict_reason,
        indicator=j.indicator_name,
        error=j.error or "",
        indicators=tuple(values.values()),
        forecast_limit=limit,
        forecast_days=days,
        forecast_days_low=low,
        forecast_days_high=high,
        last_estimate=max(known) if known else None,
        message_id=message_id_of(report),
    )


def health_of(report: Report) -> tuple[JointHealth, ...]:
    return tuple(joint_health(report, j) for j in (*report.joints, *report.indicator_joints))
