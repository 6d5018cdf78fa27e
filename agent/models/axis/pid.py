"""Backlash axis under P, PI or PID control, integrated numerically (paper 001, eqs. 7, 16, 32).

A hybrid system with two modes, each linear and time-invariant:

ENGAGED (eq. 8, or eq. 7 for PI/PID written as a state space): with e = X - x and the integral
z = int e dt, b x'' + c x' = e + z / T_i + T_d e'  (state x, x', z).
GAP (section 3.4, eq. 16 generalised to the same control law; eq. 32 for the P controller): the
axis holds x_i, the motor alone turns, omega_m' = C (e + z / T_i + T_d X') - beta omega_m,
theta' = omega_m  (state z, omega_m, theta; e = X - x_i).

Inside a mode each step is propagated exactly by the mode's matrix exponential (closed form in
its eigenbasis), with the command taken across the step as the cubic Hermite through its
position and velocity at both ends: the discretisation error is that of the interpolation,
~h^4 X'''' / 384 (below 1e-15 m at h = 1 ms on the paper's circle; a first-order hold would
leave 1e-8 m there, which the motor gain C ~ 1e5 turns into microseconds of gap time). Steps
are solved for all samples at once in the modal basis (one first-order recursion per
eigenvalue, scipy.signal.lfilter), or in a plain loop when the mode matrix is defective (the PI
gap mode has a double eigenvalue at 0). Mode switches are located to round-off: a cubic Hermite
root between samples, then Newton steps with exact propagation to the candidate instant.

Switching rules (`trigger`):
  "reversal"  the dead zone of sections 3.3-3.4: a gap phase starts whenever the motor speed
              (N x'/r while engaged) changes sign; it ends when the motor has turned through
              dtheta_m in the new direction (new flank, eq. 15), or turned back to where it
              started (old flank: the command reversed again before the gap was crossed; the
              paper does not treat this case).
  "scheduled" section 5.3: gap phases start only at the given instants (the paper uses the
              commanded turning point t = 0), with omega_m = theta_m = 0, and end when
              |theta_m| = dtheta_m; no other reversal is modelled (an instant that falls
              inside a gap phase is dropped).
  "none"      no backlash (eq. 8 / eq. 7 throughout).
On re-engagement the axis restarts at rest (eq. 14, engagement="paper") or, as an option, with
the velocity of a perfectly inelastic impact of the motor inertia eta J on the axis at rest
(engagement="inelastic": x' = eta r omega_m / N).

The modes' exact propagation is agent.models.axis.modes'; this module switches between them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from agent.models.axis.modes import (
    continuous_matrices,
    hermite_terms,
    mode,
    step_matrices,
    uniform_steps,
)
from agent.models.axis.params import AxisParams

Array = npt.NDArray[np.float64]
Trigger = Literal["reversal", "scheduled", "none"]
Engagement = Literal["paper", "inelastic"]

_SNAP = 1e-9  # fraction of a step below which two instants are the same sample
_MAX_SWITCHES = 100_000


class AxisCommand(Protocol):
    """Commanded axis motion: position (m) and velocity (m/s) at the given instants (vectorised)."""

    def __call__(self, t: Array, /) -> tuple[Array, Array]: ...


@dataclass(frozen=True)
class BacklashInterval:
    """One gap phase: the axis held at position_m from start_s to end_s (None: still open)."""

    start_s: float
    end_s: float | None
    position_m: float
    direction: int  # sense of the motor rotation through the gap, +1 or -1 (0: none yet)
    outcome: str  # "new_flank" | "old_flank" | "open"

    @property
    def duration_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "duration_s": self.duration_s}


@dataclass(frozen=True, eq=False)
class AxisTrajectory:
    """Samples of one simulated axis: the uniform grid start + k*step plus every switch instant.

    At a switch the sample appears twice (before and after), so velocity jumps are visible.
    """

    params: AxisParams
    step_s: float
    trigger: str
    engagement: str
    intervals: tuple[BacklashInterval, ...]
    time_s: Array = field(repr=False)
    position_m: Array = field(repr=False)
    velocity_m_s: Array = field(repr=False)
    motor_speed_rad_s: Array = field(repr=False)
    gap_angle_rad: Array = field(repr=False)
    integral_m_s: Array = field(repr=False)
    engaged: npt.NDArray[np.bool_] = field(repr=False)
    command_position_m: Array = field(repr=False)

    def position_at(self, t: Array | float) -> Array:
        """x at arbitrary instants (linear between samples; exact on the grid)."""
        return np.asarray(np.interp(t, self.time_s, self.position_m))

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        err = self.command_position_m - self.position_m
        d: dict[str, Any] = {
            "params": self.params.to_dict(),
            "step_s": self.step_s,
            "trigger": self.trigger,
            "engagement": self.engagement,
            "start_s": float(self.time_s[0]),
            "end_s": float(self.time_s[-1]),
            "max_abs_following_error_m": float(np.max(np.abs(err))),
            "intervals": [i.to_dict() for i in self.intervals],
        }
        if samples:
            d["samples"] = {
                "time_s": self.time_s.tolist(),
                "position_m": self.position_m.tolist(),
                "velocity_m_s": self.velocity_m_s.tolist(),
                "motor_speed_rad_s": self.motor_speed_rad_s.tolist(),
                "engaged": self.engaged.tolist(),
                "command_position_m": self.command_position_m.tolist(),
            }
        return d


# ------------------------------------------------------------------------------ simulation


class _Simulator:
    def __init__(
        self, params: AxisParams, command: AxisCommand, start: float, end: float, step: float
    ) -> None:
        self.p = params
        self.command = command
        self.start = start
        self.end = end
        self.step = step
        self.integral = params.integral_time_s is not None

    # -- inputs and propagation
    def inputs(self, kind: str, t: Array, hold_m: float) -> Array:
        pos, vel = self.command(np.asarray(t, dtype=float))
        pos = np.broadcast_to(np.asarray(pos, dtype=float), t.shape)
        vel = np.broadcast_to(np.asarray(vel, dtype=float), t.shape)
        return np.stack([pos - hold_m if kind == "gap" else pos, vel], axis=1)

    def partial(self, kind: str, s: Array, t0: float, t1: float, hold_m: float) -> Array:
        phi, hold = step_matrices(self.p, kind, t1 - t0)
        u = self.inputs(kind, np.array([t0, t1]), hold_m)
        return np.asarray(phi @ s + hold @ hermite_terms(u, t1 - t0)[0])

    def grid_time(self, k: int) -> float:
        return self.start + k * self.step

    def advance(
        self, kind: str, s0: Array, t0: float, t_stop: float, hold_m: float
    ) -> tuple[Array, Array, Array]:
        """Samples from t0 (included) to t_stop: every grid point in between, then t_stop."""
        times = [np.array([t0])]
        states = [s0[None, :]]
        k_first = math.floor((t0 - self.start) / self.step + _SNAP) + 1
        k_last = math.floor((t_stop - self.start) / self.step + _SNAP)
        t_cur, s_cur = t0, s0
        if k_last >= k_first:
            t_a = self.grid_time(k_first)
            if t_a - t0 > _SNAP * self.step:
                s_cur = self.partial(kind, s_cur, t0, t_a, hold_m)
                times.append(np.array([t_a]))
                states.append(s_cur[None, :])
            t_cur = t_a
            if k_last > k_first:
                grid = self.start + self.step * np.arange(k_first, k_last + 1, dtype=float)
                u = self.inputs(kind, grid, hold_m)
                block = uniform_steps(mode(self.p, kind, self.step), s_cur, u)
                times.append(grid[1:])
                states.append(block[1:])
                t_cur, s_cur = float(grid[-1]), block[-1]
        if t_stop - t_cur > _SNAP * self.step:
            s_cur = self.partial(kind, s_cur, t_cur, t_stop, hold_m)
            times.append(np.array([t_stop]))
            states.append(s_cur[None, :])
        t = np.concatenate(times)
        s = np.concatenate(states)
        return t, s, self.inputs(kind, t, hold_m)

    def derivative(self, kind: str, s: Array, u: Array) -> Array:
        a, b = continuous_matrices(self.p, kind)
        return np.asarray(s @ a.T + u @ b.T)

    # -- events: value arrays whose first rise from <= 0 to > 0 is the switch
    def event_values(
        self, kind: str, s: Array, ds: Array, direction: int, rule: str
    ) -> list[tuple[str, Array, Array]]:
        if kind == "engaged":
            return [("reversal", -direction * s[:, 1], -direction * ds[:, 1])]
        dth = self.p.backlash_motor_rad
        g, w = s[:, -1], ds[:, -1]
        if rule == "either":
            return [("new_flank", g - dth, w), ("new_flank", -g - dth, -w)]
        return [
            ("new_flank", direction * g - dth, direction * w),
            ("old_flank", -direction * g, -direction * w),
        ]

    def locate(
        self, kind: str, t: Array, s: Array, u: Array, direction: int, rule: str, hold_m: float
    ) -> tuple[int, float, str] | None:
        """First switch among the samples: (sample index before it, instant, outcome)."""
        ds = self.derivative(kind, s, u)
        best: tuple[int, float, str] | None = None
        for idx, (name, e, de) in enumerate(self.event_values(kind, s, ds, direction, rule)):
            hits = np.nonzero((e[:-1] <= 0) & (e[1:] > 0))[0]
            if not hits.size:
                continue
            j = int(hits[0])
            if best is not None and j > best[0]:
                continue
            te = self._refine(kind, t, s, u, j, e, de, direction, rule, idx, hold_m)
            if best is None or te < best[1]:
                best = (j, te, name)
        return best

    def _refine(
        self,
        kind: str,
        t: Array,
        s: Array,
        u: Array,
        j: int,
        e: Array,
        de: Array,
        direction: int,
        rule: str,
        idx: int,
        hold_m: float,
    ) -> float:
        t0, t1 = float(t[j]), float(t[j + 1])
        h = t1 - t0
        e0, e1, d0, d1 = float(e[j]), float(e[j + 1]), float(de[j]) * h, float(de[j + 1]) * h
        if e0 == 0.0:
            return t0
        # Cubic Hermite through the two samples, in the power basis of s in [0, 1].
        coeffs = [2 * e0 - 2 * e1 + d0 + d1, -3 * e0 + 3 * e1 - 2 * d0 - d1, d0, e0]
        roots = [r.real for r in np.roots(coeffs) if abs(r.imag) < 1e-9 and -1e-9 <= r.real <= 1]
        frac = min(roots) if roots else e0 / (e0 - e1)
        te = t0 + min(max(frac, 0.0), 1.0) * h
        for _ in range(4):  # Newton with exact propagation from the sample before the switch
            if te - t0 <= _SNAP * h:
                break
            st = self.partial(kind, s[j], t0, te, hold_m)
            ut = self.inputs(kind, np.array([te]), hold_m)
            dst = self.derivative(kind, st[None, :], ut)
            _, ev, dv = self.event_values(kind, st[None, :], dst, direction, rule)[idx]
            val, dval = float(ev[0]), float(dv[0])
            if dval == 0.0:
                break
            shift = val / dval
            te = min(max(te - shift, t0), t1)
            if abs(shift) <= 1e-12 * h:
                break
        return float(te)


def simulate_axis(
    params: AxisParams,
    command: AxisCommand,
    start_s: float,
    end_s: float,
    *,
    step_s: float = 1e-3,
    trigger: Trigger = "reversal",
    scheduled_s: tuple[float, ...] = (),
    engagement: Engagement = "paper",
    initial_position_m: float | None = None,
    initial_velocity_m_s: float | None = None,
    initial_integral_m_s: float = 0.0,
) -> AxisTrajectory:
    """Simulate one axis with backlash over [start_s, end_s] (see the module docstring).

    The axis starts engaged, by default on the commanded position and velocity, integral state 0.
    Its initial sense of motion is that of its velocity, or of its acceleration when at rest.
    """
    if not (math.isfinite(start_s) and math.isfinite(end_s) and end_s > start_s):
        raise ValueError(f"simulate_axis: need finite start_s < end_s, got {start_s}, {end_s}")
    if not (step_s > 0 and math.isfinite(step_s)):
        raise ValueError(f"simulate_axis: step_s must be > 0, got {step_s!r}")
    if trigger not in ("reversal", "scheduled", "none"):
        raise ValueError(f"simulate_axis: trigger must be reversal|scheduled|none, got {trigger!r}")
    if engagement not in ("paper", "inelastic"):
        raise ValueError(f"simulate_axis: engagement must be paper|inelastic, got {engagement!r}")
    # Land the grid exactly on end_s: the step shrinks by less than one part in the step count.
    n_steps = max(1, math.ceil((end_s - start_s) / step_s - 1e-9))
    step = (end_s - start_s) / n_steps
    sim = _Simulator(params, command, start_s, end_s, step)
    pos0, vel0 = command(np.array([start_s]))
    x0 = float(np.asarray(pos0).ravel()[0]) if initial_position_m is None else initial_position_m
    v0 = (
        float(np.asarray(vel0).ravel()[0])
        if initial_velocity_m_s is None
        else (initial_velocity_m_s)
    )
    integral = sim.integral
    ratio = params.gear_ratio / params.screw_lead_m_per_rad  # motor rad per axis metre

    state = np.array([x0, v0, initial_integral_m_s] if integral else [x0, v0])
    if v0 != 0.0:
        direction = 1 if v0 > 0 else -1
    else:
        u0 = sim.inputs("engaged", np.array([start_s]), 0.0)
        acc = sim.derivative("engaged", state[None, :], u0)[0, 1]
        direction = -1 if acc < 0 else 1
    pending = (
        sorted(t for t in scheduled_s if start_s < t < end_s) if trigger == "scheduled" else []
    )
    kind, rule, hold, t_now = "engaged", "flank", 0.0, start_s
    out_t: list[Array] = []
    out_cols: list[tuple[Array, Array, Array, Array, Array, Array, Array]] = []
    intervals: list[BacklashInterval] = []
    gap_start = math.nan
    switches = 0

    def record(t: Array, s: Array, u: Array) -> None:
        if kind == "engaged":
            x, v = s[:, 0], s[:, 1]
            z = s[:, 2] if integral else np.zeros(len(t))
            w, g, cmd = v * ratio, np.zeros(len(t)), u[:, 0]
            eng = np.ones(len(t), dtype=bool)
        else:
            x, v = np.full(len(t), hold), np.zeros(len(t))
            z = s[:, 0] if integral else np.zeros(len(t))
            w, g, cmd = s[:, -2], s[:, -1], u[:, 0] + hold
            eng = np.zeros(len(t), dtype=bool)
        out_t.append(t)
        out_cols.append((x, v, w, g, z, eng, cmd))

    chunk = 256
    while t_now < end_s - _SNAP * step:
        limit = end_s
        if kind == "engaged":
            while pending and pending[0] < t_now - _SNAP * step:
                pending.pop(0)  # it fell inside a gap phase: that reversal is already under way
            if pending:
                limit = min(limit, pending[0])
        k_now = math.floor((t_now - start_s) / step + _SNAP)
        t_stop = min(limit, sim.grid_time(k_now + chunk))
        t, s, u = sim.advance(kind, state, t_now, t_stop, hold)
        hit = None
        if trigger == "reversal" or kind == "gap":
            hit = sim.locate(kind, t, s, u, direction, rule, hold)
        if hit is None:
            record(t[:-1], s[:-1], u[:-1])
            state, t_now = s[-1], float(t[-1])
            chunk = min(chunk * 2, 65536)
            if not (kind == "engaged" and pending and t_now >= pending[0] - _SNAP * step):
                continue
            pending.pop(0)
            record(t[-1:], s[-1:], u[-1:])  # the state just before the switch
            te, outcome = t_now, "scheduled"
            s_e = state
        else:
            j, te, outcome = hit
            s_e = sim.partial(kind, s[j], float(t[j]), te, hold) if te > t[j] else s[j]
            record(t[: j + 1], s[: j + 1], u[: j + 1])
            u_e = sim.inputs(kind, np.array([te]), hold)
            if te > t[j]:
                record(np.array([te]), s_e[None, :], u_e)
        switches += 1
        if switches > _MAX_SWITCHES:
            raise RuntimeError(
                f"simulate_axis: more than {_MAX_SWITCHES} mode switches by "
                f"t={te:.6g} s (chattering near a reversal?)"
            )
        z = float(s_e[0]) if (integral and kind == "gap") else (float(s_e[2]) if integral else 0.0)
        if kind == "engaged":
            # Reversal (or scheduled start): the axis stops where it is, the motor enters the gap.
            hold = float(s_e[0])
            if outcome == "reversal":
                direction, rule = -direction, "flank"
            else:
                rule = "either"
            gap_start = te
            if params.backlash_motor_rad == 0.0:
                intervals.append(BacklashInterval(te, te, hold, direction, "new_flank"))
                state = np.array([hold, 0.0, z] if integral else [hold, 0.0])
            else:
                kind = "gap"
                state = np.array([z, 0.0, 0.0] if integral else [0.0, 0.0])
        else:
            w, g = float(s_e[-2]), float(s_e[-1])
            if outcome == "old_flank":
                direction = -direction
            elif rule == "either":
                direction = 1 if g > 0 else -1
            intervals.append(BacklashInterval(gap_start, te, hold, direction, outcome))
            v = 0.0
            if engagement == "inelastic" and w * direction > 0:
                v = params.motor_inertia_fraction * w / ratio
            kind, rule = "engaged", "flank"
            state = np.array([hold, v, z] if integral else [hold, v])
        t_now = te
        chunk = 256
    # Final sample.
    u_end = sim.inputs(kind, np.array([t_now]), hold)
    record(np.array([t_now]), state[None, :], u_end)
    if kind == "gap":
        intervals.append(BacklashInterval(gap_start, None, hold, direction, "open"))
    cols = [np.concatenate([c[i] for c in out_cols]) for i in range(7)]
    return AxisTrajectory(
        params=params,
        step_s=step,
        trigger=trigger,
        engagement=engagement,
        intervals=tuple(intervals),
        time_s=np.concatenate(out_t),
        position_m=cols[0],
        velocity_m_s=cols[1],
        motor_speed_rad_s=cols[2],
        gap_angle_rad=cols[3],
        integral_m_s=cols[4],
        engaged=cols[5].astype(bool),
        command_position_m=cols[6],
    )


def gap_take_up_s(
    params: AxisParams,
    command: AxisCommand,
    start_s: float,
    position_m: float,
    *,
    horizon_s: float,
    step_s: float = 1e-3,
    direction: int = 0,
    initial_integral_m_s: float = 0.0,
) -> float | None:
    """Backlash interval from eq. 32 (eq. 16 with the PI/PID law): motor from rest at start_s.

    direction 0 (the paper's rule): the interval ends when |theta_m| = dtheta_m. direction +1/-1:
    only the flank in that sense counts. Returns None when the gap is not crossed within
    horizon_s, or (direction +1/-1) when the motor turns back onto the old flank first.
    """
    if params.backlash_motor_rad == 0.0:
        return 0.0
    sim = _Simulator(params, command, start_s, start_s + horizon_s, step_s)
    s0 = np.array([initial_integral_m_s, 0.0, 0.0]) if sim.integral else np.zeros(2)
    rule = "either" if direction == 0 else "flank"
    t, s, u = sim.advance("gap", s0, start_s, start_s + horizon_s, position_m)
    hit = sim.locate("gap", t, s, u, direction, rule, position_m)
    if hit is None or hit[2] != "new_flank":
        return None
    return hit[1] - start_s
