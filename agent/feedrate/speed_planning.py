"""Path-speed planning for the simulated fake CNC (agent.feedrate.executor): a GRBL-like planner.

Each block gets a trapezoidal (or triangular, or constant) speed profile; the junction speed
between blocks follows GRBL's junction-deviation rule (planner.c, $11), and a backward and a
forward pass over each stretch between dwells make every entry speed reachable (the machine
rests at the start and end of a stretch). Without an acceleration limit every block runs at its
programmed speed: the ideal interpolator of Farouki & Swett 2022.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from agent.feedrate.gcode.blocks import Block

Vec3 = tuple[float, float, float]
# What the planner needs of one block: the block, its length (mm; 0 for a dwell), its
# programmed speed (mm/s) and its acceleration limit (mm/s^2, inf without limits).
PlannedMove = tuple[Block, float, float, float]


class SpeedProfile(NamedTuple):
    """Trapezoidal (or triangular, or constant) path speed over one block of `length` (mm)."""

    length: float
    v_entry: float
    v_peak: float
    v_exit: float
    accel: float  # inf: constant speed v_peak
    t_acc: float
    t_cruise: float
    t_dec: float

    @property
    def duration(self) -> float:
        return self.t_acc + self.t_cruise + self.t_dec

    def distance_at(self, t: float) -> float:
        """Path length covered t seconds into the block (clamped to [0, length])."""
        if t <= 0.0:
            return 0.0
        if t >= self.duration:
            return self.length
        v0, vp, a = self.v_entry, self.v_peak, self.accel
        if t < self.t_acc:
            return v0 * t + 0.5 * a * t * t
        d_acc = 0.5 * (v0 + vp) * self.t_acc
        if t < self.t_acc + self.t_cruise:
            return d_acc + vp * (t - self.t_acc)
        u = t - self.t_acc - self.t_cruise
        return min(d_acc + vp * self.t_cruise + vp * u - 0.5 * a * u * u, self.length)


def trapezoid(
    length: float, v_entry: float, v_nominal: float, v_exit: float, accel: float | None
) -> SpeedProfile:
    """The fastest profile from v_entry to v_exit under v_nominal and |a| <= accel (mm, s).

    Entry/exit speeds that cannot be joined over the length are lowered to what can.
    """
    if length <= 0.0 or v_nominal <= 0.0:
        raise ValueError(f"trapezoid: need length > 0 and v_nominal > 0, got {length}, {v_nominal}")
    if accel is None or math.isinf(accel):
        return SpeedProfile(
            length, v_nominal, v_nominal, v_nominal, math.inf, 0.0, length / v_nominal, 0.0
        )
    v0, v1 = min(v_entry, v_nominal), min(v_exit, v_nominal)
    v1 = min(v1, math.sqrt(v0 * v0 + 2.0 * accel * length))
    v0 = min(v0, math.sqrt(v1 * v1 + 2.0 * accel * length))
    peak2 = accel * length + 0.5 * (v0 * v0 + v1 * v1)
    vp = min(v_nominal, math.sqrt(peak2))
    vp = max(vp, v0, v1)
    d_acc = (vp * vp - v0 * v0) / (2.0 * accel)
    d_dec = (vp * vp - v1 * v1) / (2.0 * accel)
    cruise = max(length - d_acc - d_dec, 0.0)
    return SpeedProfile(
        length,
        v0,
        vp,
        v1,
        accel,
        (vp - v0) / accel,
        cruise / vp if vp > 0 else 0.0,
        (vp - v1) / accel,
    )


def junction_speed(u_in: Vec3, u_out: Vec3, accel: float, deviation_mm: float) -> float:
    """GRBL's junction-deviation limit (planner.c) for the corner between unit directions."""
    cos_theta = -(u_in[0] * u_out[0] + u_in[1] * u_out[1] + u_in[2] * u_out[2])
    if cos_theta > 0.999999:
        return 0.0  # full reversal
    if cos_theta < -0.999999:
        return math.inf  # straight on
    sin_half = math.sqrt(0.5 * (1.0 - cos_theta))
    return math.sqrt(accel * deviation_mm * sin_half / (1.0 - sin_half))


def plan_entry_speeds(
    lengths: Sequence[float],
    accels: Sequence[float],
    limits: Sequence[float],
    v_start: float = 0.0,
    v_end: float = 0.0,
) -> list[float]:
    """Entry speed of each block: at most `limits[i]` (junction and nominal), reachable from
    v_start forwards and down to v_end backwards at each block's acceleration (GRBL's two
    planner passes). The returned list has one more entry: the exit speed of the last block."""
    n = len(lengths)
    v = [min(limits[i], math.inf) for i in range(n)] + [v_end]
    if n:
        v[0] = min(v[0], v_start)
    for i in range(n - 1, -1, -1):
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2.0 * accels[i] * lengths[i]))
    for i in range(n):
        v[i + 1] = min(v[i + 1], math.sqrt(v[i] ** 2 + 2.0 * accels[i] * lengths[i]))
    return v


def _tangents(b: Block) -> tuple[Vec3, Vec3]:
    prim = b.primitive()
    if prim is None:  # only moves are planned
        raise ValueError(f"line {b.line_no}: a block without motion has no tangent")
    return prim.tangent(0.0), prim.tangent(prim.length)


def plan_speeds(
    moves: Sequence[PlannedMove], acceleration_mm_s2: float | None, junction_deviation_mm: float
) -> list[SpeedProfile | None]:
    """Plan the program in stretches between dwells (the machine stops for each dwell); a dwell
    (length 0) gets None."""
    out: list[SpeedProfile | None] = []
    stretch: list[PlannedMove] = []

    def flush() -> None:
        if not stretch:
            return
        a_max = acceleration_mm_s2
        if a_max is None:
            out.extend(trapezoid(length, v, v, v, None) for _, length, v, _ in stretch)
        else:
            limits, prev = [], None
            for b, _, v, _ in stretch:
                t_in, t_out = _tangents(b)
                lim = (
                    0.0
                    if prev is None
                    else min(
                        v,
                        prev[1],
                        junction_speed(prev[0], t_in, a_max, junction_deviation_mm),
                    )
                )
                limits.append(lim)
                prev = (t_out, v)
            lengths = [m[1] for m in stretch]
            accels = [m[3] for m in stretch]
            entry = plan_entry_speeds(lengths, accels, limits)
            out.extend(
                trapezoid(length, entry[i], v, entry[i + 1], acc)
                for i, (_, length, v, acc) in enumerate(stretch)
            )
        stretch.clear()

    for move in moves:
        if move[1] == 0.0:
            flush()
            out.append(None)
        else:
            stretch.append(move)
    flush()
    return out
