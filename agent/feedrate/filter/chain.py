"""The segments that replace one block: points on the path, durations, and what is written.

`SegmentChain` collects a replaced block's points in order (window samples and nominal-feed
pieces) with the time each step takes; `as_written` then keeps the points worth writing, finds
where the controller will really go for each (the written, rounded coordinates), and hands the
left-out points' time to the next kept one, so the timing stays exact (see its docstring).
"""

from __future__ import annotations

import math

from agent.feedrate.filter.window import Window
from agent.feedrate.gcode.blocks import Units
from agent.feedrate.geometry.primitives import Vec3

TINY_MM = 1e-9


class SegmentChain:
    """Points and durations of one replaced block; zero-length steps give their time to the
    next step, so every output segment has a length and a duration. `inner` marks points
    inside a straight block (they may be left out without leaving the path)."""

    __slots__ = ("carry", "dts", "inner", "last", "points")

    def __init__(self, start: Vec3) -> None:
        self.points: list[Vec3] = []
        self.dts: list[float] = []
        self.inner: list[bool] = []
        self.carry = 0.0
        self.last = start

    def add(self, point: Vec3, dt: float, inner: bool = False) -> None:
        if math.dist(point, self.last) <= TINY_MM:
            self.carry += dt
            return
        self.points.append(point)
        # Two samples at one instant are nanometres apart (a block end found by inversion next
        # to a uniform sample): give the step a microsecond rather than an infinite feed.
        self.dts.append(max(dt + self.carry, 1e-6))
        self.inner.append(inner)
        self.carry = 0.0
        self.last = point

    def window(self, w: Window, k0: int, k1: int) -> None:
        t, pts, inner = w.t, w.points, w.inner
        for k in range(k0 + 1, k1 + 1):
            self.add(pts[k], t[k] - t[k - 1], inner[k])

    def finish(self, end: Vec3) -> tuple[list[Vec3], list[float], list[bool]]:
        if not self.points:
            self.points.append(end)
            self.dts.append(max(self.carry, 1e-9))
            self.inner.append(False)
        elif math.dist(self.points[-1], end) <= TINY_MM:
            self.points[-1] = end
            self.dts[-1] += self.carry
            self.inner[-1] = False
        else:  # an arc's last point, off its end: the controller's final straight step
            dt = self.dts[-1] + self.carry
            self.dts[-1] = 0.999 * dt
            self.points.append(end)
            self.dts.append(0.001 * dt)
            self.inner.append(False)
        return self.points, self.dts, self.inner


def as_written(
    start: Vec3,
    points: list[Vec3],
    dts: list[float],
    inner: list[bool],
    units: Units,
    decimals: int,
    incremental: bool,
) -> tuple[list[Vec3], list[Vec3], list[float]]:
    """The points worth writing, where the controller goes for each, and their durations.

    `start` is where the controller is: the block's start as the program wrote it, or as the
    emitter wrote it (rounded) when the previous block was replaced too.

    A point left out gives its time to the next, so the timing stays exact: a point inside a
    straight block closer than 10 units of the last written digit to the last point kept
    (such a step says nothing a controller can use, and its rounding would show as a jump in
    speed), and any point that would move no axis (no feed lost, no G4 dwell written - a
    planner stop). Absolute coordinates: an axis goes to the rounded coordinate when that
    differs from the rounded previous one (the emitter then writes it), else stays.
    Incremental: the emitter carries each rounding into the next increment, so the
    controller stays within half a unit of the point; a point is kept only when it is 1.5
    units from the last one on some axis, so no increment rounds to zero (the emitter's
    carry is not built for that case).
    """
    scale = units.mm_per_unit
    unit = 10.0**-decimals * scale
    min_inner = 10.0 * unit
    kept: list[Vec3] = []
    written: list[Vec3] = []
    times: list[float] = []
    prev = start
    prev_r = (
        round(start[0] / scale, decimals),
        round(start[1] / scale, decimals),
        round(start[2] / scale, decimals),
    )
    carry = 0.0
    last = len(points) - 1
    for k, p in enumerate(points):
        step = max(abs(p[0] - prev[0]), abs(p[1] - prev[1]), abs(p[2] - prev[2]))
        if inner[k] and k < last and step < min_inner:
            carry += dts[k]
            continue
        if incremental:
            r = prev_r if step < 1.5 * unit else (p[0], p[1], p[2])
        else:
            r = (
                round(p[0] / scale, decimals),
                round(p[1] / scale, decimals),
                round(p[2] / scale, decimals),
            )
        if r == prev_r:
            if k < last:
                carry += dts[k]
                continue
            if kept:  # the end rounds onto the last point kept: it takes that point's place
                kept[-1] = p  # (written the same way: where the controller goes is unchanged)
                if incremental:
                    written[-1] = p
                times[-1] += dts[k] + carry
                break
        if incremental:
            q = p  # within half a unit, by the emitter's carry
        else:
            q = (
                prev[0] if r[0] == prev_r[0] else r[0] * scale,
                prev[1] if r[1] == prev_r[1] else r[1] * scale,
                prev[2] if r[2] == prev_r[2] else r[2] * scale,
            )
        kept.append(p)
        written.append(q)
        times.append(dts[k] + carry)
        carry = 0.0
        prev, prev_r = q, r
    return kept, written, times
