"""The GRBL peer's machine: G-code parser, 15-block planner and execution clock
(firmware.py and serial_port.py speak the serial protocol around it).

The planner mirrors GRBL's planner.c and agent.feedrate.executor's helpers; it is kept here,
import-light, because importing the executor pulls scipy (seconds per peer start). Units: mm,
s, mm/s (feeds in mm/min only where G-code gives them).
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Any


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


_WORD = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))")
_LETTERS = frozenset("FGIJKMNPRSTXYZ")
_G_GROUPS = {
    0: "motion",
    10: "motion",
    20: "motion",
    30: "motion",
    40: "dwell",
    170: "plane",
    180: "plane",
    190: "plane",
    200: "units",
    210: "units",
    540: "wcs",
    550: "wcs",
    560: "wcs",
    570: "wcs",
    580: "wcs",
    590: "wcs",
    610: "path",
    640: "path",
    900: "distance",
    910: "distance",
    930: "feed",
    940: "feed",
}
_M_SYNC = frozenset({0, 1, 2, 3, 4, 5, 7, 8, 9, 30})
_PLANES = {170: (0, 1, 2), 180: (2, 0, 1), 190: (1, 2, 0)}
_OFFSETS = {170: ("I", "J"), 180: ("K", "I"), 190: ("J", "K")}


class GrblError(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


@dataclass
class PBlock:
    target: tuple[float, float, float]
    unit: tuple[float, float, float]
    length: float
    speed: float  # nominal, mm/s
    accel: float
    junction: float  # max entry speed
    line: int


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
        self.executed = self.max_blocks = 0

    def now(self) -> float:
        if self.frozen is not None:
            return self.frozen
        return (time.monotonic() - self.wall0) * self.scale - self.offset

    def hold(self) -> None:
        if self.frozen is None:
            self.frozen = self.now()

    def resume(self) -> None:
        if self.frozen is not None:
            self.offset = (time.monotonic() - self.wall0) * self.scale - self.frozen
            self.frozen = None

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
            self.executed += 1
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


class Parser:
    """GRBL's g-code parser for the subset above; returns what the line asks of the machine."""

    def __init__(self, travel: tuple[float, float, float] | None) -> None:
        self.motion, self.plane, self.scale, self.absolute = 0, 170, 1.0, True
        self.inverse, self.feed = False, 0.0  # mm/min
        self.position = [0.0, 0.0, 0.0]
        self.travel = travel

    def parse(self, line: str) -> tuple[str, Any]:
        words: dict[str, float] = {}
        gs: dict[str, int] = {}
        ms: list[int] = []
        pos = 0
        while pos < len(line):
            letter = line[pos]
            if not letter.isalpha():
                raise GrblError(1)
            m = _WORD.match(line, pos + 1)
            if m is None:
                raise GrblError(2)
            value, pos = float(m.group(1)), m.end()
            if letter not in _LETTERS:
                raise GrblError(20)
            if letter == "G":
                code = round(value * 10)
                group = _G_GROUPS.get(code)
                if group is None or abs(value * 10 - code) > 1e-6:
                    raise GrblError(20)
                if group in gs:
                    raise GrblError(21)
                gs[group] = code
            elif letter == "M":
                if value not in _M_SYNC:
                    raise GrblError(20)
                ms.append(int(value))
            elif letter in words:
                raise GrblError(25)
            else:
                if letter in "FNPST" and value < 0:
                    raise GrblError(4)
                if letter == "N" and value > 9_999_999:
                    raise GrblError(27)
                words[letter] = value
        return self._execute(words, gs, ms)

    def _execute(
        self, words: dict[str, float], gs: dict[str, int], ms: list[int]
    ) -> tuple[str, Any]:
        # A rejected line changes nothing: modal state is committed only at the end.
        plane = gs.get("plane", self.plane)
        scale = {200: 25.4, 210: 1.0}.get(gs.get("units", 0), self.scale)
        absolute = gs["distance"] == 900 if "distance" in gs else self.absolute
        inverse = gs["feed"] == 930 if "feed" in gs else self.inverse
        feed = self.feed if inverse == self.inverse else 0.0
        if "F" in words:
            feed = words["F"] if inverse else words["F"] * scale
        motion = gs["motion"] // 10 if "motion" in gs else self.motion
        for k in "NST":
            words.pop(k, None)
        axes = [k for k in "XYZ" if k in words]
        arc_words = [k for k in "IJKR" if k in words]
        kind: tuple[str, Any] = ("sync", None) if ms else ("none", None)
        if "dwell" in gs:
            if "P" not in words:
                raise GrblError(28)
            kind = ("dwell", words.pop("P"))
        if "P" in words or (arc_words and motion < 2):
            raise GrblError(36)
        target = list(self.position)
        if axes or ("motion" in gs and motion >= 2):
            if not axes:
                raise GrblError(26)  # G2/G3 need axis words; G0/G1 alone only set the mode
            for i, k in enumerate("XYZ"):
                if k in words:
                    target[i] = words[k] * scale + (0.0 if absolute else target[i])
            if motion and (feed <= 0 or (inverse and "F" not in words)):
                raise GrblError(22)
            points = (
                self._arc(words, target, scale, plane, motion == 2)
                if motion >= 2
                else [tuple(target)]
            )
            if self.travel and any(abs(c) > t for c, t in zip(target, self.travel, strict=True)):
                kind = ("soft_limit", None)
            else:
                speed = math.inf if motion == 0 else feed / 60.0
                if inverse and motion:  # G93: the whole line takes 60 / F seconds
                    path = [tuple(self.position), *points]
                    speed = sum(math.dist(a, b) for a, b in itertools.pairwise(path)) * feed / 60.0
                kind = ("move", (points, speed))
                self.position = target
        self.plane, self.scale, self.absolute, self.inverse = plane, scale, absolute, inverse
        self.feed, self.motion = feed, motion
        return kind

    def _arc(
        self, words: dict[str, float], target: list[float], scale: float, plane: int, cw: bool
    ) -> list[tuple[float, ...]]:
        a, b, n = _PLANES[plane]
        first, second = _OFFSETS[plane]
        start = self.position
        if "XYZ"[a] not in words and "XYZ"[b] not in words:
            raise GrblError(32)
        x, y = target[a] - start[a], target[b] - start[b]
        if "R" in words:
            r = words["R"] * scale
            h2 = 4.0 * r * r - x * x - y * y
            if x == 0 and y == 0:
                raise GrblError(33)
            if h2 < 0:
                raise GrblError(34)
            h = -math.sqrt(h2) / math.hypot(x, y)
            if cw:
                h = -h
            if r < 0:
                h, r = -h, -r
            ca, cb = 0.5 * (x - y * h), 0.5 * (y + x * h)
        else:
            if first not in words and second not in words:
                raise GrblError(35)
            ca, cb = words.get(first, 0.0) * scale, words.get(second, 0.0) * scale
            r = math.hypot(ca, cb)
            if (
                abs(r - math.hypot(x - ca, y - cb)) > 0.005
                and abs(r - math.hypot(x - ca, y - cb)) > 0.001 * r
            ):
                raise GrblError(33)
        ra, rb = -ca, -cb  # start relative to the centre
        ta, tb = x - ca, y - cb
        travel = math.atan2(ra * tb - rb * ta, ra * ta + rb * tb)
        if cw and travel >= -5e-7:
            travel -= 2 * math.pi
        elif not cw and travel <= 5e-7:
            travel += 2 * math.pi
        segments = max(1, int(abs(0.5 * travel * r) / math.sqrt(0.002 * (2 * r - 0.002))))
        out: list[tuple[float, ...]] = []
        for k in range(1, segments):
            th = travel * k / segments
            p = list(start)
            p[a] = start[a] + ca + ra * math.cos(th) - rb * math.sin(th)
            p[b] = start[b] + cb + ra * math.sin(th) + rb * math.cos(th)
            p[n] = start[n] + (target[n] - start[n]) * k / segments
            out.append(tuple(p))
        return [*out, tuple(target)]
