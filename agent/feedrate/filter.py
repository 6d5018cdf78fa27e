"""The online feedrate-modulation filter: G-code in, G-code out (issue 3 part 4, paper 001).

`FeedrateFilter.feed(line)` takes one program line and returns the output text it can write
so far; `finish()` returns the rest. Lines are held back only as long as a modulation window
might still reach them, and never more than the machine's lookahead (lines, or seconds of motion
at the programmed feeds): memory is bounded whatever the program's length.

What is modulated. Feed moves (G1/G2/G3, G94 or G93) form *runs*: consecutive moves at one feed,
with nothing between them but blank or comment lines. Any other line (rapid, dwell, M/S/T
word, modal change, feed change) ends a run, and is written as it is. At every turning point
inside a run where a machine axis with backlash reverses (agent.feedrate.geometry), the feed is
modulated over [-t*, t*] with the profile of eq. 26 (agent.feedrate.filter_window): the blocks
the window touches are replaced by straight G1 segments through points on the path, each with
its own F (G94) or its exact duration (G93, when the machine allows it or the program is in
G93). Every other line passes through byte-identical (agent.feedrate.gcode_emit restores the
program's modal F and G94 after replaced blocks, or renumbers for Marlin).

Path tolerance. Every output point lies on the input path (block ends exactly; segment ends on
their primitive), a chord of an arc sags at most eps minus the coordinate rounding, and
rounding moves a written point by at most half a unit of the last decimal on each axis, so the
output path is within eps of the input path. Retrograde windows (ratio < 0, only when allowed)
travel back and forth along the same path: each back-and-forth pass is split at every block
end it crosses. A block a window touches is replaced whole; on an arc the part outside the
window is written as chords at the nominal feed.

Where the geometry leaves no room (windows of neighbouring turning points, the start of a run,
the lookahead) t* shrinks; below min_half_window_s the turning point is left alone and counted.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from agent.feedrate.filter_fast import FastModalState
from agent.feedrate.filter_window import (
    AXIS_INDEX,
    Geometry,
    Span,
    UnitShape,
    Window,
    WindowPlanner,
    build_window,
    chord_step_mm,
    circumradius,
    end_step_mm,
    unit_shape,
)
from agent.feedrate.gcode import Block, DistanceMode, FeedMode, Motion, Units
from agent.feedrate.gcode_emit import GcodeEmitter
from agent.feedrate.gcode_lex import GcodeError, lex_line
from agent.feedrate.geometry import (
    ArcSegment,
    LineSegment,
    TurningPoint,
    TurningPointTracker,
    Vec3,
    osculating_extent,
)
from agent.feedrate.machine import MachineSettings, rounding_mm

_MOVE, _NEUTRAL, _BREAK = 0, 1, 2
_TINY_MM = 1e-9
_SMOOTH_RAD = 1e-6  # tangents this close at a vertex: a smooth turning point
_POLYLINE_RAD = math.radians(10.0)  # a chorded curve turns less than this at each vertex
_SAME_CIRCLE_REL = 1e-9


@dataclass(frozen=True)
class FilterStats:
    lines_in: int
    lines_out: int
    turning_points: int  # where a modulated axis reverses inside a feed run
    modulated: int  # windows written
    too_short: int  # no room for a window of min_half_window_s
    at_run_start: int  # reversal at the first move of a run (after a rapid, an F change...)
    forced: int  # windows decided early because the lookahead was full
    added_time_s: float  # sum over windows of the time beyond the nominal feed's
    replaced_blocks: int  # input lines written as segments (all others pass through)
    max_pending_lines: int
    planner: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Item:
    """One input line waiting to be written."""

    __slots__ = ("block", "duration_s", "kind", "prim", "s0", "s1")

    def __init__(self, block: Block, kind: int, s0: float, s1: float, prim: Any,
                 duration_s: float) -> None:
        self.block, self.kind, self.s0, self.s1, self.prim = block, kind, s0, s1, prim
        self.duration_s = duration_s


class _Pending:
    """An undecided turning point."""

    __slots__ = ("axes", "feed_mm_s", "geom", "seq", "tp")

    def __init__(self, tp: TurningPoint, feed_mm_s: float, geom: Geometry,
                 axes: tuple[str, ...], seq: int) -> None:
        self.tp, self.feed_mm_s, self.geom, self.axes, self.seq = tp, feed_mm_s, geom, axes, seq


class FeedrateFilter:
    """Streaming filter for one program (see the module docstring)."""

    def __init__(self, machine: MachineSettings, *, source: str | None = None,
                 start_mm: Vec3 = (0.0, 0.0, 0.0)) -> None:
        self.machine = machine
        mod = machine.modulation
        self._shape: UnitShape = unit_shape(mod.ratio, mod.degree, mod.segments, mod.retrograde)
        # Axes without backlash need no modulation.
        self._axes = frozenset(n for n, a in machine.axes.items() if a.backlash_motor_rad > 0)
        self._planner = WindowPlanner(machine.axis_params(), self._shape, policy=mod.policy,
                                      cap_s=mod.half_window_s)
        self._reach_per_feed = mod.half_window_s * self._shape.excursion * (1.0 + 1e-9)
        self._look_lines = machine.lookahead.lines
        self._look_s = machine.lookahead.seconds
        self._state = FastModalState(position_mm=start_mm, source=source)
        self._tracker = TurningPointTracker()
        self._emitter = GcodeEmitter(machine.emitter_dialect, inverse_time=machine.inverse_time)
        self._dialect = machine.emitter_dialect
        self._source = source
        self._n = 0
        self._items: list[_Item] = []
        self._base = 0  # sequence number of self._items[self._head]... minus head
        self._head = 0
        self._pending_s = 0.0
        self._frontier = 0.0
        self._run_feed: float | None = None
        self._run_mode: FeedMode | None = None
        self._run_start = 0.0
        self._last_move: _Item | None = None
        self._tps: deque[_Pending] = deque()
        self._windows: deque[Window] = deque()
        self._inside: tuple[Window, int] | None = None
        self._emitted_s = 0.0  # path position written so far
        self._region_hi = -math.inf
        self._out: list[str] = []
        self._origin: list[int] = []  # the program line each output chunk comes from
        self.origins: list[int] = []  # of the chunks feed() or finish() returned last
        self._chord_eps_by_units: dict[Units, float] = {}
        # statistics
        self._lines_out = 0
        self._turning = self._modulated = self._too_short = self._at_start = self._forced = 0
        self._added_s = 0.0
        self._replaced = 0
        self._max_pending = 0

    # -- public -------------------------------------------------------------------------------

    @property
    def reversals_modulated(self) -> int:
        return self._modulated

    @property
    def stats(self) -> FilterStats:
        return FilterStats(self._n, self._lines_out, self._turning, self._modulated,
                           self._too_short, self._at_start, self._forced, self._added_s,
                           self._replaced, self._max_pending, self._planner.stats.to_dict())

    def feed(self, text: str) -> list[str]:
        """Take one input line (its terminator included); return the output ready so far."""
        self._n += 1
        block = self._state.apply(text, self._n)
        motion = block.motion
        if motion is not None and block.length_mm > 0.0:
            self._move(block, motion)
        elif block.skipped or (motion is None and block.dwell_s is None
                               and _word_free(text, self._n)):
            self._append(_Item(block, _NEUTRAL, self._frontier, self._frontier, None, 0.0))
            if self._run_feed is None:
                self._emit_ready()
            elif len(self._items) - self._head > self.machine.lookahead.lines + 1:
                self._advance()  # comment lines count against the lookahead too
        else:
            self._end_run()
            self._append(_Item(block, _BREAK, self._frontier, self._frontier, None, 0.0))
            self._emit_ready()
        out, self._out = self._out, []
        self.origins, self._origin = self._origin, []
        return out

    def finish(self) -> list[str]:
        """Everything still held back, and the lines that restore the program's modal state."""
        self._end_run()
        self._emit_ready()
        tail = self._emitter.flush()
        if tail:
            self._write(tail, self._n)
        out, self._out = self._out, []
        self.origins, self._origin = self._origin, []
        return out

    # -- input --------------------------------------------------------------------------------

    def _append(self, item: _Item) -> None:
        self._items.append(item)

    def _move(self, block: Block, motion: Motion) -> None:
        arc = block.arc
        prim = LineSegment(block.start_mm, block.end_mm) if arc is None else arc
        # The tracker's arc length is the frontier: both add each positive length in turn.
        s0 = self._frontier
        tps = self._tracker.feed(prim)
        s1 = s0 + prim.length
        self._frontier = s1
        feed = block.feed_mm_s
        if motion is Motion.RAPID or feed is None:
            self._end_run()
            self._append(_Item(block, _BREAK, s0, s1, prim, 0.0))
            self._emit_ready()
            return
        run = self._run_feed
        if (run is None or block.modal.feed_mode is not self._run_mode
                or abs(feed - run) > 1e-9 * run):
            self._end_run()
            self._run_feed, self._run_mode, self._run_start = feed, block.modal.feed_mode, s0
            self._last_move = None
        duration = block.length_mm / feed
        item = _Item(block, _MOVE, s0, s1, prim, duration)
        items = self._items
        items.append(item)
        self._pending_s += duration
        if tps:
            self._turning_points(tps, item, feed, len(items) - 1 + self._base)
        self._last_move = item
        # The lookahead (the line just read never counts: a block longer than the lookahead
        # is still held until the next one shows whether its end is a turning point).
        head = self._head
        n = len(items)
        if (self._tps or n - head > self._look_lines + 1
                or self._pending_s - duration > self._look_s):
            self._advance()
            return
        if self._windows or self._inside is not None:
            self._emit_ready()
            return
        # The common case, inline: no window near, write what no future window can reach.
        if n - head > self._max_pending:
            self._max_pending = n - head
        limit = s1 - feed * self._reach_per_feed
        emitter, out, origin = self._emitter, self._out, self._origin
        while head < n:
            it = items[head]
            if it.kind == _MOVE:
                if it.s1 > limit:
                    break
                self._pending_s -= it.duration_s
                self._emitted_s = it.s1
            head += 1
            blk = it.block
            text = emitter.passthrough(blk)
            out.append(text)
            origin.append(blk.line_no)
            self._lines_out += 1 if text is blk.text else text.count("\n")
        self._head = head
        if head >= 128 and head * 2 >= n:
            del items[:head]
            self._base += head
            self._head = 0

    def _turning_points(self, tps: list[TurningPoint], item: _Item, feed: float,
                        seq: int) -> None:
        for tp in tps:
            axes = tuple(a for a in tp.axes if a in self._axes)
            if not axes:
                continue
            self._turning += 1
            if tp.s <= self._run_start + _TINY_MM:
                self._at_start += 1
                continue
            self._tps.append(_Pending(tp, feed, self._geometry(tp, item), axes, seq))
        size = len(self._items) - self._head
        if size > self._max_pending:
            self._max_pending = size

    def _geometry(self, tp: TurningPoint, item: _Item) -> Geometry:
        t_in, t_out = tp.tangent_in, tp.tangent_out
        prim = item.prim
        if tp.kind != "vertex":
            kappa = prim.frenet(tp.s_local).kappa
            return Geometry("smooth", 1.0 / abs(kappa), t_in, t_out, True)
        cos = max(-1.0, min(1.0, sum(a * b for a, b in zip(t_in, t_out, strict=True))))
        angle = math.acos(cos)
        prev = self._last_move
        if prev is not None:
            if angle <= _SMOOTH_RAD:
                arcs = [p for p in (prev.prim, prim) if isinstance(p, ArcSegment)]
                if arcs:
                    # On one circle the osculating circle is the path; at a line-arc junction
                    # the arc's radius is the best estimate, with no circle to stay on.
                    same = len(arcs) == 2 and _same_circle(prev, prim)
                    radius = min(1.0 / abs(p.frenet(0.0).kappa) for p in arcs)
                    return Geometry("smooth", radius, t_in, t_out, same)
            elif (angle <= _POLYLINE_RAD and isinstance(prev.prim, LineSegment)
                  and isinstance(prim, LineSegment)):
                r = circumradius(prev.block.start_mm, tp.point, item.block.end_mm)
                if math.isfinite(r):
                    return Geometry("smooth", r, t_in, t_out, False)
        return Geometry("corner", math.inf, t_in, t_out, False)

    # -- decisions ----------------------------------------------------------------------------

    def _reach(self, feed_mm_s: float) -> float:
        return feed_mm_s * self._reach_per_feed

    def _advance(self) -> None:
        tps = self._tps
        while tps and self._frontier - tps[0].tp.s >= self._reach(tps[0].feed_mm_s):
            self._decide(tps.popleft(), self._frontier)
        lookahead = self.machine.lookahead
        newest = self._items[-1]
        while (len(self._items) - self._head - 1 > lookahead.lines
               or self._pending_s - newest.duration_s > lookahead.seconds):
            if not self._force_front():
                break
        self._emit_ready()

    def _force_front(self) -> bool:
        """Lookahead full: decide what may touch the oldest item and write it."""
        if self._head >= len(self._items) - 1:
            return False
        item = self._items[self._head]
        # Turning points on this item lose their back room once it is written: decide them
        # now, with what is known ahead. Those further on keep the room between this item's
        # end and themselves (windows never reach back past what is written).
        while self._tps and self._tps[0].tp.s <= item.s1 + _TINY_MM:
            self._forced += 1
            self._decide(self._tps.popleft(), self._frontier)
        self._emit_one(item)
        return True

    def _end_run(self) -> None:
        while self._tps:
            self._decide(self._tps.popleft(), self._frontier, run_end=True)
        self._run_feed = None
        self._run_mode = None
        self._last_move = None
        self._emit_ready(everything=True)

    def _decide(self, p: _Pending, fwd_limit: float, *, run_end: bool = False) -> None:
        tp, feed = p.tp, p.feed_mm_s
        back_limit = max(self._run_start, self._emitted_s, self._region_hi)
        if self._tps:
            fwd_limit = min(fwd_limit, 0.5 * (tp.s + self._tps[0].tp.s))
        elif not run_end and fwd_limit - tp.s < self._reach(feed):
            # Decided early (lookahead full): the next turning point may be right at the
            # frontier, so leave it half of what lies between.
            fwd_limit = 0.5 * (tp.s + fwd_limit)
        room = min(tp.s - back_limit, fwd_limit - tp.s)
        if p.geom.osculating:
            room = min(room, self._osculating_room(p))
        mod = self.machine.modulation
        t_geo = room / (feed * self._shape.excursion) if room > 0.0 else 0.0
        t_star = min(self._planner.needed_s(p.axes, feed, p.geom), t_geo)
        if not t_star >= mod.min_half_window_s:
            self._too_short += 1
            return
        reach = self._shape.excursion * feed * t_star
        spans = self._spans(tp.s - reach, tp.s + reach, p.seq)
        chord_eps = self._chord_eps(self._items[p.seq - self._base])
        window = build_window(self._shape, tp.s, feed, t_star, spans, chord_eps, p.axes)
        self._windows.append(window)
        self._region_hi = window.region_hi
        self._modulated += 1
        self._added_s += self._shape.time_penalty * t_star

    def _spans(self, lo: float, hi: float, seq: int) -> list[Span]:
        items, base = self._items, self._base
        i = seq - base
        while i > self._head and items[i].s0 > lo:
            i -= 1
        out: list[Span] = []
        while i < len(items):
            it = items[i]
            if it.kind == _MOVE and it.s1 > lo:
                if it.s0 >= hi:
                    break
                out.append(Span(it.s0, it.s1, it.prim, it.block.start_mm, it.block.end_mm))
            i += 1
        return out

    def _osculating_room(self, p: _Pending) -> float:
        """Half-length of the stretch about the turning point on arcs of the same circle."""
        items, base = self._items, self._base
        i = p.seq - base
        ref = items[i].prim
        if not isinstance(ref, ArcSegment):
            return math.inf
        lo = hi = i
        while lo - 1 >= self._head and _same_circle(items[lo - 1], ref):
            lo -= 1
        while hi + 1 < len(items) and _same_circle(items[hi + 1], ref):
            hi += 1
        # Eq. 6 within the primitive: infinite on a circular arc, finite on a helix (torsion).
        f = ref.frenet(min(max(p.tp.s - items[i].s0, 0.0), ref.length))
        extent = osculating_extent(f.dkappa_ds, f.d2kappa_ds2, self.machine.eps_mm,
                                   kappa=f.kappa, torsion=f.torsion)
        return min(p.tp.s - items[lo].s0, items[hi].s1 - p.tp.s, extent)

    def _chord_eps(self, item: _Item) -> float:
        """How far a chord may sag: eps less what rounding the written coordinates moves."""
        units = item.block.modal.units
        eps = self._chord_eps_by_units.get(units)
        if eps is None:
            eps = self.machine.eps_mm - rounding_mm(self._dialect, inch=units is Units.INCH)
            if eps < 0.1 * self.machine.eps_mm:
                raise GcodeError(item.block.line_no, item.block.text,
                                 f"eps_m {self.machine.eps_m:g} is too small for the rounding of "
                                 f"{units.name.lower()} coordinates in dialect "
                                 f"{self._dialect.name}", self._source)
            self._chord_eps_by_units[units] = eps
        return eps

    # -- output -------------------------------------------------------------------------------

    def _write(self, text: str, line_no: int) -> None:
        self._out.append(text)
        self._origin.append(line_no)
        self._lines_out += text.count("\n")

    def _safe_until(self) -> float:
        if self._run_feed is None:
            return math.inf
        limit = self._frontier - self._reach(self._run_feed)
        if self._tps:
            first = self._tps[0]
            limit = min(limit, first.tp.s - self._reach(first.feed_mm_s))
        return limit

    def _emit_ready(self, everything: bool = False) -> None:
        items = self._items
        head = self._head
        n = len(items)
        if n - head > self._max_pending:
            self._max_pending = n - head
        if everything or self._run_feed is None:
            limit = math.inf
        else:
            limit = self._frontier - self._run_feed * self._reach_per_feed
            if self._tps:
                first = self._tps[0]
                limit = min(limit, first.tp.s - self._reach(first.feed_mm_s))
        while head < n:
            item = items[head]
            if item.kind == _MOVE:
                if item.s1 > limit:
                    break
                if self._inside is None and (not self._windows
                                             or self._windows[0].s_entry >= item.s1 - _TINY_MM):
                    # The common case, inline: nothing to modulate in this block.
                    self._head = head = head + 1
                    self._pending_s -= item.duration_s
                    text = self._emitter.passthrough(item.block)
                    self._out.append(text)
                    self._origin.append(item.block.line_no)
                    self._lines_out += 1 if text is item.block.text else text.count("\n")
                    self._emitted_s = item.s1
                    continue
            self._head = head = head + 1
            self._emit_one_unchecked(item)
        if head >= 128 and head * 2 >= n:  # drop what is written; pending stays small
            del items[:head]
            self._base += head
            self._head = 0

    def _emit_one(self, item: _Item) -> None:
        assert self._items[self._head] is item
        self._head += 1
        self._emit_one_unchecked(item)

    def _emit_one_unchecked(self, item: _Item) -> None:
        if item.kind != _MOVE:
            self._write(self._emitter.passthrough(item.block), item.block.line_no)
            if item.kind == _BREAK and item.prim is not None:
                self._emitted_s = item.s1
            return
        self._pending_s -= item.duration_s
        if self._inside is None and (not self._windows
                                     or self._windows[0].s_entry >= item.s1 - _TINY_MM):
            self._write(self._emitter.passthrough(item.block), item.block.line_no)
        else:
            self._replace(item)
        self._emitted_s = item.s1

    def _replace(self, item: _Item) -> None:
        self._replaced += 1
        block = item.block
        feed = block.feed_mm_s
        assert feed is not None
        target = item.s1
        chain = _Chain(block.start_mm)
        cursor = item.s0
        while True:
            if self._inside is not None:
                w, k = self._inside
                kt = w.last.get(target, -1)
                if kt > k:
                    chain.window(w, k, kt)
                    if kt == len(w.s) - 1:
                        self._leave_window()
                    else:
                        self._inside = (w, kt)
                    break
                chain.window(w, k, len(w.s) - 1)
                cursor = w.s_exit
                self._leave_window()
                continue
            nxt = self._windows[0] if self._windows else None
            if nxt is not None and nxt.s_entry < target - _TINY_MM:
                self._nominal(chain, item, cursor, nxt.s_entry, feed)
                self._inside = (nxt, 0)
                cursor = nxt.s_entry
                continue
            self._nominal(chain, item, cursor, target, feed)
            break
        points, dts = chain.finish(block.end_mm)
        units = block.modal.units
        points, written, dts = _as_written(
            block.start_mm, points, dts, units, self._dialect.coordinate_decimals(units),
            block.modal.distance is DistanceMode.INCREMENTAL)
        if block.modal.feed_mode is FeedMode.INVERSE_TIME or self.machine.inverse_time:
            self._write(self._emitter.replace(block, points, durations_s=dts), block.line_no)
        else:
            # Feeds from the positions the controller really takes (the written, rounded
            # coordinates): on a segment of a few micrometres rounding is a large part of it.
            feeds = [max(math.dist(a, b), 1e-12) / dt for a, b, dt in
                     zip([block.start_mm, *written[:-1]], written, dts, strict=True)]
            self._write(self._emitter.replace(block, points, feeds_mm_s=feeds), block.line_no)

    def _leave_window(self) -> None:
        self._inside = None
        self._windows.popleft()

    def _nominal(self, chain: _Chain, item: _Item, s_from: float, s_to: float,
                 feed: float) -> None:
        """Forward along the item's primitive at the nominal feed (chords on arcs)."""
        span = s_to - s_from
        if span <= _TINY_MM:
            return
        prim = item.prim
        step = chord_step_mm(prim, self._chord_eps(item))
        n = max(1, math.ceil(span / step)) if math.isfinite(step) else 1
        for k in range(1, n + 1):
            s = s_from + span * k / n
            if k < n or s_to < item.s1:
                chain.add(prim.point(s - item.s0), span / n / feed)
                continue
            if end_step_mm(prim) > 1e-9:  # the arc's last point, then the step to the end
                chain.add(prim.point(prim.length), 0.999 * span / n / feed)
                chain.add(item.block.end_mm, 0.001 * span / n / feed)
            else:
                chain.add(item.block.end_mm, span / n / feed)


class _Chain:
    """Points and durations of one replaced block; zero-length steps give their time to the
    next step, so every output segment has a length and a duration."""

    __slots__ = ("carry", "dts", "last", "points")

    def __init__(self, start: Vec3) -> None:
        self.points: list[Vec3] = []
        self.dts: list[float] = []
        self.carry = 0.0
        self.last = start

    def add(self, point: Vec3, dt: float) -> None:
        if math.dist(point, self.last) <= _TINY_MM:
            self.carry += dt
            return
        self.points.append(point)
        # Two samples at one instant are nanometres apart (a block end found by inversion next
        # to a uniform sample): give the step a microsecond rather than an infinite feed.
        self.dts.append(max(dt + self.carry, 1e-6))
        self.carry = 0.0
        self.last = point

    def window(self, w: Window, k0: int, k1: int) -> None:
        t, pts = w.t, w.points
        for k in range(k0 + 1, k1 + 1):
            self.add(pts[k], t[k] - t[k - 1])

    def finish(self, end: Vec3) -> tuple[list[Vec3], list[float]]:
        if not self.points:
            self.points.append(end)
            self.dts.append(max(self.carry, 1e-9))
        else:
            self.points[-1] = end
            self.dts[-1] += self.carry
        return self.points, self.dts


def _same_circle(item: _Item, ref: ArcSegment) -> bool:
    prim = item.prim
    if item.kind != _MOVE or not isinstance(prim, ArcSegment):
        return False
    tol = _SAME_CIRCLE_REL * max(1.0, ref.radius) + 1e-9
    return (prim.plane is ref.plane and prim.clockwise == ref.clockwise
            and abs(prim.radius - ref.radius) <= tol
            and math.dist(prim.centre, ref.centre) <= tol + abs(prim.start[ref.plane.value[2]]
                                                                - ref.start[ref.plane.value[2]]))


def _as_written(start: Vec3, points: list[Vec3], dts: list[float], units: Units,
               decimals: int, incremental: bool) -> tuple[list[Vec3], list[Vec3], list[float]]:
    """The points that survive rounding, where the controller goes for each, and their
    durations. A point that would move no axis is dropped and its time given to the next, so
    neither a feed is lost nor a G4 dwell (a planner stop) written.

    Absolute coordinates: an axis moves to the rounded coordinate when that differs from the
    rounded previous one (the emitter then writes it), else stays. Incremental: the emitter
    carries each rounding into the next increment, so the controller stays within half a
    unit of the point; a point is kept only when it is 1.5 units from the last one on some
    axis, so no increment rounds to zero (the emitter's carry is not built for that case).
    """
    scale = units.mm_per_unit
    unit = 10.0 ** -decimals * scale
    kept: list[Vec3] = []
    written: list[Vec3] = []
    times: list[float] = []
    prev = start
    prev_r = (round(start[0] / scale, decimals), round(start[1] / scale, decimals),
              round(start[2] / scale, decimals))
    carry = 0.0
    last = len(points) - 1
    for k, p in enumerate(points):
        if incremental:
            r = prev_r if max(abs(p[0] - prev[0]), abs(p[1] - prev[1]),
                              abs(p[2] - prev[2])) < 1.5 * unit else (p[0], p[1], p[2])
        else:
            r = (round(p[0] / scale, decimals), round(p[1] / scale, decimals),
                 round(p[2] / scale, decimals))
        if r == prev_r:
            if k < last:
                carry += dts[k]
                continue
            if kept:  # the end is too close to the last point kept: it takes its place
                kept[-1] = written[-1] = p
                times[-1] += dts[k] + carry
                break
        if k == last or incremental:
            q = p  # a block's end is the program's own, written as given
        else:
            q = (prev[0] if r[0] == prev_r[0] else r[0] * scale,
                 prev[1] if r[1] == prev_r[1] else r[1] * scale,
                 prev[2] if r[2] == prev_r[2] else r[2] * scale)
        kept.append(p)
        written.append(q)
        times.append(dts[k] + carry)
        carry = 0.0
        prev, prev_r = q, r
    return kept, written, times


def _word_free(text: str, line_no: int) -> bool:
    """True for blank, comment-only and number-only lines (nothing for the controller to do)."""
    lx = lex_line(text, line_no)
    return not (lx.g or lx.m or lx.values)


def filter_lines(lines: Iterable[str], machine: MachineSettings, *, source: str | None = None,
                 start_mm: Vec3 = (0.0, 0.0, 0.0),
                 filt: FeedrateFilter | None = None) -> Iterator[str]:
    """Output text of a streamed program, chunk by chunk (each chunk one or more lines)."""
    f = filt if filt is not None else FeedrateFilter(machine, source=source, start_mm=start_mm)
    for line in lines:
        yield from f.feed(line)
    yield from f.finish()


def filtered_lines(lines: Iterable[str], machine: MachineSettings, *,
                   source: str | None = None, filt: FeedrateFilter | None = None
                   ) -> Iterator[str]:
    """Like filter_lines, one output line per item (for a controller stream)."""
    for line, _ in filtered_lines_with_origin(lines, machine, source=source, filt=filt):
        yield line


def filtered_lines_with_origin(lines: Iterable[str], machine: MachineSettings, *,
                               source: str | None = None, filt: FeedrateFilter | None = None
                               ) -> Iterator[tuple[str, int]]:
    """(output line, the program line it comes from), one output line at a time."""
    f = filt if filt is not None else FeedrateFilter(machine, source=source)

    def split(chunks: list[str]) -> Iterator[tuple[str, int]]:
        for chunk, origin in zip(chunks, f.origins, strict=True):
            if chunk.count("\n") <= 1:
                yield chunk, origin
            else:
                for line in chunk.splitlines(keepends=True):
                    yield line, origin

    for line in lines:
        yield from split(f.feed(line))
    yield from split(f.finish())


__all__ = ["AXIS_INDEX", "FeedrateFilter", "FilterStats", "filter_lines", "filtered_lines",
           "filtered_lines_with_origin"]
