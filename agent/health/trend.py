"""Trends with the time left until each threshold.

The trend is a Theil-Sen line (robust to the odd bad fit in the history) of the indicator
against time in days; its confidence interval on the slope gives the interval of the forecast.
The line follows the current wear regime: when the history's slope changed significantly
(agent.health.regime: a two-segment fit tested with Davies' bound), it is fitted to the points
since that change only, and says so (Trend.basis).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import numpy as np
from scipy import stats

from agent.health.display import indicator_info
from agent.health.regime import MIN_AFTER, find_break
from agent.health.status import Status, TrendPoint

SECONDS_PER_DAY = 86_400.0
# Below these the line is shown but not extrapolated: five cycles two minutes apart say nothing
# about the rate per day, and a forecast from them ("watch in ~0 d") would be acted on.
MIN_FORECAST_POINTS = 3  # the line itself needs as many
MIN_FORECAST_SPAN_DAYS = 1.0


class LimitName(StrEnum):
    """The two limits of an indicator, in the order a wearing joint reaches them."""

    WATCH = "watch"
    ALERT = "alert"


class TrendBasis(StrEnum):
    """Which points a trend line is fitted to (see Trend)."""

    HISTORY = "history"  # no change of slope found: all of them
    SINCE_BREAK = "since_break"  # the points from the break on
    RECENT_BREAK = "recent_break"  # a break too recent for a line of its own: all of them


@dataclass(frozen=True)
class Forecast:
    """Days from the last point until the trend line reaches `limit` (0 when already there).

    days_low/days_high come from the slope's interval; days_high is None when that interval
    reaches zero or below (the limit may never be reached).
    """

    limit_name: LimitName
    limit: float
    days: float
    days_low: float
    days_high: float | None

    @property
    def reached(self) -> bool:
        return self.days == 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "limit_name": self.limit_name,
            "limit": self.limit,
            "days": self.days,
            "days_low": self.days_low,
            "days_high": self.days_high,
            "reached": self.reached,
        }

    def describe(self) -> str:
        if self.reached:
            return f"{self.limit_name} limit already reached by the trend"
        high = "never" if self.days_high is None else f"{self.days_high:.3g}"
        return (
            f"{self.limit_name} limit in {self.days:.3g} days "
            f"(interval {self.days_low:.3g} to {high} days)"
        )


@dataclass(frozen=True)
class Trend:
    """The Theil-Sen line of the points it was fitted to: n_points, first_time_iso, span_days
    and intercept are those of the fit; history_* of the whole finite history.

    basis says which points: HISTORY (no change of slope found: all of them), SINCE_BREAK (the
    points from the break at break_time_iso on) or RECENT_BREAK (a break with fewer than
    agent.health.regime.MIN_AFTER points after it: the whole history's line, with the slope
    interval's high end raised to the slope after the break, so the forecast's early end allows
    for the new regime).
    """

    indicator: str
    n_points: int
    first_time_iso: str
    last_time_iso: str
    span_days: float
    slope_per_day: float  # indicator units (SI) per day
    slope_low_per_day: float
    slope_high_per_day: float
    confidence: float
    intercept: float  # line value at the first point's time
    level_now: float  # line value at the last point's time
    forecast_watch: Forecast | None
    forecast_alert: Forecast | None
    basis: TrendBasis = TrendBasis.HISTORY
    history_points: int = 0
    history_first_time_iso: str = ""
    break_time_iso: str | None = None
    break_p_value: float | None = None  # Davies' p-value of the change of slope
    points_after_break: int = 0  # points later than the break's own
    # Why no forecast was made from this line (too few points or too short a span), else None.
    forecast_withheld: str | None = None

    def line_at(self, days: float) -> float:
        """The trend line at `days` after its first point (first_time_iso)."""
        return self.intercept + self.slope_per_day * days

    def since_text(self) -> str:
        """The date of the break the line is fitted since (YYYY-MM-DD, UTC), or ''."""
        return "" if self.break_time_iso is None else _date(self.break_time_iso)

    def over_text(self, noun: str = "cycles") -> str:
        """The opening of a forecast sentence: which points the rate is taken over."""
        if self.basis == TrendBasis.SINCE_BREAK:
            return (
                f"Since {self.since_text()}, when a change of slope was detected "
                f"({self.n_points} {noun}, {self.span_days:.3g} days),"
            )
        return f"Over {self.n_points} {noun} ({self.span_days:.3g} days)"

    def basis_text(self) -> str:
        """Why these points, for people."""
        if self.basis == TrendBasis.SINCE_BREAK:
            return (
                f"fitted since {self.since_text()}: the slope changed there (Davies "
                f"p = {self.break_p_value:.2g}); {self.history_points - self.n_points} "
                "older point(s) left out"
            )
        if self.basis == TrendBasis.RECENT_BREAK:
            return (
                f"fitted to the whole history: the slope changed at {self.since_text()} "
                f"(Davies p = {self.break_p_value:.2g}), too recently for a line of its "
                f"own ({self.points_after_break} point(s) after it, {MIN_AFTER} needed); "
                "the interval's early end allows for the new slope"
            )
        return "fitted to the whole history: no significant change of slope"

    def to_dict(self) -> dict[str, Any]:
        return {
            "indicator": self.indicator,
            "n_points": self.n_points,
            "first_time": self.first_time_iso,
            "last_time": self.last_time_iso,
            "span_days": self.span_days,
            "slope_per_day": self.slope_per_day,
            "slope_low_per_day": self.slope_low_per_day,
            "slope_high_per_day": self.slope_high_per_day,
            "confidence": self.confidence,
            "intercept": self.intercept,
            "level_now": self.level_now,
            "forecast_watch": _maybe_dict(self.forecast_watch),
            "forecast_alert": _maybe_dict(self.forecast_alert),
            "basis": self.basis,
            "basis_text": self.basis_text(),
            "history_points": self.history_points,
            "history_first_time": self.history_first_time_iso,
            "break_time": self.break_time_iso,
            "break_p_value": self.break_p_value,
            "points_after_break": self.points_after_break,
            "forecast_withheld": self.forecast_withheld,
        }

    def describe(self) -> str:
        info = indicator_info(self.indicator)
        per_day = self.slope_per_day * info.scale
        since = f" since {self.since_text()}" if self.basis == TrendBasis.SINCE_BREAK else ""
        parts = [
            f"trend {per_day:+.3g} {info.display_unit}/day over {self.n_points} points"
            f"{since} ({self.span_days:.3g} days)"
        ]
        for fc in (self.forecast_watch, self.forecast_alert):
            if fc is not None:
                parts.append(fc.describe())
        if self.forecast_withheld is not None:
            parts.append(self.forecast_withheld)
        elif self.forecast_watch is None and self.forecast_alert is None:
            parts.append("no limit crossing forecast (slope not positive or no limits)")
        return "; ".join(parts)


def _maybe_dict(forecast: Forecast | None) -> dict[str, Any] | None:
    return None if forecast is None else forecast.to_dict()


def days_since(points: Sequence[TrendPoint]) -> np.ndarray:
    """Times of the points in days after the first one."""
    if not points:
        return np.zeros(0)
    t0 = _parse_time(points[0].time_iso)
    return np.array(
        [(_parse_time(p.time_iso) - t0).total_seconds() / SECONDS_PER_DAY for p in points]
    )


def trend(
    points: Sequence[TrendPoint],
    watch: float | None = None,
    alert: float | None = None,
    indicator: str = "value",
    confidence: float = 0.95,
) -> Trend | None:
    """Theil-Sen trend of a history; None with < 3 finite points or no spread in time.

    The line follows the current wear regime (agent.health.regime): after a significant change
    of slope with at least MIN_AFTER points after it, only the points from the break on are
    fitted, since the flat weeks before an onset of wear would make the forecast late. A break
    with fewer points after it keeps the whole history's line (one or two points give no slope
    one can trust, and one bad fit at the end looks the same) but raises the slope interval's
    high end to the slope after the break: the forecast's early end is then as early as the new
    regime would make it, a warning that may come too soon, never one that comes too late.
    """
    finite = sorted(
        (p for p in points if math.isfinite(p.value)), key=lambda p: _parse_time(p.time_iso)
    )
    if len(finite) < 3:
        return None
    x_all = days_since(finite)
    y_all = np.array([p.value for p in finite])
    if np.ptp(x_all) <= 0.0:
        return None
    brk = find_break(x_all, y_all)
    basis: TrendBasis = TrendBasis.HISTORY
    used, x, y = finite, x_all, y_all
    if brk is not None:
        after = len(finite) - 1 - brk.index
        basis = TrendBasis.SINCE_BREAK if after >= MIN_AFTER else TrendBasis.RECENT_BREAK
        if basis == TrendBasis.SINCE_BREAK:
            used = finite[brk.index :]
            x, y = x_all[brk.index :] - x_all[brk.index], y_all[brk.index :]
    slope, intercept, low, high = (float(v) for v in stats.theilslopes(y, x, alpha=confidence))
    if brk is not None and basis == TrendBasis.RECENT_BREAK:
        high = max(high, brk.slope_after)
    # scipy's intercept is at x = 0, which is the first used point's time here.
    level_now = intercept + slope * float(x[-1])
    span = float(x[-1] - x[0])
    withheld = forecast_withheld(len(used), span)
    fc_watch = _forecast(LimitName.WATCH, watch, level_now, slope, low, high)
    fc_alert = _forecast(LimitName.ALERT, alert, level_now, slope, low, high)
    if withheld is not None:
        # A line already past a limit says so (no extrapolation); no date for one ahead.
        fc_watch = fc_watch if fc_watch is not None and fc_watch.reached else None
        fc_alert = fc_alert if fc_alert is not None and fc_alert.reached else None
    return Trend(
        indicator=indicator,
        n_points=len(used),
        first_time_iso=used[0].time_iso,
        last_time_iso=used[-1].time_iso,
        span_days=span,
        slope_per_day=slope,
        slope_low_per_day=low,
        slope_high_per_day=high,
        confidence=confidence,
        intercept=intercept,
        level_now=level_now,
        forecast_watch=fc_watch,
        forecast_alert=fc_alert,
        basis=basis,
        history_points=len(finite),
        history_first_time_iso=finite[0].time_iso,
        break_time_iso=None if brk is None else finite[brk.index].time_iso,
        break_p_value=None if brk is None else brk.p_value,
        points_after_break=0 if brk is None else len(finite) - 1 - brk.index,
        forecast_withheld=withheld,
    )


def forecast_withheld(n_points: int, span_days: float) -> str | None:
    """Why a line of n_points over span_days is not extrapolated to a limit, or None."""
    if n_points >= MIN_FORECAST_POINTS and span_days >= MIN_FORECAST_SPAN_DAYS:
        return None
    return (
        f"not enough history yet for a forecast: {n_points} cycles over {_span_text(span_days)}"
        f" (a forecast needs at least {MIN_FORECAST_POINTS} over at least "
        f"{MIN_FORECAST_SPAN_DAYS:g} day)"
    )


def _span_text(days: float) -> str:
    if days >= 1.0:
        return f"{days:.3g} days"
    if days * 24.0 >= 1.0:
        return f"{days * 24.0:.3g} h"
    return f"{days * 1440.0:.3g} min"


def _forecast(
    name: LimitName, limit: float | None, level: float, slope: float, low: float, high: float
) -> Forecast | None:
    if limit is None:
        return None
    gap = limit - level
    # Checked before the slope: a line already past the limit has reached it even when it
    # now falls (after a repair, say) or stays flat.
    if gap <= 0.0:
        return Forecast(name, limit, 0.0, 0.0, 0.0)
    if not slope > 0.0:
        return None
    # Steeper slope -> sooner: the interval's high slope bounds the time from below.
    days_low = gap / max(high, slope)
    days_high = gap / low if low > 0.0 else None
    return Forecast(name, limit, gap / slope, days_low, days_high)


def next_forecast(tr: Trend | None, passed: LimitName | None = None) -> Forecast | None:
    """The first limit the trend line has yet to reach, above the one the last value already
    passed (`passed`: None, watch or alert)."""
    if tr is None or passed == LimitName.ALERT:
        return None
    ahead = (
        (tr.forecast_alert,)
        if passed == LimitName.WATCH
        else (tr.forecast_watch, tr.forecast_alert)
    )
    return next((fc for fc in ahead if fc is not None and not fc.reached), None)


def passed_limit(status: Status) -> LimitName | None:
    """The limit a status says the last value is at or past."""
    return {Status.WATCH: LimitName.WATCH, Status.ALERT: LimitName.ALERT}.get(status)


def forecast_sentence(tr: Trend | None, n_points: int = 0, passed: LimitName | None = None) -> str:
    """For people: how the trend goes and when it reaches the next limit, with the interval.
    `passed` is the limit the last value is already at or past (see passed_limit)."""
    if tr is None:
        return f"{n_points} point(s) in the history: a trend needs at least 3 at different times."
    if tr.forecast_withheld is not None:
        # No rate either: a slope per day from minutes of data reads as a fact it is not.
        text = tr.forecast_withheld[0].upper() + tr.forecast_withheld[1:] + "."
        reached = [f for f in (tr.forecast_alert, tr.forecast_watch) if f is not None]
        if reached:
            text += f" The line is already at or past the {reached[0].limit_name} limit."
        return text
    info = indicator_info(tr.indicator)
    rate = f"{tr.slope_per_day * info.scale:+.3g} {info.display_unit}/day".replace(" /", "/")
    parts = [f"{tr.over_text('cycles')} {info.label} changes by {rate}."]
    if tr.basis == TrendBasis.RECENT_BREAK:
        parts.append(recent_break_sentence(tr))
    fc = next_forecast(tr, passed)
    if fc is not None:
        high = (
            "an open end (the rise is not certain)"
            if fc.days_high is None
            else f"{fc.days_high:.3g} days"
        )
        parts.append(
            f"At this rate it reaches the {fc.limit_name} limit "
            f"{info.format(fc.limit)} in about {fc.days:.3g} days "
            f"({100 * tr.confidence:.0f} % interval: {fc.days_low:.3g} days to "
            f"{high})."
        )
    elif passed == LimitName.ALERT or (tr.forecast_alert is not None and tr.forecast_alert.reached):
        parts.append("It is at or past the alert limit: no further limit to forecast.")
    elif not tr.slope_per_day > 0:
        parts.append("No limit crossing is forecast: it is not rising.")
    elif tr.forecast_watch is None and tr.forecast_alert is None:
        parts.append("No limit crossing is forecast: no limits are configured.")
    else:
        parts.append("The trend line is at or past the watch limit.")
    return " ".join(parts)


def recent_break_sentence(tr: Trend) -> str:
    """For people: a break too recent to fit a line to, and what the forecast does about it."""
    return (
        f"Its slope changed at {tr.since_text()}, too recently to fit a line to "
        f"({tr.points_after_break} point(s) after it): the interval's early end allows for "
        "the new slope."
    )


def _date(time_iso: str) -> str:
    """YYYY-MM-DD (UTC) of a point's time."""
    return _parse_time(time_iso).astimezone(UTC).date().isoformat()


def _parse_time(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"trend point time {text!r}: expected ISO 8601 text") from exc
    if moment.tzinfo is None:
        raise ValueError(f"trend point time {text!r}: expected a timezone (UTC)")
    return moment
