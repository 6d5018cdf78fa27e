"""The GRBL peer's machine: 15-block planner, execution clock and feed hold (gcode.py parses
the lines, firmware.py and serial_port.py speak the serial protocol around it).

A feed hold decelerates at the axis acceleration along the running block (state Hold:1) and
stands (Hold:0); the rest of that block and the planner's queue stay, and cycle start runs them
from rest. Simplification: where the running block ends before the machine would have
stopped, it stops at that block's end with a harder deceleration (GRBL decelerates across
blocks).

The planner mirrors GRBL's planner.c and agent.feedrate.executor's helpers; it is kept here,
import-light, because importing the executor pulls scipy (seconds per peer start). Units: mm,
s, mm/s (feeds in mm/min only where G-code gives them).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedProfile:
    """Trapezoidal speed over one block (mm, s)."""

    v_entry: float
    v_peak: float
    v_exit: float
    accel: float
    t_acc: float
    t_cruise: float
    t_dec: float

    @property
    def duration(self) -> float:
        return self.t_acc + self.t_cruise + self.t_dec

    def speed_at(self, t: float) -> float:
        t = min(max(t, 0.0), self.duration)
        if t < self.t_acc:
            return self.v_entry + self.accel * t
        return self.v_peak - self.accel * max(t - self.t_acc - self.t_cruise, 0.0)

    def distance_at(self, t: float) -> float:
        t = min(max(t, 0.0), self.duration)
        v0, vp, a = self.v_entry, self.v_peak, self.accel
        if t < self.t_acc:
            return v0 * t + 0.5 * a * t * t
        d = 0.5 * (v0 + vp) * self.t_acc + vp * (min(t, self.t_acc + self.t_cruise) - self.t_acc)
        u = max(t - self.t_acc - self.t_cruise, 0.0)
        return d + vp * u - 0.5 * a * u * u


def trapezoid(length: float, v0: float, vn: float, v1: float, a: float) -> SpeedProfile:
    v1 = min(v1, vn, math.sqrt(v0 * v0 + 2 * a * length))
    v0 = min(v0, vn)
    vp = max(min(vn, math.sqrt(a * length + 0.5 * (v0 * v0 + v1 * v1))), v0, v1)
    cruise = max(length - (2 * vp * vp - v0 * v0 - v1 * v1) / (2 * a), 0.0)
    return SpeedProfile(v0, vp, v1, a, (vp - v0) / a, cruise / vp, (vp - v1) / a)


def junction_speed(
    u_in: tuple[float, ...], u_out: tuple[float, ...], a: float, deviation: float
) -> float:
    cos_theta = -sum(p * q for p, q in zip(u_in, u_out, strict=True))
    if cos_theta > 0.999999:
        return 0.0
    if cos_theta < -0.999999:
        return math.inf
    sin_half = math.sqrt(0.5 * (1.0 - cos_theta))
    return math.sqrt(a * deviation * sin_half / (1.0 - sin_half))


def plan_entry_speeds(
    lengths: list[float], accels: list[float], limits: list[float], v_start: float
) -> list[float]:
    """GRBL's reverse and forward passes: entry speeds, then the last block's exit (0)."""
    v = [*limits, 0.0]
    v[0] = min(v[0], v_start)
    for i in range(len(lengths) - 1, -1, -1):
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2.0 * accels[i] * lengths[i]))
    for i in range(len(lengths)):
        v[i + 1] = min(v[i + 1], math.sqrt(v[i] ** 2 + 2.0 * accels[i] * lengths[i]))
    return v


@dataclass
class PBlock:
    target: tuple[float, float, float]
    unit: tuple[float, float, float]
    length: float
    speed: float  # nominal, mm/s
    accel: float
    junction: float  # max entry speed
    line: int
    counts: bool = True  # False: the deceleration of a hold, whose block goes on after it


class Machine:
    """Planner queue and execution clock (machine time in s, positions in mm)."""

    def __init__(self, capacity: int, accel: float, max_rate: float, scale: float) -> None:
        self.capacity, self.accel, self.max_rate, self.scale = capacity, accel, max_rate, scale
        self.queue: deque[PBlock] = deque()
        self.head: tuple[PBlock, SpeedProfile, float, tuple[float, float, float]] | None = None
        self.pos = (0.0, 0.0, 0.0)  # end of the last executed block
        self.planned = (0.0, 0.0, 0.0)  # end of the last planned block
        self.last_unit: tuple[float, float, float] | None = None
        self.exit_speed = 0.0
        self.wall0, self.offset = time.monotonic(), 0.0
        self.frozen: float | None = None
        self.stopping = False  # a feed hold decelerates the running block
        self.executed = self.max_blocks = 0

    def now(self) -> float:
        if self.frozen is not None:
            return self.frozen
        return (time.monotonic() - self.wall0) * self.scale - self.offset

    def hold(self) -> None:
        if self.frozen is not None or self.stopping:
            return
        now = self.now()
        if self.head is None:
            self.frozen = now
            return
        b, prof, start, p0 = self.head
        s, v = prof.distance_at(now - start), prof.speed_at(now - start)
        here = tuple(p + u * s for p, u in zip(p0, b.unit, strict=True))
        remaining = b.length - s
        stop = min(v * v / (2.0 * b.accel), remaining) if v > 1e-9 else 0.0
        rest = remaining - stop
        if rest > 1e-9:  # what is left of the block after the stop, run from rest on resume
            self.queue.appendleft(PBlock(b.target, b.unit, rest, b.speed, b.accel, 0.0, b.line))
        if stop <= 1e-12:
            self.pos, self.head, self.frozen = here, None, now
            self.exit_speed, self.last_unit = 0.0, None
            return
        end = tuple(p + u * stop for p, u in zip(here, b.unit, strict=True))
        t_dec = 2.0 * stop / v
        decel = PBlock(end, b.unit, stop, v, b.accel, v, b.line, counts=rest <= 1e-9)
        self.head = (decel, SpeedProfile(v, v, 0.0, v / t_dec, 0.0, 0.0, t_dec), now, here)
        self.stopping = True

    def resume(self) -> None:
        if self.stopping:
            return  # GRBL takes cycle start only once the hold is complete
        if self.frozen is not None:
            self.offset = (time.monotonic() - self.wall0) * self.scale - self.frozen
            self.frozen = None
            if self.head is None and self.queue:
                self._start(self.now())

    @property
    def moving(self) -> bool:
        return self.head is not None and self.frozen is None

    def speed(self) -> float:
        """mm/s now."""
        if not self.moving or self.head is None:
            return 0.0
        return self.head[1].speed_at(self.now() - self.head[2])

    @property
    def blocks(self) -> int:
        return len(self.queue) + (self.head is not None)

    @property
    def free(self) -> int:
        return self.capacity - self.blocks

    @property
    def idle(self) -> bool:
        return self.head is None and not self.queue

    def push(self, target: tuple[float, float, float], feed: float, line: int) -> None:
        d = [t - p for t, p in zip(target, self.planned, strict=True)]
        length = math.sqrt(sum(c * c for c in d))
        if length < 1e-9:
            return
        unit = (d[0] / length, d[1] / length, d[2] / length)
        speed = min(feed, self.max_rate)
        accel = self.accel / max(abs(c) for c in unit)
        junction = 0.0
        if self.last_unit is not None and not self.idle:
            junction = min(speed, junction_speed(self.last_unit, unit, self.accel, 0.01))
        self.queue.append(PBlock(target, unit, length, speed, accel, junction, line))
        self.planned, self.last_unit = target, unit
        self.max_blocks = max(self.max_blocks, self.blocks)
        if self.head is None:
            self._start(self.now())

    def _start(self, at: float) -> None:
        blocks = list(self.queue)
        entry = plan_entry_speeds(
            [b.length for b in blocks],
            [b.accel for b in blocks],
            [min(b.junction, b.speed) for b in blocks],
            self.exit_speed,
        )
        b = self.queue.popleft()
        prof = trapezoid(b.length, entry[0], b.speed, entry[1], b.accel)
        self.head = (b, prof, at, self.pos)
        self.exit_speed = prof.v_exit

    def advance(self) -> None:
        now = self.now()
        while self.head is not None and self.head[2] + self.head[1].duration <= now:
            b, prof, start, _ = self.head
            self.pos, self.head = b.target, None
            self.executed += b.counts
            if self.stopping:  # the hold is complete: the machine stands, the queue waits
                self.stopping, self.frozen = False, start + prof.duration
                self.exit_speed, self.last_unit = 0.0, None
                return
            if self.queue:
                self._start(start + prof.duration)
            else:
                self.exit_speed, self.last_unit = 0.0, None

    def next_event_wall(self) -> float | None:
        if self.head is None or self.frozen is not None:
            return None
        end = self.head[2] + self.head[1].duration
        return self.wall0 + (end + self.offset) / self.scale

    def position(self) -> tuple[float, float, float]:
        if self.head is None:
            return self.pos
        b, prof, start, p0 = self.head
        s = prof.distance_at(self.now() - start)
        return (p0[0] + b.unit[0] * s, p0[1] + b.unit[1] * s, p0[2] + b.unit[2] * s)

    def clear(self) -> None:
        self.pos = self.planned = self.position()
        self.queue.clear()
        self.head, self.last_unit, self.exit_speed = None, None, 0.0
        self.stopping = False

    def lines(self) -> set[int]:
        """The program lines (the parser's count) whose blocks wait in the planner or run."""
        return {b.line for b in self.queue} | ({self.head[0].line} if self.head else set())
