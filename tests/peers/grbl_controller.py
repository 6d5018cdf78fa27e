"""Peer: a GRBL 1.1 controller on the master side of a pty pair (tests and bench).

    python -P tests/peers/grbl_controller.py [--time-scale S] [--accel MM_S2] [--max-rate MM_MIN]
        [--planner-blocks 15] [--rx-buffer 128] [--soft-limits X,Y,Z] [--dnc]
        [--error-at K[:CODE]] [--alarm-at K[:CODE]] [--disconnect-at K] [--stall-at K]
        [--stats FILE]

It opens a pty pair (os.openpty), prints `READY <slave path>` and speaks GRBL 1.1 on the master:

* Receive path as serial.c: an "interrupt" reads every byte as soon as it arrives, takes out the
  real-time commands ('?' status report, '!' feed hold, '~' resume, 0x18 reset; bytes > 0x7f are
  dropped) and keeps the rest in a --rx-buffer (128) byte ring. More than that is a protocol
  violation: counted in the stats (rx_overflow_bytes), reported on stderr, the excess dropped as
  GRBL drops it. The parser moves bytes out of the ring into its 80-byte line buffer, so the
  ring holds only what it has not read yet; it stops reading while a line waits for the planner.
* Parser: G0-G3 (G17-G19 arcs, I/J/K or R), G4 P (seconds), G17-G21, G54-G59, G61, G64, G90,
  G91, G93, G94, F, S, T, N, M0-M9, M30, '$' commands ($X $$ $I $); GRBL's error codes: 1 no
  letter, 2 bad number, 4 negative F/S/T/P/N, 11 line over 79 characters, 20 unsupported
  code or letter, 21 modal group violation, 22 undefined feed, 25 repeated word, 26 no axis
  words, 28 G4 without P, 32/33/34/35 arc errors, 36 unused words, 9 while in alarm.
* Planner: --planner-blocks (15) blocks including the one executing. A line is answered `ok`
  once all its blocks (an arc: GRBL's chords at $12 = 0.002 mm tolerance) are in the planner; the
  parser blocks while the planner is full, as GRBL's mc_line does. G4, M0-M9 and M30 first wait
  for the planner to empty (GRBL's buffer synchronisation). Soft limits (|coordinate| > travel
  on any axis) raise ALARM:2 and a critical halt: nothing but a reset is heard after it.
* Execution clock: each block takes the time of a trapezoidal speed profile at --accel with
  GRBL's junction-deviation corner speeds ($11 = 0.01 mm; entry speeds planned over the queue
  when a block starts, the last queued block ending at rest; a running block's profile is
  fixed), --time-scale times faster than the wall clock. No step timing, no overrides.
  `?` answers `<Idle|MPos:..|Bf:free,rx|FS:..|Ov:100,100,100>` (no overrides are applied).
* --dnc: drip-feed mode, no `ok`; XOFF (0x13) when the ring holds >= 96 bytes, XON (0x11) once it
  holds < 64 (GRBL's ENABLE_XONXOFF watermarks). Bytes arriving in reads that started after an
  XOFF was sent are counted (max_bytes_after_xoff): what the sender failed to hold back.
* Faults at line K (K counts every line the parser reads, blank ones too): --error-at K[:N]
  answers error:N (default 20) instead of ok; --alarm-at K[:N] throws ALARM:N (default 1,
  critical); --disconnect-at K closes the pty and exits; --stall-at K stops reading and
  answering, keeping the pty open.
Stats (JSON) go to --stats at exit. The peer exits on SIGTERM, when stdin closes, or on a
disconnect fault.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import re
import select
import signal
import sys
import time
import tty
from collections import deque
from dataclasses import dataclass
from typing import Any

# The planner below mirrors GRBL's planner.c and agent.feedrate.executor's helpers; it is kept
# here, import-light, because importing the executor pulls scipy (seconds per peer start).


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


def junction_speed(u_in: tuple[float, ...], u_out: tuple[float, ...], a: float,
                   deviation: float) -> float:
    cos_theta = -sum(p * q for p, q in zip(u_in, u_out, strict=True))
    if cos_theta > 0.999999:
        return 0.0
    if cos_theta < -0.999999:
        return math.inf
    sin_half = math.sqrt(0.5 * (1.0 - cos_theta))
    return math.sqrt(a * deviation * sin_half / (1.0 - sin_half))


def plan_entry_speeds(lengths: list[float], accels: list[float], limits: list[float],
                      v_start: float) -> list[float]:
    """GRBL's reverse and forward passes: entry speeds, then the last block's exit (0)."""
    v = [*limits, 0.0]
    v[0] = min(v[0], v_start)
    for i in range(len(lengths) - 1, -1, -1):
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2.0 * accels[i] * lengths[i]))
    for i in range(len(lengths)):
        v[i + 1] = min(v[i + 1], math.sqrt(v[i] ** 2 + 2.0 * accels[i] * lengths[i]))
    return v

BANNER = b"\r\nGrbl 1.1h ['$' for help]\r\n"
SETTINGS = ("$11=0.010", "$12=0.002", "$110={rate:.3f}", "$120={accel:.3f}")
_WORD = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))")
_COMMENT = re.compile(rb"\([^)]*\)|;.*")
_LETTERS = frozenset("FGIJKMNPRSTXYZ")
_G_GROUPS = {0: "motion", 10: "motion", 20: "motion", 30: "motion", 40: "dwell", 170: "plane",
             180: "plane", 190: "plane", 200: "units", 210: "units", 540: "wcs", 550: "wcs",
             560: "wcs", 570: "wcs", 580: "wcs", 590: "wcs", 610: "path", 640: "path",
             900: "distance", 910: "distance", 930: "feed", 940: "feed"}
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
        entry = plan_entry_speeds([b.length for b in blocks], [b.accel for b in blocks],
                                  [min(b.junction, b.speed) for b in blocks], self.exit_speed)
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

    def _execute(self, words: dict[str, float], gs: dict[str, int],
                 ms: list[int]) -> tuple[str, Any]:
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
            points = self._arc(words, target, scale, plane, motion == 2) if motion >= 2 else [
                tuple(target)]
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

    def _arc(self, words: dict[str, float], target: list[float], scale: float, plane: int,
             cw: bool) -> list[tuple[float, ...]]:
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
            if abs(r - math.hypot(x - ca, y - cb)) > 0.005 and abs(
                    r - math.hypot(x - ca, y - cb)) > 0.001 * r:
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


class Grbl:
    """The serial protocol around parser and machine."""

    def __init__(self, args: argparse.Namespace, master: int) -> None:
        self.args, self.master = args, master
        travel = tuple(float(v) for v in args.soft_limits.split(",")) if args.soft_limits \
            else None
        self.parser = Parser(travel)  # type: ignore[arg-type]
        self.machine = Machine(args.planner_blocks, args.accel, args.max_rate / 60.0,
                               args.time_scale)
        self.rx, self.linebuf, self.tx = bytearray(), bytearray(), bytearray()
        self.pending: tuple[str, Any, int] | None = None  # what the current line waits for
        self.alarm: str | None = None  # None, "locked" or "critical"
        self.status_due = self.stalled = self.waiting = False
        self.xoff = self.xoff_counting = False
        self.stats: dict[str, Any] = dict.fromkeys(
            ("lines_received", "oks_sent", "errors_sent", "alarms_sent", "rx_max_bytes",
             "rx_overflow_bytes", "planner_full_waits", "status_reports", "resets", "xoff_sent",
             "xon_sent", "max_bytes_after_xoff", "bytes_received", "max_read_bytes"), 0)
        self.after_xoff = 0

    # -- receive interrupt
    def isr(self, data: bytes) -> None:
        self.stats["bytes_received"] += len(data)
        self.stats["max_read_bytes"] = max(self.stats["max_read_bytes"], len(data))
        if self.xoff_counting:
            self.after_xoff += len(data)
            self.stats["max_bytes_after_xoff"] = max(self.stats["max_bytes_after_xoff"],
                                                     self.after_xoff)
        if self.xoff:
            self.xoff_counting = True
        if not any(c in data for c in b"?!~\x18") and max(data) < 0x80:
            self.store(data)
            return
        for i, c in enumerate(data):
            if c == 0x3F:
                self.status_due = self.alarm != "critical"
            elif c == 0x21:
                self.machine.hold()
            elif c == 0x7E:
                self.machine.resume()
            elif c == 0x18:
                self.reset()
            elif c < 0x80:
                self.store(data[i:i + 1])

    def store(self, data: bytes) -> None:
        if self.alarm == "critical":
            return  # GRBL's critical-event loop reads nothing
        room = self.args.rx_buffer - len(self.rx)
        if len(data) > room:
            self.stats["rx_overflow_bytes"] += len(data) - room
            print(f"grbl peer: RX buffer overflow, {len(data) - room} bytes dropped at line "
                  f"{self.stats['lines_received'] + 1}", file=sys.stderr, flush=True)
            data = data[:max(room, 0)]
        self.rx += data
        self.stats["rx_max_bytes"] = max(self.stats["rx_max_bytes"], len(self.rx))
        if self.args.dnc and not self.xoff and len(self.rx) >= 96:
            self.xoff = True
            self.stats["xoff_sent"] += 1
            self.tx[:0] = b"\x13"
            self.flush()

    def reset(self) -> None:
        self.stats["resets"] += 1
        # A reset during a finished feed hold keeps the position (the machine stands still);
        # one while the axes move loses it: ALARM:3.
        moving = not self.machine.idle and self.machine.frozen is None
        self.machine.clear()
        self.machine.resume()
        self.rx.clear()
        self.linebuf.clear()
        self.pending, self.waiting = None, False
        self.parser.position = list(self.machine.pos)
        if moving:
            self.send("ALARM:3")
            self.alarm = "locked"
        elif self.alarm == "critical":
            self.alarm = "locked"
        self.tx += BANNER
        if self.alarm:
            self.send("[MSG:'$H'|'$X' to unlock]")

    # -- main loop
    def send(self, line: str) -> None:
        self.tx += line.encode() + b"\r\n"

    def answer(self, text: str) -> None:
        if text == "ok":
            self.stats["oks_sent"] += 1
            if self.args.dnc:
                return
        else:
            self.stats["errors_sent"] += 1
        self.send(text)

    def throw(self, code: int, critical: bool) -> None:
        self.stats["alarms_sent"] += 1
        self.machine.clear()
        self.pending = None
        self.send(f"ALARM:{code}")
        if critical:
            self.send("[MSG:Reset to continue]")
            self.rx.clear()
            self.linebuf.clear()
        self.alarm = "critical" if critical else "locked"

    def service(self) -> None:
        while self.alarm != "critical" and not self.stalled:
            if self.pending is not None and not self.drain():
                return
            line = self.take_line()
            if line is None:
                return
            self.handle(line)

    def drain(self) -> bool:
        assert self.pending is not None
        kind, what, line_no = self.pending
        m = self.machine
        if kind == "move":
            points, feed = what
            while points and m.free > 0:
                m.push(points.popleft(), feed, line_no)
            if points:
                if not self.waiting:
                    self.stats["planner_full_waits"] += 1
                    self.waiting = True
                return False
        elif kind == "sync":
            if not m.idle:
                return False
            if what:
                self.pending = ("dwell", m.now() + what, line_no)
                return False
        elif kind == "dwell" and m.now() < what:
            return False
        self.pending, self.waiting = None, False
        self.answer("ok")
        return True

    def take_line(self) -> bytes | None:
        ends = [i for i in (self.rx.find(b"\n"), self.rx.find(b"\r")) if i >= 0]
        if not ends:
            self.linebuf += self.rx
            self.rx.clear()
            line = None
        else:
            k = min(ends)
            line = bytes(self.linebuf + self.rx[:k])
            del self.rx[:k + 1]
            self.linebuf.clear()
        if self.xoff and len(self.rx) < 64:
            self.xoff = self.xoff_counting = False
            self.after_xoff = 0
            self.stats["xon_sent"] += 1
            self.tx += b"\x11"
        return line

    def handle(self, raw: bytes) -> None:
        self.stats["lines_received"] += 1
        k, a = self.stats["lines_received"], self.args
        if k in (a.stall_at, a.disconnect_at):
            self.flush()  # the answers to the lines before this one still go out
            self.stalled = True
            if k == a.disconnect_at:
                raise SystemExit(0)
            return
        if a.alarm_at and k == a.alarm_at[0]:
            self.throw(a.alarm_at[1], critical=True)
            return
        if a.error_at and k == a.error_at[0]:
            self.answer(f"error:{a.error_at[1]}")
            return
        line = b"".join(_COMMENT.sub(b"", raw).split()).upper().decode("ascii", "replace")
        if len(line) > 79:
            self.answer("error:11")
        elif not line:
            self.answer("ok")
        elif line.startswith("$"):
            self.system(line)
        elif self.alarm:
            self.answer("error:9")
        else:
            try:
                kind, what = self.parser.parse(line)
            except GrblError as exc:
                self.answer(f"error:{exc.code}")
                return
            if kind == "soft_limit":
                self.throw(2, critical=True)
            elif kind == "move":
                points, feed = what
                self.pending = ("move", (deque(points), feed), k)
            elif kind in ("sync", "dwell"):
                self.pending = ("sync", what if kind == "dwell" else 0.0, k)
            else:
                self.answer("ok")

    def system(self, line: str) -> None:
        if line == "$X" and self.alarm != "critical":
            self.alarm = None
            self.send("[MSG:Caution: Unlocked]")
        elif line == "$$":
            for s in SETTINGS:
                self.send(s.format(rate=self.args.max_rate, accel=self.args.accel))
        elif line == "$I":
            self.send("[VER:1.1h.20190825:]")
            self.send(f"[OPT:V,{self.args.planner_blocks},{self.args.rx_buffer}]")
        elif line != "$":
            self.answer("error:3")
            return
        self.answer("ok")

    def status(self) -> str:
        m = self.machine
        if self.alarm:
            state = "Alarm"
        elif m.frozen is not None:
            state = "Hold:0"
        elif m.idle and self.pending is None and not self.rx and not self.linebuf:
            state = "Idle"
        else:
            state = "Run"
        x, y, z = m.position()
        feed = m.head[1].v_peak * 60.0 if m.head else 0.0
        self.stats["status_reports"] += 1
        return (f"<{state}|MPos:{x:.3f},{y:.3f},{z:.3f}|Bf:{max(m.free, 0)},"
                f"{self.args.rx_buffer - len(self.rx)}|FS:{feed:.0f},0|Ov:100,100,100>")

    def flush(self) -> None:
        if self.tx:
            with contextlib.suppress(BlockingIOError):
                del self.tx[:os.write(self.master, self.tx)]

    def step(self) -> float:
        """Advance clock and parser, write what is due; the select timeout until the next event."""
        self.machine.advance()
        self.service()
        self.stats["planner_max_blocks"] = self.machine.max_blocks
        if self.status_due:
            self.status_due = False
            self.send(self.status())
        self.flush()
        wake = [w for w in (self.machine.next_event_wall(),
                            self._dwell_wall()) if w is not None]
        return max(0.0, min([*wake, time.monotonic() + 0.05]) - time.monotonic())

    def _dwell_wall(self) -> float | None:
        if self.pending and self.pending[0] == "dwell":
            m = self.machine
            return m.wall0 + (self.pending[1] + m.offset) / m.scale
        return None

    def final_stats(self) -> dict[str, Any]:
        return {**self.stats, "blocks_executed": self.machine.executed,
                "planner_max_blocks": self.machine.max_blocks,
                "machine_time_s": self.machine.now(), "position_mm": self.machine.position(),
                "alarm": self.alarm, "stalled": self.stalled,
                "held": self.machine.frozen is not None}


def _fault(text: str | None, default: int) -> tuple[int, int] | None:
    if text is None:
        return None
    line, _, code = text.partition(":")
    return int(line), int(code) if code else default


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--accel", type=float, default=500.0, help="mm/s^2 on each axis")
    p.add_argument("--max-rate", type=float, default=10_000.0, help="mm/min")
    p.add_argument("--planner-blocks", type=int, default=15)
    p.add_argument("--rx-buffer", type=int, default=128)
    p.add_argument("--soft-limits", default=None, help="X,Y,Z travel: |coordinate| <= travel")
    p.add_argument("--dnc", action="store_true")
    p.add_argument("--error-at", default=None)
    p.add_argument("--alarm-at", default=None)
    p.add_argument("--disconnect-at", type=int, default=None)
    p.add_argument("--stall-at", type=int, default=None)
    p.add_argument("--stats", default=None)
    args = p.parse_args(argv)
    args.error_at, args.alarm_at = _fault(args.error_at, 20), _fault(args.alarm_at, 1)
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    grbl = Grbl(args, master)
    os.write(master, BANNER)  # the boot banner, before anyone listens (pyserial's open drops it)

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    print(f"READY {os.ttyname(slave)}", flush=True)
    stdin = sys.stdin.fileno()
    try:
        while True:
            if grbl.stalled:
                if select.select([stdin], [], [])[0] and not os.read(stdin, 4096):
                    return 0
                continue
            timeout = grbl.step()
            ready, _, _ = select.select([master, stdin], [master] if grbl.tx else [], [],
                                        timeout)
            if master in ready:
                try:
                    data = os.read(master, 65536)
                except (BlockingIOError, InterruptedError):
                    data = b""
                if data:
                    grbl.isr(data)
            if stdin in ready and not os.read(stdin, 4096):
                return 0
    finally:
        if args.stats:
            with open(args.stats, "w") as f:
                json.dump(grbl.final_stats(), f)
        os.close(master)
        os.close(slave)


if __name__ == "__main__":
    sys.exit(main())
