"""Figure 11 of Farouki & Swett 2022 (section 6): the radial error about a turning point against
the feedrate modulation, and the turning-point runs behind it.

figure11_sweep(): fractional radial error of the executed path about a vertical turning point
for a range of V(1/2)/V_c, simulated as section 5.3 describes. Setup derived from the text:
  * both axes carry the section 4.2 parameters (b, c, N, eta, r, tau, dtheta_m; section 5.3
    "the x and y axes are assumed to be characterized by the same values");
  * the osculating circle is the section 4.2 circle: rho_0 = a = 0.25 m, Omega = pi / 6 rad/s,
    V_c = rho_0 Omega = 0.1309 m/s (section 6 "the model parameters employed in Section 4.2
    ... V_c = rho_0 Omega");
  * n = 10, t* = 0.5 s, all coefficients V_c except V_5 = f V_c, f = (256 r - 193) / 63;
    lead-in / lead-out at V_c over Theta* = pi/2 of the circle on each side (eq. 23 coordinates,
    turning point at the origin, centre at (-rho_0, 0), theta increasing);
  * the axes start on the commanded point with the commanded velocity (section 5.3's initial
    conditions; its x(-T*) = rho_0 (1 - cos Theta*) contradicts eq. 23 and is read as
    rho_0 (cos Theta* - 1)). The start is moved back by < 1 step so that t = 0 is a sample;
  * model="paper" (default): the single x-axis backlash interval of section 5.3 - it starts at
    t = 0, the axis holds x(0), the motor starts from rest (eq. 32) and the interval ends at
    |theta_m| = dtheta_m; the axis then restarts at rest (eq. 14). The y axis has no backlash
    (its reversals are at the ends, theta = +-pi/2), and no other reversal is modelled, not even
    those of the retrograde cases. model="dead_zone" instead applies the full dead zone of
    section 3.4 to both axes at every motor reversal (our extension; it changes the retrograde
    side of the curve, see below);
  * P control, integration step 1 ms (the paper's delta t; each step here is exact for a
    command cubic across it, see agent.models.axis.pid);
  * error e = (r - rho_0) / rho_0, r the distance from the circle centre, over the samples with
    t in [-t*, t*]: the maximum of |e| and the root mean square (uniform samples).

Measured (model "paper", 0.01 grid): the shape of figure 11 - the error grows steadily above
ratio 1 (max |e| 2.17e-3 at 1, 3.06e-3 at 1.5), has a shallow minimum without retrograde motion
at 0.31 (max, 1.34e-3) / 0.27 (RMS, 3.84e-4), and its deepest minimum with retrograde motion at
-0.40 (max 2.03e-4, RMS 1.12e-4; the paper reads "about -0.45"). Halving the step changes no
digit shown.

Why -0.40 and not -0.45 (checked, not a grid or step effect): the deep minimum is a kink where
two errors cross. Up to it the largest error comes during the gap, at t ~ 0.14 s: the x axis is
held at x(0) while the command dips back over the turning point, and the dip shrinks as the
ratio rises. Past it the largest error comes after re-engagement (t ~ 0.33 s): the gap now ends
well after the command has come back through the turning point, and the axis must catch up.
Where the two cross is set by the timing of the retrograde dip, i.e. by t*: t* = 0.45 s puts
the kink at -0.44 (max) / -0.45 (RMS) but moves the shallow minimum to 0.35 / 0.33 (the paper:
~0.25); t* = 0.5 s, as printed, gives -0.40 and 0.31 / 0.27. The gap itself matters little
(dtheta_m x0.8 .. x1.1: -0.38 .. -0.41). Readings the text leaves open do not bring -0.45
either: the literal post-gap command of section 5.3 (Theta = theta* + V_c (t - t*) / rho_0
from the end of the gap) leaves the kink at -0.40; re-engagement with the motor's momentum
(engagement="inelastic") at -0.38; starting the gap at the first passage of the turning point
rather than at t = 0 at -0.28. So we keep the paper's stated setup and report -0.40.

With model "dead_zone" the non-retrograde half agrees within 3%, but the retrograde half does
not: every pass of the command back and forth over the turning point is
a reversal of the x axis, the gear spends most of the window in the gap, and at -0.45 the
error (max 2.75e-3) exceeds that of the constant feed. The paper's retrograde gain rests on its
single-gap simplification; keep retrograde modulation off until a machine confirms it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from agent.feedrate.example import (
    PAPER_AMPLITUDE_M,
    PAPER_AXIS,
    PAPER_DEGREE,
    PAPER_HALF_WINDOW_S,
    PAPER_LEAD_ANGLE_RAD,
    PAPER_RATIO_RANGE,
    PAPER_REVERSAL_INTERVAL_S,
    PAPER_STEP_S,
)
from agent.feedrate.profile import FeedrateProfile, middle_factor, symmetric_feedrate
from agent.models.axis.params import AxisParams
from agent.models.axis.pid import simulate_axis
from agent.models.axis.trajectory import AxisTrajectory

Array = npt.NDArray[np.float64]


# ------------------------------------------------------------------------ turning-point runs


@dataclass(frozen=True)
class CircleCommand:
    """Motion along the osculating circle (eqs. 23, 29-30) with a modulated feed about theta = 0.

    Outside the profile's window the feed is V_c, so the lead-in/out of section 5.2 is the same
    function continued; start_s/end_s bound the +-Theta* arc.
    """

    profile: FeedrateProfile
    radius_m: float
    lead_angle_rad: float

    @property
    def start_s(self) -> float:
        arc = self.radius_m * self.lead_angle_rad
        return self.profile.window_start_s - (arc + self.profile.arc_start_m) / (
            self.profile.nominal_m_s
        )

    @property
    def end_s(self) -> float:
        arc = self.radius_m * self.lead_angle_rad
        return self.profile.window_end_s + (arc - self.profile.arc_end_m) / (
            self.profile.nominal_m_s
        )

    def theta(self, t: Array) -> Array:
        return np.asarray(self.profile.arc_length_m(t)) / self.radius_m

    def x(self, t: Array) -> tuple[Array, Array]:
        th = self.theta(t)
        return self.radius_m * (np.cos(th) - 1.0), -np.sin(th) * self.profile.speed_m_s(t)

    def y(self, t: Array) -> tuple[Array, Array]:
        th = self.theta(t)
        return self.radius_m * np.sin(th), np.cos(th) * self.profile.speed_m_s(t)


@dataclass(frozen=True, eq=False)
class TurningPointRun:
    """Executed motion of both axes about the turning point, and its radial error."""

    command: CircleCommand
    model: str
    x: AxisTrajectory = field(repr=False)
    y: AxisTrajectory = field(repr=False)
    time_s: Array = field(repr=False)  # uniform samples in the window
    radial_error: Array = field(repr=False)  # e = (r - rho_0) / rho_0 at time_s

    @property
    def max_radial_error(self) -> float:
        return float(np.max(np.abs(self.radial_error)))

    @property
    def rms_radial_error(self) -> float:
        return float(np.sqrt(np.mean(self.radial_error**2)))

    @property
    def x_backlash_s(self) -> float | None:
        """Duration of the first x-axis backlash interval in the run (None: none or still open)."""
        return self.x.intervals[0].duration_s if self.x.intervals else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "radius_m": self.command.radius_m,
            "lead_angle_rad": self.command.lead_angle_rad,
            "profile": self.command.profile.to_dict(),
            "max_radial_error": self.max_radial_error,
            "rms_radial_error": self.rms_radial_error,
            "max_radial_error_m": self.max_radial_error * self.command.radius_m,
            "x_intervals": [i.to_dict() for i in self.x.intervals],
            "y_intervals": [i.to_dict() for i in self.y.intervals],
        }


def simulate_turning_point(
    profile: FeedrateProfile,
    *,
    radius_m: float,
    lead_angle_rad: float = PAPER_LEAD_ANGLE_RAD,
    x_axis: AxisParams = PAPER_AXIS,
    y_axis: AxisParams | None = None,
    model: Literal["paper", "dead_zone"] = "paper",
    step_s: float = PAPER_STEP_S,
    engagement: Literal["paper", "inelastic"] = "paper",
) -> TurningPointRun:
    """Run both axes along the circle through the vertical turning point (section 5.3).

    The x-axis reversal of model "paper" is scheduled at t = 0, where the symmetric profiles
    pass theta = 0. Errors are taken over the profile's window on the uniform grid.
    """
    if model not in ("paper", "dead_zone"):
        raise ValueError(
            f"simulate_turning_point.model: expected 'paper' or 'dead_zone', got {model!r}"
        )
    cmd = CircleCommand(profile, radius_m, lead_angle_rad)
    # Align the grid so that t = 0 (the scheduled reversal) is a sample.
    start = -math.ceil(-cmd.start_s / step_s - 1e-9) * step_s
    end = math.ceil(cmd.end_s / step_s - 1e-9) * step_s
    y_params = x_axis if y_axis is None else y_axis
    if model == "paper":
        xt = simulate_axis(
            x_axis,
            cmd.x,
            start,
            end,
            step_s=step_s,
            trigger="scheduled",
            scheduled_s=(0.0,),
            engagement=engagement,
        )
        yt = simulate_axis(y_params, cmd.y, start, end, step_s=step_s, trigger="none")
    else:
        xt = simulate_axis(
            x_axis, cmd.x, start, end, step_s=step_s, trigger="reversal", engagement=engagement
        )
        yt = simulate_axis(
            y_params, cmd.y, start, end, step_s=step_s, trigger="reversal", engagement=engagement
        )
    k0 = math.ceil((profile.window_start_s - start) / xt.step_s - 1e-9)
    k1 = math.floor((profile.window_end_s - start) / xt.step_s + 1e-9)
    t = start + xt.step_s * np.arange(k0, k1 + 1, dtype=float)
    xs, ys = xt.position_at(t), yt.position_at(t)
    err = (np.hypot(xs + radius_m, ys) - radius_m) / radius_m
    return TurningPointRun(cmd, model, xt, yt, t, err)


# ------------------------------------------------------------------------ figure 11


@dataclass(frozen=True)
class Figure11Row:
    ratio: float  # V(1/2) / V_c
    middle_factor: float  # f
    max_radial_error: float  # max |e| over [-t*, t*], e = (r - rho_0) / rho_0
    rms_radial_error: float
    max_radial_error_m: float
    x_backlash_s: float | None
    retrograde: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Figure11Sweep:
    """Rows of the sweep in ratio order, with the setup that produced them."""

    rows: tuple[Figure11Row, ...]
    model: str
    degree: int
    half_window_s: float
    lead_angle_rad: float
    radius_m: float
    nominal_m_s: float
    step_s: float

    def _best(self, lo: float, hi: float, key: str) -> Figure11Row:
        rows = [r for r in self.rows if lo <= r.ratio <= hi]
        if not rows:
            raise ValueError(f"no sweep ratio in [{lo}, {hi}]")
        return min(rows, key=lambda r: float(getattr(r, key)))

    def minimum(self, lo: float, hi: float, key: str = "max_radial_error") -> Figure11Row:
        """The row with the least error (max or rms) among ratios in [lo, hi]."""
        return self._best(lo, hi, key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "degree": self.degree,
            "half_window_s": self.half_window_s,
            "lead_angle_rad": self.lead_angle_rad,
            "radius_m": self.radius_m,
            "nominal_m_s": self.nominal_m_s,
            "step_s": self.step_s,
            "rows": [r.to_dict() for r in self.rows],
        }


def figure11_ratios(
    points: int = 26, lo: float = PAPER_RATIO_RANGE[0], hi: float = PAPER_RATIO_RANGE[1]
) -> tuple[float, ...]:
    """Evenly spaced V(1/2)/V_c from lo to hi (26 points: steps of 0.1 over the paper's range)."""
    if points < 2:
        raise ValueError(f"figure11_ratios: need >= 2 points, got {points}")
    return tuple(float(r) for r in np.round(np.linspace(lo, hi, points), 12))


def figure11_sweep(
    ratios: Sequence[float] | None = None,
    *,
    points: int = 26,
    model: Literal["paper", "dead_zone"] = "paper",
    step_s: float = PAPER_STEP_S,
    half_window_s: float = PAPER_HALF_WINDOW_S,
) -> Figure11Sweep:
    """Max and RMS radial error against V(1/2)/V_c (figure 11); setup in the module docstring.
    `half_window_s` is t* (the paper's 0.5 s; other values show how the minima move with it).

    `ratios` defaults to `figure11_ratios(points)`; each ratio takes ~0.03 s on one core here
    (points=251, the 0.01 grid, ~8 s).
    """
    grid = tuple(ratios) if ratios is not None else figure11_ratios(points)
    omega = math.pi / PAPER_REVERSAL_INTERVAL_S
    radius = PAPER_AMPLITUDE_M
    vc = radius * omega
    rows = []
    for ratio in sorted(grid):
        prof = symmetric_feedrate(
            vc, half_window_s, ratio=ratio, degree=PAPER_DEGREE, allow_retrograde=True
        )
        run = simulate_turning_point(prof, radius_m=radius, model=model, step_s=step_s)
        rows.append(
            Figure11Row(
                ratio=float(ratio),
                middle_factor=middle_factor(ratio, PAPER_DEGREE),
                max_radial_error=run.max_radial_error,
                rms_radial_error=run.rms_radial_error,
                max_radial_error_m=run.max_radial_error * radius,
                x_backlash_s=run.x_backlash_s,
                retrograde=ratio < 0,
            )
        )
    return Figure11Sweep(
        tuple(rows), model, PAPER_DEGREE, half_window_s, PAPER_LEAD_ANGLE_RAD, radius, vc, step_s
    )
