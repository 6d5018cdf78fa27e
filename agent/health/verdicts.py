"""Health verdicts from thresholds: a value against its watch and alert limits.

A value exactly at a limit takes the worse status. How each indicator is shown to people (label,
display unit) is agent.health.display's, so every page and payload names it the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agent.config.model import ThresholdSettings
from agent.errors import ConfigError
from agent.estimation.backlash.result import BacklashResult
from agent.health.display import INDICATORS, indicator_info
from agent.health.status import Status

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Verdict:
    status: Status
    indicator: str
    value: float | None
    limit: float | None  # the limit the status was judged against (crossed, or next above)
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "indicator": self.indicator,
            "value": self.value,
            "limit": self.limit,
            "reason": self.reason,
        }


def assess(
    value: float | None,
    watch: float | None,
    alert: float | None,
    indicator: str = "value",
) -> Verdict:
    """Status of one value against a watch and an alert limit (either may be missing)."""
    info = indicator_info(indicator)
    if watch is not None and alert is not None and not watch < alert:
        raise ConfigError(
            f"thresholds for {indicator}: the watch limit ({watch}) must be below the alert "
            f"limit ({alert})"
        )
    if value is None or not math.isfinite(value):
        return Verdict(Status.UNKNOWN, indicator, None, None, f"no valid {info.label} value")
    if watch is None and alert is None:
        return Verdict(
            Status.UNKNOWN,
            indicator,
            value,
            None,
            f"{info.label} {info.format(value)}: no limits configured",
        )
    shown = f"{info.label} {info.format(value)}"
    if alert is not None and value >= alert:
        return Verdict(
            Status.ALERT,
            indicator,
            value,
            alert,
            f"{shown} at or above the alert limit {info.format(alert)}",
        )
    if watch is not None and value >= watch:
        return Verdict(
            Status.WATCH,
            indicator,
            value,
            watch,
            f"{shown} at or above the watch limit {info.format(watch)}",
        )
    below = watch if watch is not None else alert
    which = "watch" if watch is not None else "alert"
    return Verdict(
        Status.OK, indicator, value, below, f"{shown} below the {which} limit {info.format(below)}"
    )


def assess_backlash(result: BacklashResult | None, thresholds: ThresholdSettings) -> Verdict:
    """Backlash against the backlash limits when calibrated, else |A| against amplitude limits."""
    if result is None:
        return Verdict(Status.UNKNOWN, "backlash_rad", None, None, "no estimate for this cycle")
    if result.backlash_rad is not None:
        if thresholds.backlash_watch_rad is None and thresholds.backlash_alert_rad is None:
            verdict = Verdict(
                Status.UNKNOWN,
                "backlash_rad",
                result.backlash_rad,
                None,
                f"backlash {INDICATORS['backlash_rad'].format(result.backlash_rad)}: calibrated "
                "but no backlash_watch_rad / backlash_alert_rad configured",
            )
        else:
            verdict = assess(
                result.backlash_rad,
                thresholds.backlash_watch_rad,
                thresholds.backlash_alert_rad,
                "backlash_rad",
            )
    elif thresholds.amplitude_watch_rad_s is None and thresholds.amplitude_alert_rad_s is None:
        why = (
            "backlash limits need a calibration"
            if thresholds.backlash_watch_rad is not None
            or thresholds.backlash_alert_rad is not None
            else "no limits configured"
        )
        amp = INDICATORS["amplitude_rad_s"].format(result.amplitude_rad_s)
        verdict = Verdict(
            Status.UNKNOWN,
            "amplitude_rad_s",
            result.amplitude_rad_s,
            None,
            f"amplitude A {amp}: not calibrated, {why}, and no amplitude_watch_rad_s / "
            "amplitude_alert_rad_s configured",
        )
    else:
        verdict = assess(
            result.amplitude_rad_s,
            thresholds.amplitude_watch_rad_s,
            thresholds.amplitude_alert_rad_s,
            "amplitude_rad_s",
        )
    verdict = _resolution_check(verdict, result, thresholds)
    if not result.converged:
        verdict = Verdict(
            verdict.status,
            verdict.indicator,
            verdict.value,
            verdict.limit,
            f"{verdict.reason} (fit did not converge: {result.stop_reason})",
        )
    return verdict


def _resolution_check(
    verdict: Verdict, result: BacklashResult, thresholds: ThresholdSettings
) -> Verdict:
    """ "Cannot judge" (UNKNOWN, NE 107 C) when the estimate's 95 % interval is wider than the
    step from a new gear (0) to the watch limit: such a capture cannot tell a healthy joint from
    a worn one, and its OK or WATCH would be a coin toss (issue 29: resolution before verdict)."""
    if verdict.status is Status.UNKNOWN or verdict.value is None:
        return verdict
    watch = (
        thresholds.backlash_watch_rad
        if verdict.indicator == "backlash_rad"
        else thresholds.amplitude_watch_rad_s
    )
    interval = result.interval_of(verdict.indicator)
    if watch is None or interval is None:
        return verdict
    half = 0.5 * (interval[1] - interval[0])
    if not half > watch:
        return verdict
    info = INDICATORS[verdict.indicator]
    return Verdict(
        Status.UNKNOWN,
        verdict.indicator,
        verdict.value,
        verdict.limit,
        f"cannot judge: {info.label} {info.format(verdict.value)} +- {info.format(half)} (95 %), "
        f"wider than the step to the watch limit {info.format(watch)}; a longer capture, a "
        "steadier speed or a calibration with less scatter narrows it",
    )
