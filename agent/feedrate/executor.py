"""The simulated fake CNC: a G-code program executed on two axes with backlash.

The parsed program (agent.feedrate.gcode.parser Blocks, mm) is turned into a commanded path X(t),
Y(t) and each axis's command is fed to the dead-zone axis model of Farouki & Swett 2022
(agent.models.axis.pid, trigger "reversal": a gap phase at every motor reversal, sections 3.3-3.4),
P control unless the AxisParams say otherwise, both axes with the section 4.2 parameters by default
(section 5.3: "the x and y axes are assumed to be characterized by the same values"). Out: commanded
and realised XY paths (m) on one time grid; agent.feedrate.circular_test measures a circle on them.

Interpolation (what the paper assumes and what we add):
  * acceleration_mm_s2=None (default, the paper's assumption): the interpolator is ideal - each
    block is traversed at exactly its programmed feed (G93 blocks in exactly their time), the
    path speed changing instantly between blocks; the paper's commands (eqs. 18, 29-30) are such
    prescribed motions with no interpolator dynamics between program and axis loop.
  * acceleration_mm_s2=A: a GRBL-like planner - trapezoidal speed on each block, junction speed
    from the junction-deviation rule (GRBL planner.c, $11), backward and forward passes over the
    whole program, rest at its start and end; a block's acceleration is A / max|u_i| (each axis
    limited to A), an arc's speed at most sqrt(A r) (centripetal acceleration <= A).
Rapids (G0) run at rapid_mm_s; G4 dwells hold the position. Only X and Y are simulated; Z
motion takes time and path length but no axis. Initial flank: an axis that moves in the first
block starts resting on the flank of that motion; one that does not rests on its + flank (the
true initial flank of a worn gear is unknown; the first reversal then shows a take-up).
The axis simulator samples the command on its grid with a cubic Hermite between samples, so a
speed step inside a step (ideal interpolator, block boundaries) is smeared over one step
(error ~ step * dv / 8).

Measured with the section 4.2 axes: a G3 arc through the vertical turning point gives the same
radial error as agent.feedrate.example's run (to 1e-6) and the section 4.2 backlash interval
0.118743 s; the section 6 profile (ratio 0.25) written as G93 chords gives the analytic
command's error to 2e-3. At low feeds (below ~2000 mm/min on a 100 mm circle) these axes
stick-slip: the underdamped loop (gamma 5 1/s) restarting at rest after each gap (eq. 14)
reverses again whenever its ringing outruns the commanded axis speed - a hunting the dead-zone
model predicts, with many short gap phases (and slow simulation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from agent.feedrate.example import PAPER_AXIS
from agent.feedrate.gcode.blocks import Block, Motion
from agent.feedrate.gcode.parser import ModalState, parse_lines
from agent.feedrate.geometry.arcs import ArcSegment
from agent.feedrate.geometry.primitives import Plane
from agent.feedrate.speed_planning import plan_speeds
from agent.models.axis.params import AxisParams
from agent.models.axis.pid import simulate_axis
from agent.models.axis.trajectory import AxisTrajectory

Array = npt.NDArray[np.float64]
Vec3 = tuple[float, float, float]
MM = 1e-3  # m per mm

# --------------------------------------------------------------------------- machine model


@dataclass(frozen=True)
class MachineModel:
    """Two backlash axes and the interpolator in front of them (see the module docstring)."""

    x_axis: AxisParams = PAPER_AXIS
    y_axis: AxisParams | None = None  # None: same as x
    acceleration_mm_s2: float | None = None  # None: ideal interpolator (the paper's)
    junction_deviation_mm: float = 0.01  # GRBL $11 default
    rapid_mm_s: float = 5000.0 / 60.0
    step_s: float = 1e-3  # the paper's integration step (section 6)
    settle_s: float = 0.5  # simulated time after the last block
    backlash: bool = True  # False: no dead zone (eq. 8 throughout)

    def __post_init__(self) -> None:
        for name in ("rapid_mm_s", "step_s", "junction_deviation_mm"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(
                    f"MachineModel.{name}: expected a finite number > 0, got {value!r}"
                )
        a = self.acceleration_mm_s2
        if a is not None and not (math.isfinite(a) and a > 0):
            raise ValueError(f"MachineModel.acceleration_mm_s2: expected > 0 or None, got {a!r}")
        if self.settle_s < 0:
            raise ValueError(f"MachineModel.settle_s: expected >= 0, got {self.settle_s!r}")

    @property
    def y_params(self) -> AxisParams:
        return self.x_axis if self.y_axis is None else self.y_axis

    @classmethod
    def from_axes(cls, axes: Mapping[str, AxisParams], **kw: Any) -> MachineModel:
        """The machine of a filter config: MachineModel.from_axes(settings.axis_params()). An
        axis the config leaves out (no backlash modelled there) gets the other's drive with no
        gap."""
        given = axes.get("X") or axes.get("Y")
        if given is None:
            raise ValueError("MachineModel.from_axes: need an X or a Y axis")
        free = replace(given, backlash_motor_rad=0.0)
        return cls(x_axis=axes.get("X") or free, y_axis=axes.get("Y") or free, **kw)


# --------------------------------------------------------------------------- commanded path


@dataclass(frozen=True)
class BlockTiming:
    line_no: int
    start_s: float
    end_s: float
    start_mm: Vec3
    end_mm: Vec3


_LINE, _ARC, _OTHER, _DWELL = 0, 1, 2, 3


class CommandedPath:
    """X(t), Y(t) and their velocities for a program, vectorised over arrays of times (s, m)."""

    def __init__(self, blocks: Iterable[Block], machine: MachineModel) -> None:
        moves: list[tuple[Block, float, float, float]] = []  # block, length, speed, accel
        for b in blocks:
            if b.skipped:
                continue
            if b.motion is not None and not b.path_known:
                # The parser's coordinates for this move are a guess: where it goes depends on
                # offsets only the controller holds, so simulating it would invent a path.
                raise ValueError(
                    f"line {b.line_no}: the simulated CNC cannot execute a move after a frame "
                    "change (work offset, G92, G10, tool length, M2/M30) that does not fix "
                    f"every axis it moves: {b.text.strip()!r}"
                )
            if b.motion is not None and b.length_mm > 0.0:
                moves.append((b, b.length_mm, *_nominal(b, machine)))
            elif b.dwell_s:
                moves.append((b, 0.0, 0.0, 0.0))
        if not moves:
            raise ValueError("CommandedPath: the program makes no move")
        self.profiles = plan_speeds(
            moves, machine.acceleration_mm_s2, machine.junction_deviation_mm
        )
        n = len(moves)
        self.kind = np.zeros(n, dtype=np.int8)
        geo = np.zeros((n, 8))  # line: x0 y0 ux uy; arc: cx cy r th0 d lpr
        self.primitives: dict[int, Any] = {}
        timings: list[BlockTiming] = []
        t = 0.0
        starts, durs = np.zeros(n), np.zeros(n)
        for i, ((b, _, _, _), prof) in enumerate(zip(moves, self.profiles, strict=True)):
            dur = prof.duration if prof is not None else float(b.dwell_s or 0.0)
            starts[i], durs[i] = t, dur
            timings.append(BlockTiming(b.line_no, t, t + dur, b.start_mm, b.end_mm))
            t += dur
            arc = b.arc
            if prof is None:
                self.kind[i] = _DWELL
                geo[i, :2] = b.end_mm[:2]
            elif arc is None:
                self.kind[i] = _LINE
                d = [e - s for e, s in zip(b.end_mm, b.start_mm, strict=True)]
                geo[i, :4] = (*b.start_mm[:2], d[0] / b.length_mm, d[1] / b.length_mm)
            elif isinstance(arc, ArcSegment) and arc.plane is Plane.XY:
                self.kind[i] = _ARC
                geo[i, :6] = (
                    arc.centre[0],
                    arc.centre[1],
                    arc.radius,
                    arc.theta0_rad,
                    arc.direction,
                    arc.length_per_rad,
                )
            else:
                self.kind[i] = _OTHER
                self.primitives[i] = b.primitive()
        self.start_s, self.duration_s, self.geo = starts, durs, geo
        self.timings = tuple(timings)
        self.cycle_time_s = t
        self.start_mm = moves[0][0].start_mm
        self.end_mm = moves[-1][0].end_mm
        prof_arr = [
            (
                p.v_entry,
                p.v_peak,
                p.accel if math.isfinite(p.accel) else 0.0,
                p.t_acc,
                p.t_cruise,
                p.length,
            )
            if p is not None
            else (0, 0, 0, 0, 0, 0)
            for p in self.profiles
        ]
        self.prof = np.array(prof_arr, dtype=float)

    def first_direction(self, axis: int) -> int:
        """Sign of the axis's motion at the very start (0 if it does not move in block 1)."""
        i = 0
        if self.kind[i] == _LINE:
            return int(np.sign(self.geo[i, 2 + axis]))
        _, vel = self.evaluate(np.array([min(1e-9, self.duration_s[0])]))
        return int(np.sign(vel[0, axis]))

    def evaluate(self, t: Array) -> tuple[Array, Array]:
        """Positions (N, 2) in m and velocities (N, 2) in m/s at times t (s, program start 0)."""
        t = np.asarray(t, dtype=float).ravel()
        idx = np.clip(np.searchsorted(self.start_s, t, side="right") - 1, 0, len(self.kind) - 1)
        tau = np.clip(t - self.start_s[idx], 0.0, self.duration_s[idx])
        v0, vp, a, ta, tc, length = self.prof[idx].T
        acc_ph, cru_ph = tau < ta, tau < ta + tc
        u = tau - ta - tc
        d_acc = 0.5 * (v0 + vp) * ta
        s = np.where(
            acc_ph,
            v0 * tau + 0.5 * a * tau * tau,
            np.where(cru_ph, d_acc + vp * (tau - ta), d_acc + vp * tc + vp * u - 0.5 * a * u * u),
        )
        s = np.clip(s, 0.0, length)
        v = np.where(acc_ph, v0 + a * tau, np.where(cru_ph, vp, np.maximum(vp - a * u, 0.0)))
        v = np.where(t >= self.cycle_time_s, 0.0, v)  # at rest after the program
        pos, vel = np.zeros((t.size, 2)), np.zeros((t.size, 2))
        kind, g = self.kind[idx], self.geo[idx]
        m = kind == _LINE
        pos[m] = g[m, :2] + g[m, 2:4] * s[m, None]
        vel[m] = g[m, 2:4] * v[m, None]
        m = kind == _ARC
        if m.any():
            cx, cy, r, th0, d, lpr = g[m, :6].T
            th = th0 + d * s[m] / lpr
            pos[m] = np.stack([cx + r * np.cos(th), cy + r * np.sin(th)], axis=1)
            vel[m] = (
                np.stack([-d * r * np.sin(th), d * r * np.cos(th)], axis=1) * (v[m] / lpr)[:, None]
            )
        m = kind == _DWELL
        pos[m] = g[m, :2]
        for j in np.nonzero(kind == _OTHER)[0]:
            prim = self.primitives[int(idx[j])]
            p, tan = prim.point(float(s[j])), prim.tangent(float(s[j]))
            pos[j] = p[:2]
            vel[j] = (tan[0] * v[j], tan[1] * v[j])
        return pos * MM, vel * MM

    def axis(self, k: int) -> Any:
        def command(t: Array) -> tuple[Array, Array]:
            pos, vel = self.evaluate(t)
            shape = np.shape(t)
            return pos[:, k].reshape(shape), vel[:, k].reshape(shape)

        return command


def _nominal(b: Block, machine: MachineModel) -> tuple[float, float]:
    """Programmed speed (mm/s) and block acceleration (mm/s^2, inf without limits)."""
    speed = machine.rapid_mm_s if b.motion is Motion.RAPID else float(b.feed_mm_s or 0.0)
    if speed <= 0.0:
        raise ValueError(f"line {b.line_no}: feed move without a positive feed")
    a = machine.acceleration_mm_s2
    if a is None:
        return speed, math.inf
    if b.arc is not None:
        return min(speed, math.sqrt(a * b.arc.radius)), a
    d = [abs(e - s) / b.length_mm for e, s in zip(b.end_mm, b.start_mm, strict=True)]
    return speed, a / max(d)


# --------------------------------------------------------------------------- execution


@dataclass(frozen=True, eq=False)
class Execution:
    """Commanded and realised XY paths (m) of one program run on the machine model."""

    machine: MachineModel
    time_s: Array = field(repr=False)
    commanded_m: Array = field(repr=False)  # (N, 2)
    realised_m: Array = field(repr=False)  # (N, 2)
    x: AxisTrajectory = field(repr=False)
    y: AxisTrajectory = field(repr=False)
    blocks: tuple[BlockTiming, ...] = field(repr=False)
    cycle_time_s: float = 0.0

    @property
    def following_error_m(self) -> Array:
        return np.asarray(np.hypot(*(self.realised_m - self.commanded_m).T))

    def between(self, start_s: float, end_s: float) -> npt.NDArray[np.bool_]:
        """Samples in [start_s, end_s]; a sample within 1e-9 s of an end counts as inside."""
        return (self.time_s >= start_s - 1e-9) & (self.time_s <= end_s + 1e-9)

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "cycle_time_s": self.cycle_time_s,
            "blocks": len(self.blocks),
            "max_following_error_m": float(np.max(self.following_error_m)),
            "x_backlash_intervals": len(self.x.intervals),
            "y_backlash_intervals": len(self.y.intervals),
            "acceleration_mm_s2": self.machine.acceleration_mm_s2,
            "step_s": self.machine.step_s,
        }
        if samples:
            d["time_s"] = self.time_s.tolist()
            d["commanded_m"] = self.commanded_m.tolist()
            d["realised_m"] = self.realised_m.tolist()
        return d


def execute(blocks: Iterable[Block], machine: MachineModel | None = None) -> Execution:
    """Run the parsed program on the two-axis machine model (see the module docstring)."""
    m = machine or MachineModel()
    path = CommandedPath(blocks, m)
    end = path.cycle_time_s + m.settle_s
    trigger: Literal["reversal", "none"] = "reversal" if m.backlash else "none"
    trajectories = []
    for k, params in enumerate((m.x_axis, m.y_params)):
        command = path.axis(k)
        v0 = float(command(np.array([0.0]))[1][0])
        if v0 == 0.0 and path.first_direction(k) != 0:
            v0 = 1e-12 * path.first_direction(k)  # sets the initial flank, moves nothing
        trajectories.append(
            simulate_axis(
                params, command, 0.0, end, step_s=m.step_s, trigger=trigger, initial_velocity_m_s=v0
            )
        )
    xt, yt = trajectories
    n = max(1, math.ceil(end / m.step_s - 1e-9))
    t = np.linspace(0.0, end, n + 1)
    commanded, _ = path.evaluate(t)
    realised = np.stack([xt.position_at(t), yt.position_at(t)], axis=1)
    return Execution(m, t, commanded, realised, xt, yt, path.timings, path.cycle_time_s)


def execute_program(
    lines: Iterable[str],
    machine: MachineModel | None = None,
    *,
    start_mm: Vec3 = (0.0, 0.0, 0.0),
    source: str | None = None,
) -> Execution:
    """Parse G-code text (the machine starting at start_mm) and execute it."""
    state = ModalState(position_mm=start_mm, source=source)
    return execute(parse_lines(lines, state), machine)
