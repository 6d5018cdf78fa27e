"""One mode of the backlash axis stepped through time, and the instant it switches.

`ModeStepper` propagates the engaged or the gap mode (agent.models.axis.modes) over the uniform
grid and to any instant in between, with the command taken as the cubic Hermite through its
samples, and locates the first switch among a run of samples: a cubic Hermite root between two
samples, then Newton steps with exact propagation to the candidate instant. Which switch ends
which mode, and what follows, is agent.models.axis.pid's.
"""

from __future__ import annotations

import math
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from agent.models.axis.modes import (
    AxisMode,
    continuous_matrices,
    hermite_terms,
    mode,
    step_matrices,
    uniform_steps,
)
from agent.models.axis.params import AxisParams
from agent.models.axis.trajectory import AxisCommand

Array = npt.NDArray[np.float64]

SNAP = 1e-9  # fraction of a step below which two instants are the same sample


class Switch(StrEnum):
    """What ends a phase: a motor reversal or a scheduled instant ends an engaged phase; the
    motor reaching the new flank, or turning back to the old one, ends a gap phase."""

    REVERSAL = "reversal"
    SCHEDULED = "scheduled"
    NEW_FLANK = "new_flank"
    OLD_FLANK = "old_flank"


class GapRule(StrEnum):
    """Which flank ends a gap phase: the one in the sense of the motor's rotation (FLANK, with
    the old flank behind it), or whichever the motor reaches first (EITHER, for a gap started
    at a scheduled instant with the motor at rest)."""

    FLANK = "flank"
    EITHER = "either"


class ModeStepper:
    """Propagation and switch location for one axis over [start, end] (see the module docstring)."""

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
    def inputs(self, kind: AxisMode, t: Array, hold_m: float) -> Array:
        pos, vel = self.command(np.asarray(t, dtype=float))
        pos = np.broadcast_to(np.asarray(pos, dtype=float), t.shape)
        vel = np.broadcast_to(np.asarray(vel, dtype=float), t.shape)
        return np.stack([pos - hold_m if kind == AxisMode.GAP else pos, vel], axis=1)

    def partial(self, kind: AxisMode, s: Array, t0: float, t1: float, hold_m: float) -> Array:
        phi, hold = step_matrices(self.p, kind, t1 - t0)
        u = self.inputs(kind, np.array([t0, t1]), hold_m)
        return np.asarray(phi @ s + hold @ hermite_terms(u, t1 - t0)[0])

    def grid_time(self, k: int) -> float:
        return self.start + k * self.step

    def advance(
        self, kind: AxisMode, s0: Array, t0: float, t_stop: float, hold_m: float
    ) -> tuple[Array, Array, Array]:
        """Samples from t0 (included) to t_stop: every grid point in between, then t_stop."""
        times = [np.array([t0])]
        states = [s0[None, :]]
        k_first = math.floor((t0 - self.start) / self.step + SNAP) + 1
        k_last = math.floor((t_stop - self.start) / self.step + SNAP)
        t_cur, s_cur = t0, s0
        if k_last >= k_first:
            t_a = self.grid_time(k_first)
            if t_a - t0 > SNAP * self.step:
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
        if t_stop - t_cur > SNAP * self.step:
            s_cur = self.partial(kind, s_cur, t_cur, t_stop, hold_m)
            times.append(np.array([t_stop]))
            states.append(s_cur[None, :])
        t = np.concatenate(times)
        s = np.concatenate(states)
        return t, s, self.inputs(kind, t, hold_m)

    def derivative(self, kind: AxisMode, s: Array, u: Array) -> Array:
        a, b = continuous_matrices(self.p, kind)
        return np.asarray(s @ a.T + u @ b.T)

    # -- events: value arrays whose first rise from <= 0 to > 0 is the switch
    def event_values(
        self, kind: AxisMode, s: Array, ds: Array, direction: int, rule: GapRule
    ) -> list[tuple[Switch, Array, Array]]:
        if kind == AxisMode.ENGAGED:
            return [(Switch.REVERSAL, -direction * s[:, 1], -direction * ds[:, 1])]
        dth = self.p.backlash_motor_rad
        g, w = s[:, -1], ds[:, -1]
        if rule == GapRule.EITHER:
            return [(Switch.NEW_FLANK, g - dth, w), (Switch.NEW_FLANK, -g - dth, -w)]
        return [
            (Switch.NEW_FLANK, direction * g - dth, direction * w),
            (Switch.OLD_FLANK, -direction * g, -direction * w),
        ]

    def locate(
        self,
        kind: AxisMode,
        t: Array,
        s: Array,
        u: Array,
        direction: int,
        rule: GapRule,
        hold_m: float,
    ) -> tuple[int, float, Switch] | None:
        """First switch among the samples: (sample index before it, instant, outcome)."""
        ds = self.derivative(kind, s, u)
        best: tuple[int, float, Switch] | None = None
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
        kind: AxisMode,
        t: Array,
        s: Array,
        u: Array,
        j: int,
        e: Array,
        de: Array,
        direction: int,
        rule: GapRule,
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
            if te - t0 <= SNAP * h:
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
