"""The identification verdict on a joint: the worst of its indicators' verdicts, and the
indicator whose trend reaches a worse limit soonest. An identification whose analysis failed
after the last valid one makes the joint NE 107 F (as a failed backlash cycle does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.health.display import indicator_info
from agent.health.identification.indicator import IndicatorVerdict
from agent.health.status import Ne107, Status, ne107_of, worst
from agent.health.trend import LimitName


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
            if v.forecast is not None
            and (2 if v.forecast.limit_name == LimitName.ALERT else 1) > level
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
