"""The online feedrate-modulation filter: G-code in, G-code out (Farouki & Swett 2022).

`FeedrateFilter.feed(line)` takes one program line and returns the output text it can write
so far (`origins` names the program line each chunk comes from); `finish()` returns the rest.
Lines are held back only as long as a modulation window might still reach them, and never
more than the machine's lookahead besides the line just read (lines - comment lines count -
or seconds of motion at the programmed feeds): memory is bounded whatever the program's
length. When the lookahead is full the oldest line is written; a turning point on it is
decided first with what is known ahead, and later windows never reach back past it.

What is modulated. Feed moves (G1/G2/G3, G94 or G93) form *runs*: consecutive moves at one feed,
with nothing between them but blank or comment lines. Any other line (rapid, dwell, M/S/T
word, modal change, feed change) ends a run, and is written as it is. A frame change the filter
does not model (work offset G54-G59, G10 L2/L20, G92, tool length G43/G49; see
agent.feedrate.gcode.parser) moves the program on the machine by an amount only the controller
knows: it ends the run, and so does every move whose start the program has not fixed again
since (`Block.path_known`); such moves are written byte for byte, no window (nor G93) spans
them, and turning points are looked for afresh after them. At every turning point
inside a run where a machine axis with backlash reverses (agent.feedrate.geometry.turning_points),
the feed is modulated over [-t*, t*] with the profile of eq. 26 (agent.feedrate.filter.window):
the blocks the window touches are replaced by straight G1 segments through points on the path,
each with its own F (G94) or its exact duration (G93, when the machine allows it or the program
is in G93). Every other line passes through byte-identical (agent.feedrate.gcode.emit restores
the program's modal F and G94 after replaced blocks, or renumbers for Marlin). A reversal at the
first move of a run (after a rapid or an F change) has no room before it and is left alone;
so are the reversals of G93 programs whose every line has its own F (each is a run).

Timing. Segment durations follow the profile exactly: in G93 they are written as such; in G94
each F is the written segment's length over its duration. Segments inside a straight block
shorter than 10 units of the last written digit, and segments that rounding would make
zero-length, are merged into the next (their time with them): no speed spike from rounding,
no G4 dwell (a planner stop) in the middle of a window.

Path tolerance. Every output point lies on the input path (block ends exactly; segment ends on
their primitive; an arc whose end is off its circle keeps its last straight step), a chord of
an arc sags at most eps minus the coordinate rounding (and, in G91, minus the 1.5 units by
which a point may be merged), and rounding moves a written point by at most half a unit of the
last decimal on each axis, so the output path is within eps of the input path. Retrograde
windows (ratio < 0, only when allowed) travel back and forth along the same path: each pass is
split at every block end it crosses. A block a window touches is replaced whole; on an arc the
part outside the window is written as chords at the nominal feed.

Where the geometry leaves no room (windows of neighbouring turning points, the start of a run,
the lookahead) t* shrinks; below min_half_window_s the turning point is left alone and counted.

Speed: straight feed moves in plain form take agent.feedrate.filter.fast's fast path past the
parser; the common line costs ~10 us here, a window ~0.1 ms plus ~50 us per replaced block
(bench/bench_feedrate.py). Held lines: agent.feedrate.filter.held; whole programs:
agent.feedrate.filter.program.

One module over 400 lines on purpose: FeedrateFilter is one state machine whose held lines and
open windows every step reads; its helpers already live in held.py, plan.py, window.py and write.py.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import Any

from agent.feedrate.filter.chain import TINY_MM
from agent.feedrate.filter.fast import FastModalState
from agent.feedrate.filter.held import (
    BREAK,
    MOVE,
    NEUTRAL,
    HeldLine,
    PendingTurningPoint,
    is_word_free,
    osculating_room,
    turning_point_geometry,
    window_spans,
)
from agent.feedrate.filter.plan import WindowPlanner
from agent.feedrate.filter.window import UnitShape, build_window, unit_shape
from agent.feedrate.filter.write import BlockWriter
from agent.feedrate.gcode.blocks import Block, FeedMode, Motion
from agent.feedrate.geometry.arcs import ArcSegment
from agent.feedrate.geometry.primitives import LineSegment, Vec3
from agent.feedrate.geometry.turning_points import TurningPoint, TurningPointTracker
from agent.feedrate.machine import MachineSettings


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


class FeedrateFilter:
    """Streaming filter for one program (see the module docstring)."""

    def __init__(
        self,
        machine: MachineSettings,
        *,
        source: str | None = None,
        start_mm: Vec3 = (0.0, 0.0, 0.0),
    ) -> None:
        self.machine = machine
        mod = machine.modulation
        self._shape: UnitShape = unit_shape(mod.ratio, mod.degree, mod.segments, mod.retrograde)
        # Axes without backlash need no modulation.
        self._axes = frozenset(n for n, a in machine.axes.items() if a.backlash_motor_rad > 0)
        self._planner = WindowPlanner(
            machine.axis_params(), self._shape, policy=mod.policy, cap_s=mod.half_window_s
        )
        self._reach_per_feed = mod.half_window_s * self._shape.excursion * (1.0 + 1e-9)
        self._look_lines = machine.lookahead.lines
        self._look_s = machine.lookahead.seconds
        self._state = FastModalState(position_mm=start_mm, source=source)
        self._tracker = TurningPointTracker()
        self._tracker_s0 = 0.0  # the frontier where the tracker started (frame changes)
        self._writer = BlockWriter(machine, source)
        self._source = source
        self._n = 0
        self._items: list[HeldLine] = []
        self._base = 0  # sequence number of self._items[0] (written items are dropped)
        self._head = 0
        self._pending_s = 0.0
        self._frontier = 0.0
        self._run_feed: float | None = None
        self._run_mode: FeedMode | None = None
        self._run_start = 0.0
        self._last_move: HeldLine | None = None
        self._tps: deque[PendingTurningPoint] = deque()
        self._emitted_s = 0.0  # path position written so far
        self._region_hi = -math.inf
        self.origins: list[int] = []  # of the chunks feed() or finish() returned last
        # statistics
        self._turning = self._modulated = self._too_short = self._at_start = self._forced = 0
        self._added_s = 0.0
        self._max_pending = 0

    # -- public -------------------------------------------------------------------------------

    @property
    def reversals_modulated(self) -> int:
        return self._modulated

    @property
    def stats(self) -> FilterStats:
        w = self._writer
        return FilterStats(
            self._n,
            w.lines_out,
            self._turning,
            self._modulated,
            self._too_short,
            self._at_start,
            self._forced,
            self._added_s,
            w.replaced,
            self._max_pending,
            self._planner.stats.to_dict(),
        )

    def feed(self, text: str) -> list[str]:
        """Take one input line (its terminator included); return the output ready so far."""
        self._n += 1
        block = self._state.apply(text, self._n)
        motion = block.motion
        if motion is not None and block.length_mm > 0.0:
            self._move(block, motion)
        elif block.skipped or (
            motion is None and block.dwell_s is None and is_word_free(text, self._n)
        ):
            self._append(HeldLine(block, NEUTRAL, self._frontier, self._frontier, None, 0.0))
            if self._run_feed is None:
                self._emit_ready()
            elif len(self._items) - self._head > self.machine.lookahead.lines + 1:
                self._advance()  # comment lines count against the lookahead too
        else:
            self._end_run()
            self._append(HeldLine(block, BREAK, self._frontier, self._frontier, None, 0.0))
            self._emit_ready()
        out, self.origins = self._writer.take()
        return out

    def finish(self) -> list[str]:
        """Everything still held back, and the lines that restore the program's modal state."""
        self._end_run()
        self._emit_ready()
        self._writer.flush(self._n)
        out, self.origins = self._writer.take()
        return out

    # -- input --------------------------------------------------------------------------------

    def _append(self, item: HeldLine) -> None:
        self._items.append(item)

    def _move(self, block: Block, motion: Motion) -> None:
        arc = block.arc
        prim = LineSegment(block.start_mm, block.end_mm) if arc is None else arc
        s0 = self._frontier
        if not block.path_known:
            self._unknown_move(block, prim, s0)
            return
        # The tracker's arc length plus where it started is the frontier: both add each
        # positive length in turn.
        tps = self._tracker.feed(prim)
        if tps and self._tracker_s0:
            tps = [replace(tp, s=tp.s + self._tracker_s0) for tp in tps]
        s1 = s0 + prim.length
        feed = block.feed_mm_s
        if motion is Motion.RAPID or feed is None:
            self._end_run()  # the run ends where this move starts: at the frontier so far
            self._frontier = s1
            self._append(HeldLine(block, BREAK, s0, s1, prim, 0.0))
            self._emit_ready()
            return
        run = self._run_feed
        if (
            run is None
            or block.modal.feed_mode is not self._run_mode
            or abs(feed - run) > 1e-9 * run
        ):
            self._end_run()
            self._run_feed, self._run_mode, self._run_start = feed, block.modal.feed_mode, s0
            self._last_move = None
        self._frontier = s1
        duration = block.length_mm / feed
        item = HeldLine(block, MOVE, s0, s1, prim, duration)
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
        if (
            self._tps
            or n - head > self._look_lines + 1
            or self._pending_s - duration > self._look_s
        ):
            self._advance()
            return
        writer = self._writer
        if writer.windows or writer.inside is not None:
            self._emit_ready()
            return
        # The common case, inline: no window near, write what no future window can reach.
        if n - head > self._max_pending:
            self._max_pending = n - head
        limit = s1 - feed * self._reach_per_feed
        emitter, out, origin = writer.emitter, writer.out, writer.origin
        while head < n:
            it = items[head]
            if it.kind == MOVE:
                if it.s1 > limit:
                    break
                self._pending_s -= it.duration_s
                self._emitted_s = it.s1
                writer.controller_mm = None  # at the program's own coordinates again
            head += 1
            blk = it.block
            text = emitter.passthrough(blk)
            out.append(text)
            origin.append(blk.line_no)
            writer.lines_out += 1 if text is blk.text else text.count("\n")
        self._head = head
        if head >= 128 and head * 2 >= n:
            del items[:head]
            self._base += head
            self._head = 0

    def _unknown_move(self, block: Block, prim: LineSegment | ArcSegment, s0: float) -> None:
        """A move after a frame change (G54-G59, G92, G10, G43...): the parser only guesses
        where it starts, so it is written as it is, no window reaches across it (the run ends
        before it; the emitter restores G94 and the program's F first), and turning points are
        looked for afresh after it (where it leaves each axis's backlash is not known)."""
        self._end_run()
        self._frontier = s1 = s0 + prim.length
        self._tracker = TurningPointTracker()
        self._tracker_s0 = s1
        self._append(HeldLine(block, BREAK, s0, s1, prim, 0.0))
        self._emit_ready()

    def _turning_points(
        self, tps: list[TurningPoint], item: HeldLine, feed: float, seq: int
    ) -> None:
        for tp in tps:
            axes = tuple(a for a in tp.axes if a in self._axes)
            if not axes:
                continue
            self._turning += 1
            if tp.s <= self._run_start + TINY_MM:
                self._at_start += 1
                continue
            geom = turning_point_geometry(tp, item, self._last_move)
            self._tps.append(PendingTurningPoint(tp, feed, geom, axes, seq))
        size = len(self._items) - self._head
        if size > self._max_pending:
            self._max_pending = size

    # -- decisions ----------------------------------------------------------------------------

    def _reach(self, feed_mm_s: float) -> float:
        return feed_mm_s * self._reach_per_feed

    def _advance(self) -> None:
        tps = self._tps
        while tps and self._frontier - tps[0].tp.s >= self._reach(tps[0].feed_mm_s):
            self._decide(tps.popleft(), self._frontier)
        lookahead = self.machine.lookahead
        newest = self._items[-1]
        while (
            len(self._items) - self._head - 1 > lookahead.lines
            or self._pending_s - newest.duration_s > lookahead.seconds
        ):
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
        while self._tps and self._tps[0].tp.s <= item.s1 + TINY_MM:
            self._forced += 1
            self._decide(self._tps.popleft(), self._frontier)
        self._emit_front()
        return True

    def _end_run(self) -> None:
        while self._tps:
            self._decide(self._tps.popleft(), self._frontier, run_end=True)
        self._run_feed = None
        self._run_mode = None
        self._last_move = None
        self._emit_ready(everything=True)

    def _decide(self, p: PendingTurningPoint, fwd_limit: float, *, run_end: bool = False) -> None:
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
            eps = self.machine.eps_mm
            room = min(room, osculating_room(self._items, self._head, self._base, p, eps))
        mod = self.machine.modulation
        t_geo = room / (feed * self._shape.excursion) if room > 0.0 else 0.0
        t_star = min(self._planner.needed_s(p.axes, feed, p.geom), t_geo)
        if not t_star >= mod.min_half_window_s:
            self._too_short += 1
            return
        reach = self._shape.excursion * feed * t_star
        spans = window_spans(self._items, self._head, self._base, tp.s - reach, tp.s + reach, p.seq)
        block = self._items[p.seq - self._base].block
        window = build_window(
            self._shape,
            tp.s,
            feed,
            t_star,
            spans,
            self._writer.chord_eps(block),
            p.axes,
            self._writer.rounding(block),
        )
        self._writer.windows.append(window)
        self._region_hi = window.region_hi
        self._modulated += 1
        self._added_s += self._shape.time_penalty * t_star

    # -- output -------------------------------------------------------------------------------

    def _emit_ready(self, everything: bool = False) -> None:
        items = self._items
        head = self._head
        n = len(items)
        if n - head > self._max_pending:
            self._max_pending = n - head
        # What no window still to be decided can reach: a reach short of the frontier, and
        # short of the first undecided turning point.
        if everything or self._run_feed is None:
            limit = math.inf
        else:
            limit = self._frontier - self._run_feed * self._reach_per_feed
            if self._tps:
                first = self._tps[0]
                limit = min(limit, first.tp.s - self._reach(first.feed_mm_s))
        while head < n:
            item = items[head]
            if item.kind == MOVE:
                if item.s1 > limit:
                    break
                if self._writer.quiet(item.s1):  # nothing to modulate in this block
                    self._head = head = head + 1
                    self._pending_s -= item.duration_s
                    self._writer.passthrough(item.block)
                    self._emitted_s = item.s1
                    continue
            self._head = head = head + 1
            self._emit_one_unchecked(item)
        if head >= 128 and head * 2 >= n:  # drop what is written; pending stays small
            del items[:head]
            self._base += head
            self._head = 0

    def _emit_front(self) -> None:
        item = self._items[self._head]
        self._head += 1
        self._emit_one_unchecked(item)

    def _emit_one_unchecked(self, item: HeldLine) -> None:
        if item.kind != MOVE:
            self._writer.passthrough(item.block)
            if item.kind == BREAK and item.prim is not None:
                self._emitted_s = item.s1
            return
        self._pending_s -= item.duration_s
        if self._writer.quiet(item.s1):
            self._writer.passthrough(item.block)
        else:
            self._writer.replace(item.block, item.prim, item.s0, item.s1)
        self._emitted_s = item.s1
