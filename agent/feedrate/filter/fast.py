"""A fast path in front of the G-code parser for the lines that make up most of a long program.

CAM output of a million lines is almost all straight feed moves written one way:
`G1 X12.345 Y-6.7 Z0.25 F1500`, or the same without the G1 (modal) or the F. Lexing and
modal bookkeeping in agent.feedrate.gcode.parser cost ~15 us per such line, most of the filter's
budget. `FastModalState.apply` recognises exactly these lines (one regular expression: an
optional G0/G1/G00/G01, X, Y, Z in that order, an optional F, single spaces, nothing else) in
a state where their meaning is plain (G94, motion mode G0 or G1, a feed already set when one
is needed) and builds the same Block the parser would; every other line goes to a real
ModalState, which is first brought up to date (position and modal state) through its public
constructor. Numbers obey the lexer's limits (agent.feedrate.gcode.lex.number_problem): a line
over them goes to the parser, which refuses it. tests/feedrate/test_gcode_fast_parser.py checks
the two paths give equal Blocks, or the same error, on random lines.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from agent.feedrate.gcode.blocks import (
    Block,
    DistanceMode,
    FeedMode,
    Modal,
    Motion,
    ParserOptions,
    Units,
)
from agent.feedrate.gcode.lex import number_problem
from agent.feedrate.gcode.parser import ModalState
from agent.feedrate.geometry.primitives import Vec3

# Numbers as [digits and dots]: float() rejects what the lexer would ("1.2.3", "."), and such
# a line then takes the slow path, which reports it. Simpler than the lexer's number pattern,
# and a third faster.
_FAST = re.compile(
    r"(?:G0?([01]) ?)?(?:X([-+]?[\d.]+) ?)?(?:Y([-+]?[\d.]+) ?)?(?:Z([-+]?[\d.]+) ?)?"
    r"(?:F([\d.]+))?\r?\n?",
    re.ASCII,
)
_MOTIONS = (Motion.RAPID, Motion.LINEAR)


class FastModalState:
    """ModalState.apply with a fast path for plain straight moves (see the module docstring)."""

    __slots__ = ("_changed", "_modal", "_options", "_pos", "_slow", "_stale", "_unknown", "source")

    def __init__(
        self,
        *,
        position_mm: Vec3 = (0.0, 0.0, 0.0),
        options: ParserOptions | None = None,
        source: str | None = None,
    ) -> None:
        self._options = options
        self.source = source
        self._slow = ModalState(position_mm=position_mm, options=options, source=source)
        self._pos: Vec3 = self._slow.position_mm
        self._modal: Modal = self._slow.modal
        # The parser's frame-change bookkeeping (ModalState.unknown_axes, .frame_changed).
        self._unknown: frozenset[str] = frozenset()
        self._changed = False
        self._stale = False  # the slow state is behind the fast one

    @property
    def position_mm(self) -> Vec3:
        return self._pos

    @property
    def modal(self) -> Modal:
        return self._modal

    def apply(self, text: str, line_no: int) -> Block:
        modal = self._modal
        m = _FAST.fullmatch(text)
        if m is not None and modal.feed_mode is FeedMode.UNITS_PER_MIN:
            word, gx, gy, gz, f = m.groups()
            if gx is not None or gy is not None or gz is not None:
                motion = modal.motion if word is None else _MOTIONS[word == "1"]
                if motion is Motion.RAPID or motion is Motion.LINEAR:
                    try:
                        block = self._fast(
                            text, line_no, modal, motion, word is not None, gx, gy, gz, f
                        )
                    except ValueError:  # not a number after all: the parser says why
                        block = None
                    if block is not None:
                        return block
        if self._stale:
            old = self._slow
            self._slow = ModalState(
                position_mm=self._pos,
                modal=self._modal,
                options=self._options,
                source=self.source,
                unknown_axes=self._unknown,
                frame_changed=self._changed,
            )
            self._slow.spindle_rpm, self._slow.tool = old.spindle_rpm, old.tool
            self._stale = False
        slow = self._slow
        block = slow.apply(text, line_no)
        self._pos, self._modal = slow.position_mm, slow.modal
        self._unknown, self._changed = slow.unknown_axes, slow.frame_changed
        return block

    def _fast(
        self,
        text: str,
        line_no: int,
        modal: Modal,
        motion: Motion,
        explicit: bool,
        gx: str | None,
        gy: str | None,
        gz: str | None,
        f: str | None,
    ) -> Block | None:
        # The lexer's limits on every number (length, magnitude): a line over them goes to the
        # parser, which refuses it with the lexer's message.
        if (
            (gx is not None and number_problem("X", gx) is not None)
            or (gy is not None and number_problem("Y", gy) is not None)
            or (gz is not None and number_problem("Z", gz) is not None)
            or (f is not None and number_problem("F", f) is not None)
        ):
            return None
        inch = modal.units is Units.INCH
        feed = modal.feed_mm_s
        if f is not None:
            feed = float(f) * 25.4 / 60.0 if inch else float(f) / 60.0
        if motion is Motion.LINEAR and not (feed is not None and feed > 0.0):
            return None  # the parser's error message
        start = self._pos
        x, y, z = start
        if modal.distance is DistanceMode.ABSOLUTE:
            if gx is not None:
                x = float(gx) * 25.4 if inch else float(gx)
            if gy is not None:
                y = float(gy) * 25.4 if inch else float(gy)
            if gz is not None:
                z = float(gz) * 25.4 if inch else float(gz)
        else:
            if gx is not None:
                x += float(gx) * 25.4 if inch else float(gx)
            if gy is not None:
                y += float(gy) * 25.4 if inch else float(gy)
            if gz is not None:
                z += float(gz) * 25.4 if inch else float(gz)
        end = (x, y, z)
        path_known = True
        if self._unknown or self._changed:  # as ModalState does after a frame change
            named = (
                frozenset(c for c, w in zip("XYZ", (gx, gy, gz), strict=True) if w is not None)
                if modal.distance is DistanceMode.ABSOLUTE
                else frozenset()
            )
            path_known = not self._changed and self._unknown.isdisjoint(named)
            self._unknown = self._unknown - named
            self._changed = False
        if motion is not modal.motion or feed != modal.feed_mm_s:
            modal = replace(modal, motion=motion, feed_mm_s=feed)
            self._modal = modal
        self._pos = end
        self._stale = True
        return Block(
            line_no,
            text,
            modal,
            motion,
            start,
            end,
            math.dist(start, end),
            feed if motion is Motion.LINEAR else None,
            None,
            None,
            explicit,
            path_known=path_known,
        )
