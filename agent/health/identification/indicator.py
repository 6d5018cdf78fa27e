"""The verdict on one identification indicator of one joint, against the joint's baseline.

Mapped to NE 107 like backlash (agent.health.verdicts, agent.health.status.ne107_of), with the
Theil-Sen trend of agent.health.trend and its forecast to the limits. A falling indicator
(stiffness) is trended as its negative, so the same forecast machinery gives the days until it
falls to its limit.

A change within the noise is not a warning: the relative standard deviation the WLS gave the
estimate, and the scatter of the baseline identifications, make the standard deviation of the
change; a limit crossed by less than `noise_sigmas` of those leaves the indicator OK, and says so.
An identification whose analysis failed after the last valid one makes the indicator NE 107 F
(as a failed backlash cycle does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.config.identification_limits import IdentificationLimitSettings
from agent.health.display import indicator_info
from agent.health.identification.baseline import (
    DEFAULT_LIMITS,
    Baseline,
    Direction,
    LimitKind,
    RelativeLimits,
    baseline_of,
    relative_limits,
)
from agent.health.status import Ne107, Status, TrendPoint, ne107_of
from agent.health.trend import (
    Forecast,
    LimitName,
    Trend,
    next_forecast,
    passed_limit,
    recent_break_sentence,
    trend,
)


@dataclass(frozen=True)
class IndicatorVerdict:
    indicator: str
    status: Status
    ne107: Ne107
    reason: str
    limits: RelativeLimits
    n_points: int
    value: float | None = None
    time_iso: str | None = None
    baseline: Baseline | None = None
    watch: float | None = None  # absolute limits in SI, once there is a baseline
    alert: float | None = None
    change: float | None = None  # value / baseline - 1
    sigma: float | None = None  # standard deviation of `change`
    significant: bool = False  # the change is beyond noise_sigmas * sigma
    trend: Trend | None = None  # of the value in SI; forecasts to the absolute limits
    failure: str | None = None  # the last identification's error, when it failed
    needed: int = DEFAULT_LIMITS.baseline_identifications  # for the baseline median
    # Why nothing judges the value yet, when it is more than a count of identifications still
    # to come (a one-off identification: nothing recorded, a robot file's design values only).
    no_baseline: str | None = None
    # The smallest change of the value against its baseline this identification resolves
    # (noise_sigmas standard deviations of `change`), and, when that is wider than the step to
    # the watch limit, why the indicator cannot be judged and what would fix it.
    resolution: float | None = None
    cannot_judge: str | None = None

    @property
    def forecast(self) -> Forecast | None:
        """The next limit the trend line is heading for."""
        return next_forecast(self.trend, passed_limit(self.status))

    @property
    def forecast_text(self) -> str:
        return forecast_sentence(self)

    def to_dict(self) -> dict[str, Any]:
        fc = self.forecast
        return {
            "indicator": self.indicator,
            "label": indicator_info(self.indicator).label,
            "status": self.status.value,
            "ne107": {"status": self.ne107.value, "letter": self.ne107.letter},
            "reason": self.reason,
            "value": self.value,
            "time": self.time_iso,
            "unit": indicator_info(self.indicator).unit,
            "n_points": self.n_points,
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "relative_limits": self.limits.to_dict(),
            "limits": {"watch": self.watch, "alert": self.alert},
            "change": self.change,
            "change_sigma": self.sigma,
            "significant": self.significant,
            "forecast": None if fc is None else fc.to_dict(),
            "forecast_text": self.forecast_text,
            "trend": None if self.trend is None else self.trend.to_dict(),
            "failure": self.failure,
            "baseline_needed": self.needed,
            "no_baseline": self.no_baseline,
            "resolution": self.resolution,
            "cannot_judge": self.cannot_judge,
        }


def assess_indicator(
    indicator: str,
    points: Sequence[tuple[TrendPoint, float | None]],
    settings: IdentificationLimitSettings | None = None,
    commissioning: float | None = None,
    failure: str | None = None,
) -> IndicatorVerdict:
    """The verdict on the latest value of one indicator of one joint; `points` oldest first,
    each with its relative standard deviation in % (None: not known)."""
    s = settings or DEFAULT_LIMITS
    lim = relative_limits(s)[indicator]
    finite = [(p, r) for p, r in points if math.isfinite(p.value)]
    base = baseline_of(finite, s.baseline_identifications, commissioning)
    verdict = _judge(indicator, finite, s, lim, base)
    if failure is not None:
        last = f"; the last valid {verdict.reason}" if verdict.value is not None else ""
        verdict = replace(
            verdict,
            status=Status.UNKNOWN,
            ne107=ne107_of(Status.UNKNOWN, failed=True),
            failure=failure,
            reason=f"identification failed: {failure}{last}",
        )
    return verdict


def _judge(
    indicator: str,
    finite: Sequence[tuple[TrendPoint, float | None]],
    s: IdentificationLimitSettings,
    lim: RelativeLimits,
    base: Baseline | None,
) -> IndicatorVerdict:
    info = indicator_info(indicator)
    history = [p for p, _ in finite]
    if not finite:
        return IndicatorVerdict(
            indicator,
            Status.UNKNOWN,
            ne107_of(Status.UNKNOWN),
            f"no valid {info.label} value",
            lim,
            0,
            needed=s.baseline_identifications,
        )
    last, last_rel = finite[-1]
    shown = f"{info.label} {info.format(last.value)}"

    def made(status: Status, reason: str, **more: Any) -> IndicatorVerdict:
        return IndicatorVerdict(
            indicator,
            status,
            ne107_of(status),
            reason,
            lim,
            len(finite),
            last.value,
            last.time_iso,
            base,
            needed=s.baseline_identifications,
            **more,
        )

    if base is None:
        reason = (
            f"{shown}: baseline being set ({len(finite)} of "
            f"{s.baseline_identifications} identifications)"
        )
        return made(Status.UNKNOWN, reason, trend=trend(history, indicator=indicator))
    if not (base.value > 0.0 and math.isfinite(base.rel_noise)):
        reason = (
            f"{shown}: baseline {info.format(base.value)} ({base.describe()}) is not "
            "positive, so no relative limit applies; set a commissioning value"
        )
        return made(Status.UNKNOWN, reason, trend=trend(history, indicator=indicator))
    watch, alert = lim.absolute(base.value)
    ratio = last.value / base.value
    own = 0.0 if last_rel is None else last_rel / 100.0
    sigma = ratio * math.hypot(max(own, base.point_noise), base.rel_noise)
    change = ratio - 1.0
    significant = abs(change) > s.noise_sigmas * sigma
    moved = f"x{ratio:.3g}" if lim.kind == LimitKind.RATIO else f"{100 * change:+.3g} %"
    shown += (
        f", {moved} on its baseline {info.format(base.value)} ({base.describe()}; "
        f"1 sd {100 * sigma:.2g} %)"
    )
    resolution = s.noise_sigmas * sigma
    step = lim.watch - 1.0 if lim.kind == LimitKind.RATIO else lim.watch
    judged: dict[str, Any] = {
        "watch": watch,
        "alert": alert,
        "change": change,
        "sigma": sigma,
        "significant": significant,
        "resolution": resolution,
        "trend": _trend(history, watch, alert, indicator, lim.direction),
    }
    if resolution > step:
        # An interval wider than the change it must judge: OK would claim what the data cannot
        # show, and a watch or an alert could be noise (NE 107 check function, as UNKNOWN).
        why = (
            f"cannot judge: this identification resolves changes of {100 * resolution:.2g} % "
            f"and more ({s.noise_sigmas:g} sd), wider than the step to the watch limit "
            f"{lim.text(lim.watch)}; a longer or richer excitation (more samples, more speed "
            "reversals, a wider speed range) narrows it"
        )
        return made(Status.UNKNOWN, f"{shown}: {why}", cannot_judge=why, **judged)
    status, limit_name, limit_rel, limit_abs = Status.OK, LimitName.WATCH, lim.watch, watch
    if lim.crossed(last.value, alert):
        status, limit_name, limit_rel, limit_abs = Status.ALERT, LimitName.ALERT, lim.alert, alert
    elif lim.crossed(last.value, watch):
        status = Status.WATCH
    past = "at or above" if lim.direction == Direction.RISE else "at or below"
    limit_text = f"{limit_name} limit {lim.text(limit_rel)} ({info.format(limit_abs)})"
    if status is Status.OK:
        ahead = "below" if lim.direction == Direction.RISE else "above"
        reason = f"{shown}: {ahead} the {limit_text}"
    elif not significant:
        reason = (
            f"{shown}: {past} the {limit_text}, but within the noise "
            f"({s.noise_sigmas:g} sd = {100 * s.noise_sigmas * sigma:.2g} %): no warning"
        )
        status = Status.OK
    else:
        reason = f"{shown}: {past} the {limit_text}"
    return made(status, reason, **judged)


def _trend(
    points: Sequence[TrendPoint],
    watch: float,
    alert: float,
    indicator: str,
    direction: Direction,
) -> Trend | None:
    """agent.health.trend.trend, for a falling indicator through its negative (the forecast
    machinery looks for a rise to the limit), turned back so that every number is in the
    value's sense."""
    if direction == Direction.RISE:
        return trend(points, watch, alert, indicator)
    mirrored = trend([TrendPoint(p.time_iso, -p.value) for p in points], -watch, -alert, indicator)
    if mirrored is None:
        return None

    def back(fc: Forecast | None) -> Forecast | None:
        return None if fc is None else replace(fc, limit=-fc.limit)

    return replace(
        mirrored, slope_per_day=-mirrored.slope_per_day,
        slope_low_per_day=-mirrored.slope_high_per_day,
        slope_high_per_day=-mirrored.slope_low_per_day, intercept=-mirrored.intercept,
        level_now=-mirrored.level_now, forecast_watch=back(mirrored.forecast_watch),
        forecast_alert=back(mirrored.forecast_alert),
    )  # fmt: skip


def forecast_sentence(v: IndicatorVerdict) -> str:
    """For people, in the words of agent.health.trend.forecast_sentence: how the indicator goes
    and when it reaches its next limit."""
    tr = v.trend
    if tr is None:
        return (
            f"{v.n_points} identification(s) judged: a trend needs at least 3 at different times."
        )
    info = indicator_info(v.indicator)
    rate = f"{tr.slope_per_day * info.scale:+.3g} {info.display_unit}/day".replace(" /", "/")
    parts = [f"{tr.over_text('identifications')} {info.label} changes by {rate}."]
    if tr.basis == "recent_break":
        parts.append(recent_break_sentence(tr))
    fc = v.forecast
    heading = tr.slope_per_day > 0 if v.limits.direction == Direction.RISE else tr.slope_per_day < 0
    if fc is not None:
        high = (
            "an open end (the change is not certain)"
            if fc.days_high is None
            else f"{fc.days_high:.3g} days"
        )
        parts.append(
            f"At this rate it reaches the {fc.limit_name} limit "
            f"{info.format(fc.limit)} in about {fc.days:.3g} days "
            f"({100 * tr.confidence:.0f} % interval: {fc.days_low:.3g} days to "
            f"{high})."
        )
    elif v.baseline is None or v.watch is None:
        parts.append("No limit crossing is forecast until the baseline is set.")
    elif v.status is Status.ALERT or (tr.forecast_alert is not None and tr.forecast_alert.reached):
        parts.append("It is at or past the alert limit: no further limit to forecast.")
    elif not heading:
        word = "rising" if v.limits.direction == Direction.RISE else "falling"
        parts.append(f"No limit crossing is forecast: it is not {word}.")
    else:
        parts.append("The trend line is at or past the watch limit.")
    return " ".join(parts)
