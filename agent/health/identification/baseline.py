"""What an identification indicator is judged against: the joint's own baseline and limits
relative to it.

The baseline is the median of the joint's first identifications, or a commissioning value
(agent.config.identification_limits). Friction and NMSE wear upwards, stiffness downwards, so
each indicator's limits say which way it goes and whether they are a fraction of change or a
ratio.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from statistics import median
from typing import Any

from agent.config.identification_limits import (
    LIMIT_FIELDS,
    IdentificationLimitSettings,
    JointBaselineSettings,
)
from agent.health.status import TrendPoint

# The indicators judged here (agent.kinds.identification.analysis.INDICATORS; stiffness also
# from `jha stiffness estimate --record`). Rotor inertia is a model parameter, not a wear sign.
IDENTIFICATION_INDICATORS = (
    "coulomb_friction_nm",
    "viscous_friction_nm_s_rad",
    "stiffness_nm_rad",
    "torque_nmse_nm",
)
DEFAULT_LIMITS = IdentificationLimitSettings()


class Direction(StrEnum):
    """The way an indicator moves as the joint wears."""

    RISE = "rise"
    DROP = "drop"


class LimitKind(StrEnum):
    """How a relative limit is given: a fraction of change (+30 %) or a ratio (2x)."""

    FRACTION = "fraction"
    RATIO = "ratio"


class BaselineSource(StrEnum):
    COMMISSIONING = "commissioning"  # a value from the config
    MEDIAN = "median"  # the median of the joint's first identifications


@dataclass(frozen=True)
class RelativeLimits:
    """Watch and alert of one indicator, relative to the baseline: a fraction of rise or drop,
    or a ratio."""

    indicator: str
    direction: Direction
    kind: LimitKind
    watch: float
    alert: float

    def absolute(self, baseline: float) -> tuple[float, float]:
        """(watch, alert) in SI for this baseline."""
        if self.kind == LimitKind.RATIO:
            return baseline * self.watch, baseline * self.alert
        sign = 1.0 if self.direction == Direction.RISE else -1.0
        return baseline * (1.0 + sign * self.watch), baseline * (1.0 + sign * self.alert)

    def text(self, relative: float) -> str:
        """A relative limit as people read it: '+30 %', '-15 %', '2x'."""
        if self.kind == LimitKind.RATIO:
            return f"{relative:.3g}x"
        return f"{'+' if self.direction == Direction.RISE else '-'}{100 * relative:.3g} %"

    def crossed(self, value: float, limit: float) -> bool:
        """At or past a limit (a value exactly at it takes the worse status, as in health)."""
        return value >= limit if self.direction == Direction.RISE else value <= limit

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
    rise, drop, fraction = Direction.RISE, Direction.DROP, LimitKind.FRACTION
    return {
        "coulomb_friction_nm": RelativeLimits("coulomb_friction_nm", rise, fraction,
                                              s.coulomb_rise_watch, s.coulomb_rise_alert),
        "viscous_friction_nm_s_rad": RelativeLimits("viscous_friction_nm_s_rad", rise, fraction,
                                                    s.viscous_rise_watch, s.viscous_rise_alert),
        "stiffness_nm_rad": RelativeLimits("stiffness_nm_rad", drop, fraction,
                                           s.stiffness_drop_watch, s.stiffness_drop_alert),
        "torque_nmse_nm": RelativeLimits("torque_nmse_nm", rise, LimitKind.RATIO,
                                         s.nmse_ratio_watch, s.nmse_ratio_alert),
    }  # fmt: skip


@dataclass(frozen=True)
class Baseline:
    value: float  # SI
    source: BaselineSource
    n_points: int  # identifications the median was taken of (0: commissioning value)
    rel_noise: float  # relative standard deviation of the baseline value itself
    point_noise: float  # relative standard deviation of one identification

    def describe(self) -> str:
        if self.source == BaselineSource.COMMISSIONING:
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
        point_noise = median(wls) if wls else 0.0
        return Baseline(float(commissioning), BaselineSource.COMMISSIONING, 0, 0.0, point_noise)
    if len(first) < n:
        return None
    values = [p.value for p, _ in first]
    value = float(median(values))
    if not value > 0.0:
        # Judged as unusable: no relative limit applies to a baseline that is not positive.
        return Baseline(value, BaselineSource.MEDIAN, n, math.inf, math.inf)
    scatter = 0.0
    if n >= 2:
        mean = sum(values) / n
        scatter = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) / value
    point = max(median(wls) if wls else 0.0, scatter)
    factor = math.sqrt(math.pi / 2.0) if n >= 3 else 1.0
    return Baseline(value, BaselineSource.MEDIAN, n, point * factor / math.sqrt(n), point)


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
