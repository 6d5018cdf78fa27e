"""Writing the output: lines passed through, and blocks replaced by a window's segments.

`BlockWriter` owns the emitter (agent.feedrate.gcode.emit), the decided windows not yet
written, and the output buffer. A block no window touches is passed through; a block a window
touches is replaced by the part of the window's sample sequence that ends at the block's end
(the last time the sequence reaches it: with retrograde motion it may pass it several times)
and, outside windows, by its nominal-feed piece (one segment on a line, chords on an arc).
"""

from __future__ import annotations

import math
from collections import deque

from agent.feedrate.filter.chain import TINY_MM, SegmentChain, as_written
from agent.feedrate.filter.window import Window, chord_step_mm, end_step_mm
from agent.feedrate.gcode.blocks import Block, DistanceMode, FeedMode, Units
from agent.feedrate.gcode.emit import GcodeEmitter
from agent.feedrate.gcode.lex import GcodeError
from agent.feedrate.geometry.primitives import PathPrimitive, Vec3
from agent.feedrate.machine import MachineSettings, rounding_mm


class BlockWriter:
    """The output side of the filter (see the module docstring)."""

    def __init__(self, machine: MachineSettings, source: str | None) -> None:
        self.machine = machine
        self.source = source
        self.dialect = machine.emitter_dialect
        self.emitter = GcodeEmitter(self.dialect, inverse_time=machine.inverse_time)
        self.windows: deque[Window] = deque()
        self.inside: tuple[Window, int] | None = None
        self.out: list[str] = []
        self.origin: list[int] = []  # the program line each output chunk comes from
        self.lines_out = 0
        self.replaced = 0
        # Where the controller is after the last replaced block (its end as written, rounded
        # to the dialect's digits); None after a move passed through as the program wrote it.
        self.controller_mm: Vec3 | None = None
        self._chord_eps_by_mode: dict[tuple[Units, DistanceMode], float] = {}

    def quiet(self, s1: float) -> bool:
        """No window touches a block that ends at path position s1 (it passes through)."""
        return self.inside is None and (not self.windows or self.windows[0].s_entry >= s1 - TINY_MM)

    def passthrough(self, block: Block) -> None:
        if block.motion is not None:
            self.controller_mm = None
        text = self.emitter.passthrough(block)
        self.out.append(text)
        self.origin.append(block.line_no)
        self.lines_out += 1 if text is block.text else text.count("\n")

    def take(self) -> tuple[list[str], list[int]]:
        out, origin = self.out, self.origin
        self.out, self.origin = [], []
        return out, origin

    def flush(self, line_no: int) -> None:
        """The lines that restore the program's modal state at its end."""
        tail = self.emitter.flush()
        if tail:
            self.write(tail, line_no)

    def write(self, text: str, line_no: int) -> None:
        self.out.append(text)
        self.origin.append(line_no)
        self.lines_out += text.count("\n")

    def rounding(self, block: Block) -> float:
        """The most that writing moves a point of this block (mm)."""
        return rounding_mm(self.dialect, inch=block.modal.units is Units.INCH)

    def chord_eps(self, block: Block) -> float:
        """How far a chord may sag: eps less what rounding the written coordinates moves a
        point, and in G91 less the 1.5 units a point may be left out by (see as_written)."""
        modal = block.modal
        key = (modal.units, modal.distance)
        eps = self._chord_eps_by_mode.get(key)
        if eps is None:
            inch = modal.units is Units.INCH
            eps = self.machine.eps_mm - rounding_mm(self.dialect, inch=inch)
            if modal.distance is DistanceMode.INCREMENTAL:
                unit = 10.0 ** -self.dialect.coordinate_decimals(modal.units)
                eps -= 1.5 * math.sqrt(3.0) * unit * modal.units.mm_per_unit
            if eps < 0.1 * self.machine.eps_mm:
                mode = "incremental " if modal.distance is DistanceMode.INCREMENTAL else ""
                raise GcodeError(
                    block.line_no,
                    block.text,
                    f"eps_m {self.machine.eps_m:g} is too small for the rounding of "
                    f"{mode}{modal.units.name.lower()} coordinates in dialect "
                    f"{self.dialect.name}",
                    self.source,
                )
            self._chord_eps_by_mode[key] = eps
        return eps

    def replace(self, block: Block, prim: PathPrimitive, s0: float, s1: float) -> None:
        self.replaced += 1
        feed = block.feed_mm_s
        if feed is None:  # the filter replaces feed moves only
            raise GcodeError(block.line_no, block.text, "a replaced move needs a feed", self.source)
        target = s1
        chain = SegmentChain(block.start_mm)
        cursor = s0
        while True:
            if self.inside is not None:
                w, k = self.inside
                kt = w.last.get(target, -1)
                if kt > k:
                    chain.window(w, k, kt)
                    if kt == len(w.s) - 1:
                        self._leave_window()
                    else:
                        self.inside = (w, kt)
                    break
                chain.window(w, k, len(w.s) - 1)
                cursor = w.s_exit
                self._leave_window()
                continue
            nxt = self.windows[0] if self.windows else None
            if nxt is not None and nxt.s_entry < target - TINY_MM:
                self._nominal(chain, block, prim, s0, s1, cursor, nxt.s_entry, feed)
                self.inside = (nxt, 0)
                cursor = nxt.s_entry
                continue
            self._nominal(chain, block, prim, s0, s1, cursor, target, feed)
            break
        points, dts, inner = chain.finish(block.end_mm)
        units = block.modal.units
        at = block.start_mm if self.controller_mm is None else self.controller_mm
        points, written, dts = as_written(
            at,
            points,
            dts,
            inner,
            units,
            self.dialect.coordinate_decimals(units),
            block.modal.distance is DistanceMode.INCREMENTAL,
        )
        self.controller_mm = written[-1]
        if block.modal.feed_mode is FeedMode.INVERSE_TIME or self.machine.inverse_time:
            self.write(self.emitter.replace(block, points, durations_s=dts), block.line_no)
        else:
            # Feeds from the positions the controller really takes (the written, rounded
            # coordinates): on a segment of a few micrometres rounding is a large part of it.
            feeds = [
                max(math.dist(a, b), 1e-12) / dt
                for a, b, dt in zip([at, *written[:-1]], written, dts, strict=True)
            ]
            self.write(self.emitter.replace(block, points, feeds_mm_s=feeds), block.line_no)

    def _leave_window(self) -> None:
        self.inside = None
        self.windows.popleft()

    def _nominal(
        self,
        chain: SegmentChain,
        block: Block,
        prim: PathPrimitive,
        s0: float,
        s1: float,
        s_from: float,
        s_to: float,
        feed: float,
    ) -> None:
        """Forward along the item's primitive at the nominal feed (chords on arcs)."""
        span = s_to - s_from
        if span <= TINY_MM:
            return
        step = chord_step_mm(prim, self.chord_eps(block), self.rounding(block))
        n = max(1, math.ceil(span / step)) if math.isfinite(step) else 1
        for k in range(1, n + 1):
            s = s_from + span * k / n
            if k < n or s_to < s1:
                chain.add(prim.point(s - s0), span / n / feed, not math.isfinite(step))
                continue
            if end_step_mm(prim) > 1e-9:  # the arc's last point, then the step to the end
                chain.add(prim.point(prim.length), 0.999 * span / n / feed)
                chain.add(block.end_mm, 0.001 * span / n / feed)
            else:
                chain.add(block.end_mm, span / n / feed)
