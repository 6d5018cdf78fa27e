"""Where a cycle takes a joint, and whether that fits the joint's travel limits.

A cycle is refused before motion unless its whole travel fits inside the joint's limits less a
margin: the run-up, the settling and captured part, the stop from full speed, and the return to
the start pose (which stays inside what the outward travel covered). Limits come from the
joint's config, the robot description, or the driver's knowledge of its controller (a UR joint
turns +-2 pi); a joint that turns without end (a turntable, the test bench of Giovannitti et al.
2022) says so explicitly (`continuous_rotation`). A joint with neither is a config error, and a
cycle built without limits is refused here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

# When a driver cannot tell how its controller ramps (OPC UA, CAN and serial controllers run
# their own profiles), the run-up and the stop are each bounded by this long at full speed: a
# linear ramp of up to twice this covers less.
UNKNOWN_RAMP_S = 1.0


@dataclass(frozen=True)
class TravelLimits:
    """One joint's allowed positions and where that figure came from (said in refusals)."""

    min_rad: float
    max_rad: float
    margin_rad: float = 0.05
    source: str = "config"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_rad) and math.isfinite(self.max_rad)):
            raise ValueError("travel limits must be finite (continuous_rotation is said apart)")
        if self.min_rad >= self.max_rad:
            raise ValueError(f"travel limits [{self.min_rad:g}, {self.max_rad:g}]: min >= max")
        if self.margin_rad < 0:
            raise ValueError("travel limit margin must be >= 0")

    @property
    def usable_rad(self) -> tuple[float, float]:
        return self.min_rad + self.margin_rad, self.max_rad - self.margin_rad

    def describe(self) -> str:
        lo, hi = self.usable_rad
        return (
            f"[{lo:.3f}, {hi:.3f}] rad (the {self.source} limits [{self.min_rad:.3f}, "
            f"{self.max_rad:.3f}] less {self.margin_rad:g} rad)"
        )


# A joint that turns without end: no position limit applies.
CONTINUOUS = "continuous"
JointTravel = TravelLimits | str | None  # TravelLimits, CONTINUOUS, or None: not known


class BacklashCycle(Protocol):
    """What the travel of drivers.base.BacklashCycle depends on."""

    @property
    def controller(self) -> str: ...
    @property
    def joint(self) -> str: ...
    @property
    def motor_speed_rad_s(self) -> float: ...
    @property
    def gear_ratio(self) -> float: ...
    @property
    def settle_s(self) -> float: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def test_pose_rad(self) -> float: ...
    @property
    def travel_limits(self) -> JointTravel: ...


class ExcitationCycle(Protocol):
    """What the travel of drivers.base.ExcitationCycle depends on."""

    @property
    def controller(self) -> str: ...
    @property
    def joints(self) -> tuple[str, ...]: ...
    @property
    def period_s(self) -> float: ...
    @property
    def travel_limits(self) -> tuple[JointTravel, ...]: ...
    def trajectory(self) -> Any: ...


@dataclass(frozen=True)
class Ramps:
    """How the controller ramps a joint's speed: None where the driver cannot tell."""

    accel_rad_s2: float | None = None
    decel_rad_s2: float | None = None


def backlash_travel_rad(cycle: BacklashCycle, ramps: Ramps) -> tuple[float, float]:
    """The lowest and highest position the constant-speed cycle reaches."""
    speed = abs(cycle.motor_speed_rad_s / cycle.gear_ratio)
    up = _ramp_rad(speed, ramps.accel_rad_s2)
    down = _ramp_rad(speed, ramps.decel_rad_s2)
    reach = up + speed * (cycle.settle_s + cycle.duration_s) + down
    end = cycle.test_pose_rad + math.copysign(reach, cycle.motor_speed_rad_s)
    return min(cycle.test_pose_rad, end), max(cycle.test_pose_rad, end)


def _ramp_rad(speed_rad_s: float, accel_rad_s2: float | None) -> float:
    if accel_rad_s2 is None or accel_rad_s2 <= 0:
        return speed_rad_s * UNKNOWN_RAMP_S
    return speed_rad_s * speed_rad_s / (2.0 * accel_rad_s2)


def check_backlash_travel(cycle: BacklashCycle, ramps: Ramps) -> str | None:
    """Why the cycle may not run (a sentence), or None when its travel fits."""
    where = f"{cycle.controller}/{cycle.joint}"
    limits = cycle.travel_limits
    if limits == CONTINUOUS:
        return None
    if not isinstance(limits, TravelLimits):
        return (
            f"{where}: the joint has no travel limits (set position_min_rad and "
            "position_max_rad, a robot description, or continuous_rotation): not moving it"
        )
    lo, hi = backlash_travel_rad(cycle, ramps)
    return _outside(where, "the cycle", lo, hi, limits, _what_backlash(cycle))


def _what_backlash(cycle: BacklashCycle) -> str:
    return (
        f"run-up, {cycle.settle_s:g} s settling, {cycle.duration_s:.2f} s captured, the stop, "
        "then back"
    )


def check_excitation_travel(cycle: ExcitationCycle, ramps: Ramps) -> str | None:
    """Why the excitation may not run (a sentence per joint), or None when it fits: the
    trajectory's extremes, widened by the stop from each joint's top speed."""
    import numpy as np

    traj = cycle.trajectory()
    t = np.linspace(0.0, cycle.period_s, max(int(cycle.period_s * 1000), 200))
    q, qd = traj.evaluate(t)[:2]
    problems = []
    for j, name in enumerate(cycle.joints):
        limits = cycle.travel_limits[j] if j < len(cycle.travel_limits) else None
        where = f"{cycle.controller}/{name}"
        if limits == CONTINUOUS:
            continue
        if not isinstance(limits, TravelLimits):
            problems.append(f"{where}: the joint has no travel limits: not moving it")
            continue
        stop = _ramp_rad(float(np.abs(qd[:, j]).max()), ramps.decel_rad_s2)
        lo, hi = float(q[:, j].min()) - stop, float(q[:, j].max()) + stop
        why = _outside(where, "the excitation", lo, hi, limits, "the trajectory and a stop")
        if why:
            problems.append(why)
    return "; ".join(problems) or None


def _outside(
    where: str, what: str, lo: float, hi: float, limits: TravelLimits, parts: str
) -> str | None:
    usable_lo, usable_hi = limits.usable_rad
    if usable_lo <= lo and hi <= usable_hi:
        return None
    return (
        f"{where}: {what} travels over [{lo:.3f}, {hi:.3f}] rad ({parts}), outside "
        f"{limits.describe()}: refused before motion"
    )
