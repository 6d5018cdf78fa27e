"""Backlash axis under P, PI or PID control, integrated numerically (Farouki & Swett
2022, eqs. 7, 16, 32).

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

The modes' exact propagation is agent.models.axis.modes'; stepping them and locating a switch,
agent.models.axis.stepping's; this module switches between them.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt

from agent.models.axis.modes import AxisMode
from agent.models.axis.params import AxisParams
from agent.models.axis.stepping import SNAP, GapRule, ModeStepper, Switch
from agent.models.axis.trajectory import AxisCommand, AxisTrajectory, BacklashInterval, GapOutcome

Array = npt.NDArray[np.float64]
Trigger = Literal["reversal", "scheduled", "none"]
Engagement = Literal["paper", "inelastic"]

_MAX_SWITCHES = 100_000


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
    sim = ModeStepper(params, command, start_s, end_s, step)
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
        u0 = sim.inputs(AxisMode.ENGAGED, np.array([start_s]), 0.0)
        acc = sim.derivative(AxisMode.ENGAGED, state[None, :], u0)[0, 1]
        direction = -1 if acc < 0 else 1
    pending = (
        sorted(t for t in scheduled_s if start_s < t < end_s) if trigger == "scheduled" else []
    )
    kind, rule, hold, t_now = AxisMode.ENGAGED, GapRule.FLANK, 0.0, start_s
    out_t: list[Array] = []
    out_cols: list[tuple[Array, Array, Array, Array, Array, Array, Array]] = []
    intervals: list[BacklashInterval] = []
    gap_start = math.nan
    switches = 0

    def record(t: Array, s: Array, u: Array) -> None:
        if kind == AxisMode.ENGAGED:
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
    while t_now < end_s - SNAP * step:
        limit = end_s
        if kind == AxisMode.ENGAGED:
            while pending and pending[0] < t_now - SNAP * step:
                pending.pop(0)  # it fell inside a gap phase: that reversal is already under way
            if pending:
                limit = min(limit, pending[0])
        k_now = math.floor((t_now - start_s) / step + SNAP)
        t_stop = min(limit, sim.grid_time(k_now + chunk))
        t, s, u = sim.advance(kind, state, t_now, t_stop, hold)
        hit = None
        if trigger == "reversal" or kind == AxisMode.GAP:
            hit = sim.locate(kind, t, s, u, direction, rule, hold)
        if hit is None:
            record(t[:-1], s[:-1], u[:-1])
            state, t_now = s[-1], float(t[-1])
            chunk = min(chunk * 2, 65536)
            if not (kind == AxisMode.ENGAGED and pending and t_now >= pending[0] - SNAP * step):
                continue
            pending.pop(0)
            record(t[-1:], s[-1:], u[-1:])  # the state just before the switch
            te, outcome = t_now, Switch.SCHEDULED
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
        z = (
            float(s_e[0])
            if (integral and kind == AxisMode.GAP)
            else (float(s_e[2]) if integral else 0.0)
        )
        if kind == AxisMode.ENGAGED:
            # Reversal (or scheduled start): the axis stops where it is, the motor enters the gap.
            hold = float(s_e[0])
            if outcome == Switch.REVERSAL:
                direction, rule = -direction, GapRule.FLANK
            else:
                rule = GapRule.EITHER
            gap_start = te
            if params.backlash_motor_rad == 0.0:
                intervals.append(BacklashInterval(te, te, hold, direction, GapOutcome.NEW_FLANK))
                state = np.array([hold, 0.0, z] if integral else [hold, 0.0])
            else:
                kind = AxisMode.GAP
                state = np.array([z, 0.0, 0.0] if integral else [0.0, 0.0])
        else:
            w, g = float(s_e[-2]), float(s_e[-1])
            if outcome == Switch.OLD_FLANK:
                direction = -direction
            elif rule == GapRule.EITHER:
                direction = 1 if g > 0 else -1
            intervals.append(BacklashInterval(gap_start, te, hold, direction, GapOutcome(outcome)))
            v = 0.0
            if engagement == "inelastic" and w * direction > 0:
                v = params.motor_inertia_fraction * w / ratio
            kind, rule = AxisMode.ENGAGED, GapRule.FLANK
            state = np.array([hold, v, z] if integral else [hold, v])
        t_now = te
        chunk = 256
    # Final sample.
    u_end = sim.inputs(kind, np.array([t_now]), hold)
    record(np.array([t_now]), state[None, :], u_end)
    if kind == AxisMode.GAP:
        intervals.append(BacklashInterval(gap_start, None, hold, direction, GapOutcome.OPEN))
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
    sim = ModeStepper(params, command, start_s, start_s + horizon_s, step_s)
    s0 = np.array([initial_integral_m_s, 0.0, 0.0]) if sim.integral else np.zeros(2)
    rule = GapRule.EITHER if direction == 0 else GapRule.FLANK
    t, s, u = sim.advance(AxisMode.GAP, s0, start_s, start_s + horizon_s, position_m)
    hit = sim.locate(AxisMode.GAP, t, s, u, direction, rule, position_m)
    if hit is None or hit[2] != Switch.NEW_FLANK:
        return None
    return hit[1] - start_s
