"""Choosing t*, the half-length of the modulation window about one turning point (Farouki & Swett
2022, sections 2 and 5.3).

t* is bounded by geometry (the path excursion about the turning point, max |s(t)| over the
window, must stay within the arc over which the osculating circle is within eps, eq. 6 - passed
in as `allowed_half_arc_m`) and should let the gear take up the backlash before the window ends
(section 5.3: t* >= Delta t), found by simulating the reversing axis through the window on the
osculating circle (agent.models.axis.pid).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from agent.feedrate.profile import (
    Array,
    BernsteinFeedrate,
    FeedrateProfile,
    check_positive,
    symmetric_feedrate,
)
from agent.models.axis.params import AxisParams
from agent.models.axis.pid import simulate_axis
from agent.models.axis.trajectory import AxisCommand


@dataclass(frozen=True)
class WindowPlan:
    """The chosen window about one turning point and the evidence for the choice."""

    profile: BernsteinFeedrate
    policy: str
    geometric_limit_s: float  # largest t* allowed (path excursion within the arc, and the cap)
    take_up_end_s: float | None  # gear engaged again at this instant (t = 0: turning point)
    backlash_inside: bool  # take_up_end_s <= t*

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "half_window_s": self.profile.half_window_s,
            "geometric_limit_s": self.geometric_limit_s,
            "take_up_end_s": self.take_up_end_s,
            "backlash_inside": self.backlash_inside,
            "profile": self.profile.to_dict(),
        }


def osculating_reversal_command(profile: FeedrateProfile, radius_m: float) -> AxisCommand:
    """The reversing axis on the osculating circle, X = rho (cos(s/rho) - 1) (eq. 30), and X'."""

    def command(t: Array) -> tuple[Array, Array]:
        theta = profile.arc_length_m(t) / radius_m
        return radius_m * (np.cos(theta) - 1.0), -np.sin(theta) * profile.speed_m_s(t)

    return command


def take_up_instant_s(
    axis: AxisParams,
    profile: FeedrateProfile,
    radius_m: float,
    *,
    step_s: float = 1e-3,
    lead_s: float = 1.5,
) -> float | None:
    """When (t = 0 at the turning point) the gear has taken up the backlash of this reversal.

    The reversing axis is simulated with the full dead zone (`simulate_axis`, trigger
    "reversal": the gap opens when the axis really reverses, some ms after the command does,
    from wherever the loop has carried it) on the osculating circle, starting `lead_s` before
    the window on the commanded state (the start-up transient decays as e^{-gamma lead_s}).
    Returns the end of the last gap phase that opens before the window ends (retrograde
    profiles reverse the axis several times), None if one is still open a window-length later.
    Assuming instead ideal tracking (gap opening at t = 0 with x_i = X(0)) would misjudge it by
    ~12% at the paper's constant feed (0.133 s against 0.1187 s).
    """
    window = profile.window_end_s - profile.window_start_s
    start = profile.window_start_s - lead_s
    end = profile.window_end_s + window
    run = simulate_axis(
        axis,
        osculating_reversal_command(profile, radius_m),
        start,
        end,
        step_s=step_s,
        trigger="reversal",
    )
    ends = [i.end_s for i in run.intervals if i.start_s <= profile.window_end_s]
    if not ends or any(e is None for e in ends):
        return None
    return float(max(e for e in ends if e is not None))


def plan_window(
    axis: AxisParams,
    *,
    nominal_m_s: float,
    radius_m: float,
    allowed_half_arc_m: float,
    ratio: float = 0.25,
    degree: int = 10,
    policy: Literal["longest", "shortest"] = "longest",
    max_half_window_s: float | None = None,
    allow_retrograde: bool = False,
    step_s: float = 1e-3,
) -> WindowPlan:
    """Choose t* for the paper's profile at one turning point.

    The path excursion about the turning point scales with t* (s(t) = t* sigma(tau)), so the
    geometric limit is allowed_half_arc / max|sigma| (allowed_half_arc is |s| of eq. 6; inf for
    an exact circle, then max_half_window_s must bound it). Within it, "longest" takes the
    largest t* (capped by max_half_window_s: the least backlash error, the most cycle time) and
    "shortest" the least t* whose take-up ends inside the window (bisection to 0.01% of t*;
    assumes the feasible t* form an interval: the take-up time grows slower than t*). When even
    the longest window cannot contain the take-up the plan says so (backlash_inside False).
    """
    check_positive("plan_window.nominal_m_s", nominal_m_s)
    check_positive("plan_window.radius_m", radius_m)
    if not (allowed_half_arc_m > 0):  # inf is fine: a circle is its own osculating circle
        raise ValueError(
            f"plan_window.allowed_half_arc_m: expected > 0, got {allowed_half_arc_m!r}"
        )
    if math.isinf(allowed_half_arc_m) and max_half_window_s is None:
        raise ValueError(
            "plan_window: allowed_half_arc_m is infinite (the path is a circle), "
            "so max_half_window_s must bound the window"
        )
    if policy not in ("longest", "shortest"):
        raise ValueError(f"plan_window.policy: expected 'longest' or 'shortest', got {policy!r}")
    unit = symmetric_feedrate(
        nominal_m_s, 1.0, ratio=ratio, degree=degree, allow_retrograde=allow_retrograde
    )
    limit = allowed_half_arc_m / unit.excursion_m
    if max_half_window_s is not None:
        check_positive("plan_window.max_half_window_s", max_half_window_s)
        limit = min(limit, max_half_window_s)

    def make(ts: float) -> BernsteinFeedrate:
        return BernsteinFeedrate(unit.coefficients_m_s, ts)

    def take_up(ts: float) -> float | None:
        return take_up_instant_s(axis, make(ts), radius_m, step_s=min(step_s, ts / 50.0))

    best = limit
    end_best = take_up(best)
    inside = end_best is not None and end_best <= best
    if policy == "shortest" and inside:
        lo, hi = 0.0, best
        while hi - lo > 1e-4 * hi:
            mid = 0.5 * (lo + hi)
            end_mid = take_up(mid)
            if end_mid is not None and end_mid <= mid:
                hi, end_best = mid, end_mid
            else:
                lo = mid
        best = hi
    return WindowPlan(make(best), policy, limit, end_best, inside)
