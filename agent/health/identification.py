"""Verdicts on the identification indicators: friction, stiffness, torque-prediction NMSE (issue 4).

Each indicator of a joint is judged against the joint's own baseline (agent.config.identification_limits:
the median of its first identifications, or a commissioning value) with limits relative to it,
and mapped to NE 107 like backlash (agent.health.verdicts: Status, ne107_of, the Theil-Sen trend and its
forecast to the limits). Friction and NMSE wear upwards, stiffness downwards: a falling
indicator is trended as its negative, so the same forecast machinery gives the days until it
falls to its limit.

A change within the noise is not a warning: the relative standard deviation the WLS gave the
estimate, and the scatter of the baseline identifications, make the standard deviation of the
change; a limit crossed by less than `noise_sigmas` of those leaves the indicator OK, and says so.
The joint's identification status is the worst of its indicators; an identification whose
analysis failed after the last valid one makes it NE 107 F (as a failed backlash cycle does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import median
from typing import Any, Literal

from agent.config.identification_limits import (
    LIMIT_FIELDS,
    IdentificationLimitSettings,
    JointBaselineSettings,
)
from agent.health.status import Ne107, Status, TrendPoint, ne107_of, worst
from agent.health.trend import (
    Forecast,
    Trend,
    next_forecast,
    passed_limit,
    recent_break_sentence,
    trend,
)
from agent.health.verdicts import indicator_info
from drivers.base import CycleKind

# The indicators judged here (agent.kinds.identification.analysis.INDICATORS; stiffness also from
# `jha stiffness estimate --record`). Rotor inertia is a model parameter, not a wear sign.
IDENTIFICATION_INDICATORS = (
    "coulomb_friction_nm",
    "viscous_friction_nm_s_rad",
    "stiffness_nm_rad",
    "torque_nmse_nm",
)
IDENTIFICATION_KIND = CycleKind.IDENTIFICATION
DEFAULT_LIMITS = IdentificationLimitSettings()


@dataclass(frozen=True)
class RelativeLimits:
    """Watch and alert of one indicator, relative to the baseline: a fraction of rise or drop,
    or a ratio."""

    indicator: str
    direction: Literal["rise", "drop"]
    kind: Literal["fraction", "ratio"]
    watch: float
    alert: float

    def absolute(self, baseline: float) -> tuple[float, float]:
        """(watch, alert) in SI for this baseline."""
        if self.kind == "ratio":
            return baseline * self.watch, baseline * self.alert
        sign = 1.0 if self.direction == "rise" else -1.0
        return baseline * (1.0 + sign * self.watch), baseline * (1.0 + sign * self.alert)

    def text(self, relative: float) -> str:
        """A relative limit as people read it: '+30 %', '-15 %', '2x'."""
        if self.kind == "ratio":
            return f"{relative:.3g}x"
        return f"{'+' if self.direction == 'rise' else '-'}{100 * relative:.3g} %"

    def crossed(self, value: float, limit: float) -> bool:
        """At or past a limit (a value exactly at it takes the worse status, as in health)."""
        return value >= limit if self.direction == "rise" else value <= limit

    def to_dict(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "kind": self.kind,
            "watch": self.watch,
            "alert": self.alert,
        }


def relative_limits(
    settings: IdentificationLimitSettings | None = None,
) -> dict[str, RelativeLimits]:
    s = settings or DEFAULT_LIMITS
    return {
        "coulomb_friction_nm": RelativeLimits("coulomb_friction_nm", "rise", "fraction",
                                              s.coulomb_rise_watch, s.coulomb_rise_alert),
        "viscous_friction_nm_s_rad": RelativeLimits("viscous_friction_nm_s_rad", "rise",
                                                    "fraction", s.viscous_rise_watch,
                                                    s.viscous_rise_alert),
        "stiffness_nm_rad": RelativeLimits("stiffness_nm_rad", "drop", "fraction",
                                           s.stiffness_drop_watch, s.stiffness_drop_alert),
        "torque_nmse_nm": RelativeLimits("torque_nmse_nm", "rise", "ratio", s.nmse_ratio_watch,
                                         s.nmse_ratio_alert),
    }  # fmt: skip


@dataclass(frozen=True)
class Baseline:
    value: float  # SI
    source: Literal["commissioning", "median"]
    n_points: int  # identifications the median was taken of (0: commissioning value)
    rel_noise: float  # relative standard deviation of the baseline value itself
    point_noise: float  # relative standard deviation of one identification

    def describe(self) -> str:
        if self.source == "commissioning":
            return "commissioning value"
        return f"median of the first {self.n_points} identifications"

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "source": self.source,
            "n_points": self.n_points,
            "rel_noise": self.rel_noise,
            "point_noise": self.point_noise,
        }


def baseline_of(
    points: Sequence[tuple[TrendPoint, float | None]], n: int, commissioning: float | None = None
) -> Baseline | None:
    """The baseline from the first `n` finite points (None: fewer yet), or the commissioning
    value. Its noise: the larger of the WLS relative standard deviations and the points'
    scatter; the median of n points scatters sqrt(pi/2)/sqrt(n) times one point (n >= 3)."""
    finite = [(p, r) for p, r in points if math.isfinite(p.value)]
    first = finite[:n]
    wls = [r / 100.0 for _, r in first if r is not None]
    if commissioning is not None:
        return Baseline(float(commissioning), "commissioning", 0, 0.0, median(wls) if wls else 0.0)
    if len(first) < n:
        return None
    values = [p.value for p, _ in first]
    value = float(median(values))
    if not value > 0.0:
        return Baseline(value, "median", n, math.inf, math.inf)  # judged as unusable
    scatter = 0.0
    if n >= 2:
        mean = sum(values) / n
        scatter = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) / value
    point = max(median(wls) if wls else 0.0, scatter)
    factor = math.sqrt(math.pi / 2.0) if n >= 3 else 1.0
    return Baseline(value, "median", n, point * factor / math.sqrt(n), point)


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
    moved = f"x{ratio:.3g}" if lim.kind == "ratio" else f"{100 * change:+.3g} %"
    shown += (
        f", {moved} on its baseline {info.format(base.value)} ({base.describe()}; "
        f"1 sd {100 * sigma:.2g} %)"
    )
    status, limit_name, limit_rel, limit_abs = Status.OK, "watch", lim.watch, watch
    if lim.crossed(last.value, alert):
        status, limit_name, limit_rel, limit_abs = Status.ALERT, "alert", lim.alert, alert
    elif lim.crossed(last.value, watch):
        status = Status.WATCH
    past = "at or above" if lim.direction == "rise" else "at or below"
    limit_text = f"{limit_name} limit {lim.text(limit_rel)} ({info.format(limit_abs)})"
    if status is Status.OK:
        ahead = "below" if lim.direction == "rise" else "above"
        reason = f"{shown}: {ahead} the {limit_text}"
    elif not significant:
        reason = (
            f"{shown}: {past} the {limit_text}, but within the noise "
            f"({s.noise_sigmas:g} sd = {100 * s.noise_sigmas * sigma:.2g} %): no warning"
        )
        status = Status.OK
    else:
        reason = f"{shown}: {past} the {limit_text}"
    return made(
        status,
        reason,
        watch=watch,
        alert=alert,
        change=change,
        sigma=sigma,
        significant=significant,
        trend=_trend(history, watch, alert, indicator, lim.direction),
    )


def _trend(
    points: Sequence[TrendPoint],
    watch: float,
    alert: float,
    indicator: str,
    direction: Literal["rise", "drop"],
) -> Trend | None:
    """health.trend, for a falling indicator through its negative (the forecast machinery
    looks for a rise to the limit), turned back so that every number is in the value's sense."""
    if direction == "rise":
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
    """For people, in the words of health.forecast_sentence: how the indicator goes and when
    it reaches its next limit."""
    tr = v.trend
    if tr is None:
        return (
            f"{v.n_points} identification(s) in the history: a trend needs at least 3 at "
            "different times."
        )
    info = indicator_info(v.indicator)
    rate = f"{tr.slope_per_day * info.scale:+.3g} {info.display_unit}/day".replace(" /", "/")
    parts = [f"{tr.over_text('identifications')} {info.label} changes by {rate}."]
    if tr.basis == "recent_break":
        parts.append(recent_break_sentence(tr))
    fc = v.forecast
    heading = tr.slope_per_day > 0 if v.limits.direction == "rise" else tr.slope_per_day < 0
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
        word = "rising" if v.limits.direction == "rise" else "falling"
        parts.append(f"No limit crossing is forecast: it is not {word}.")
    else:
        parts.append("The trend line is at or past the watch limit.")
    return " ".join(parts)


# -- a joint ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JointIdentificationVerdict:
    """The identification status of one joint: the worst of its indicators."""

    status: Status
    ne107: Ne107
    reason: str
    indicators: tuple[IndicatorVerdict, ...]

    @property
    def worst(self) -> IndicatorVerdict:
        return max(self.indicators, key=lambda v: v.status.severity)

    @property
    def forecast(self) -> IndicatorVerdict | None:
        """The indicator whose trend crosses a limit worse than the joint's status soonest
        (while OK: any limit; at WATCH: an alert limit; at ALERT: none): when it gets worse."""
        level = {Status.WATCH: 1, Status.ALERT: 2}.get(self.status, 0)
        ahead = [
            v
            for v in self.indicators
            if v.forecast is not None and (2 if v.forecast.limit_name == "alert" else 1) > level
        ]
        return min(ahead, key=lambda v: v.forecast.days if v.forecast else math.inf, default=None)

    @property
    def forecast_text(self) -> str:
        soon = self.forecast
        if soon is not None:
            return f"{indicator_info(soon.indicator).label}: {soon.forecast_text}"
        if self.status is Status.ALERT:
            return "At or past an alert limit: no further limit to forecast."
        return self.worst.forecast_text

    def to_dict(self) -> dict[str, Any]:
        soon = self.forecast
        fc = None if soon is None else soon.forecast
        return {
            "status": self.status.value,
            "ne107": {"status": self.ne107.value, "letter": self.ne107.letter},
            "reason": self.reason,
            "indicator": self.worst.indicator,
            "forecast": None
            if fc is None or soon is None
            else {"indicator": soon.indicator, **fc.to_dict()},
            "forecast_text": self.forecast_text,
            "indicators": [v.to_dict() for v in self.indicators],
        }


def joint_verdict(verdicts: Sequence[IndicatorVerdict]) -> JointIdentificationVerdict | None:
    """The worst of a joint's indicator verdicts (None without any)."""
    if not verdicts:
        return None
    status = worst([v.status for v in verdicts])
    failed = next((v.failure for v in verdicts if v.failure is not None), None)
    ne107 = ne107_of(status, failed=failed is not None)
    bad = max(verdicts, key=lambda v: v.status.severity)
    if failed is not None:
        reason = f"identification failed: {failed}"
    elif status is Status.OK:
        reason = "every identification indicator within its limits"
    else:
        reason = bad.reason
    return JointIdentificationVerdict(status, ne107, reason, tuple(verdicts))


def _rel_std(detail: Mapping[str, Any]) -> float | None:
    rel = detail.get("rel_std_pct")
    if isinstance(rel, int | float) and not isinstance(rel, bool) and math.isfinite(rel):
        return abs(float(rel))
    return None


def limits_from_detail(recorded: object, joint: str) -> IdentificationLimitSettings | None:
    """The limits a history entry recorded (limits_detail); None when it has none or they do not
    make sense (a damaged entry falls back to the defaults rather than to nonsense)."""
    if not isinstance(recorded, Mapping):
        return None
    try:
        values = {name: recorded[name] for name in LIMIT_FIELDS if name in recorded}
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()):
            return None
        values["baseline_identifications"] = int(values.get("baseline_identifications", 3))
        given = recorded.get("baseline") or {}
        baseline = {}
        if isinstance(given, Mapping) and given:
            baseline = {
                joint: JointBaselineSettings(
                    **{k: float(v) for k, v in given.items() if k in IDENTIFICATION_INDICATORS}
                )
            }
        settings = IdentificationLimitSettings(**values, baseline=baseline)
    except (TypeError, ValueError):
        return None
    if settings.check() or settings.baseline_identifications < 1:
        return None
    return settings


def verdict_counts(verdicts: Mapping[str, JointIdentificationVerdict]) -> dict[str, Any]:
    """The report summary's identification part: worst status and counts over joints."""
    counts = {st.value: 0 for st in Status}
    signals = {n.value: 0 for n in Ne107}
    for v in verdicts.values():
        counts[v.status.value] += 1
        signals[v.ne107.value] += 1
    return {
        "worst_status": worst([v.status for v in verdicts.values()]).value,
        "counts": counts,
        "ne107_counts": signals,
    }
