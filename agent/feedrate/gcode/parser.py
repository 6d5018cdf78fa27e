"""Streaming G-code parser: a modal state machine that turns each line into a frozen Block.

The RS-274 subset the feedrate filter reads: G0 G1 G2 G3 in G17/G18/G19, G90/G91, G20/G21,
G93/G94, G4 dwell, F S T and M words, comments, N line numbers, '*NN' checksums, block delete '/'.
Path-control modes (G61, G61.1, G64) pass through: they change how blocks are joined, not where.

Frame changes are read but not modelled: work offsets G54-G59 (G59.1-G59.3), G10 L2/L20 (P0-P9),
G92 (with axis words, which are then not a move), G92.1-G92.3, tool length G43 (H), G43.1 (axis
words) and G49; M2/M30 too (controllers return to G54 there). Each moves the program's coordinate
frame on the machine by values held in the controller, so after one the parser cannot know where
the program is: every axis becomes unknown, the first move after it has `path_known` False, and
in G90 so has every move naming an axis still unknown (naming it fixes it again). Such a move's
coordinates are the parser's guess, not the machine's path; in G91 the increments stay exact.
Anything else - other G codes, letters such as A/E/Q, missing or contradictory words - raises
GcodeError naming the line.

Positions are absolute program coordinates in mm (a G91 program starts at the state's initial
position, 0 by default), feeds in mm/s. Each Block keeps the original text, terminator included,
so lines outside modulation windows can be written back byte for byte.

Execution order within a line follows RS-274NGC: feed mode, F, S, T, dwell, plane, units,
distance mode, motion. F is read in the units in force after the line's G20/G21 (as GRBL does)
and kept in mm/s. Leaving or entering G93 makes the feed undefined (GRBL, LinuxCNC). M2/M30 reset
plane, distance and feed mode and select G1, as both controllers do.

The types the parser produces (Block, Modal, the modal codes) live in
agent.feedrate.gcode.blocks.

One module over 400 lines on purpose: ModalState is one state machine whose checks (modal
groups, words, frame changes, arcs) all read the same line's words and state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from agent.feedrate.gcode.blocks import (
    CANCEL_GCODES,
    HOME_GCODES,
    MM_PER_INCH,
    PATH_CONTROL_GCODES,
    PLANE_GCODE,
    PLANE_OFFSETS,
    Block,
    DistanceMode,
    FeedMode,
    Modal,
    Motion,
    ParserOptions,
    Units,
)
from agent.feedrate.gcode.lex import GcodeError, Lexed, lex_line
from agent.feedrate.geometry.arcs import ArcSegment, arc_centre_from_radius
from agent.feedrate.geometry.primitives import Plane, Vec3

# Modal groups of the G codes understood, by their integer tenths (G61.1 -> 611). G4, G10 and
# G92 are RS-274's non-modal group 0: one per line.
_MOTION, _PLANE, _UNITS, _DISTANCE, _FEED_MODE, _NON_MODAL, _PASSIVE, _COORDS, _TOOL = range(9)
_GROUP_NAMES = (
    "motion",
    "plane",
    "units",
    "distance",
    "feed mode",
    "non-modal",
    "passive",
    "coordinate system",
    "tool length",
)
_DWELL_G, _G10, _G92, _G43, _G43_1, _G28, _G30 = 40, 100, 920, 430, 431, 280, 300
_G_TABLE: dict[int, tuple[int, object]] = {
    0: (_MOTION, Motion.RAPID),
    10: (_MOTION, Motion.LINEAR),
    20: (_MOTION, Motion.CW),
    30: (_MOTION, Motion.CCW),
    40: (_NON_MODAL, None),
    100: (_NON_MODAL, None),
    **{code: (_NON_MODAL, None) for code in (920, 921, 922, 923)},
    **{code: (_COORDS, None) for code in (540, 550, 560, 570, 580, 590, 591, 592, 593)},
    **{code: (_TOOL, None) for code in (430, 431, 490)},
    170: (_PLANE, Plane.XY),
    180: (_PLANE, Plane.ZX),
    190: (_PLANE, Plane.YZ),
    200: (_UNITS, Units.INCH),
    210: (_UNITS, Units.MM),
    900: (_DISTANCE, DistanceMode.ABSOLUTE),
    910: (_DISTANCE, DistanceMode.INCREMENTAL),
    930: (_FEED_MODE, FeedMode.INVERSE_TIME),
    940: (_FEED_MODE, FeedMode.UNITS_PER_MIN),
    **{code: (_PASSIVE, None) for code in PATH_CONTROL_GCODES | CANCEL_GCODES},
    **{code: (_NON_MODAL, None) for code in HOME_GCODES},
}
_SCALE = {Units.MM: 1.0, Units.INCH: MM_PER_INCH}
_KNOWN_LETTERS = frozenset("XYZIJKRFSTPHL")
_PLAIN_LETTERS = frozenset("XYZIJKRF")
_ARC_LETTERS = frozenset("IJKR")
_ARC_MOTIONS = (Motion.CW, Motion.CCW)
_PROGRAM_END_M = frozenset({20, 300})
_AXES = frozenset("XYZ")
_NO_AXES: frozenset[str] = frozenset()


def _gname(tenths: int) -> str:
    return f"G{tenths // 10}" if tenths % 10 == 0 else f"G{tenths / 10:g}"


class ModalState:
    """Modal state machine of one program: `apply` one line after another.

    Keeps only the current state (units, distance mode, plane, motion mode, feed mode, feed in
    mm/s, position in mm, spindle speed, tool), so a program of any length streams in constant
    memory.
    """

    def __init__(
        self,
        *,
        position_mm: Vec3 = (0.0, 0.0, 0.0),
        modal: Modal | None = None,
        options: ParserOptions | None = None,
        source: str | None = None,
        unknown_axes: frozenset[str] = _NO_AXES,
        frame_changed: bool = False,
    ) -> None:
        self._modal = modal if modal is not None else Modal()
        self._pos: Vec3 = (float(position_mm[0]), float(position_mm[1]), float(position_mm[2]))
        self._options = options if options is not None else ParserOptions()
        self.source = source
        self.spindle_rpm: float | None = None
        self.tool: int | None = None
        # Axes whose program coordinate a frame change has made unknown (module docstring),
        # and whether no move has followed the last frame change yet.
        self._unknown = unknown_axes
        self._frame_changed = frame_changed

    @property
    def unknown_axes(self) -> frozenset[str]:
        """Axes whose program coordinate is unknown since a frame change (G54, G92, G43...)."""
        return self._unknown

    @property
    def frame_changed(self) -> bool:
        """A frame change has come and no move after it yet."""
        return self._frame_changed

    @property
    def modal(self) -> Modal:
        return self._modal

    @property
    def position_mm(self) -> Vec3:
        return self._pos

    @property
    def units(self) -> Units:
        return self._modal.units

    @property
    def distance(self) -> DistanceMode:
        return self._modal.distance

    @property
    def plane(self) -> Plane:
        return self._modal.plane

    @property
    def motion(self) -> Motion | None:
        return self._modal.motion

    @property
    def feed_mode(self) -> FeedMode:
        return self._modal.feed_mode

    @property
    def feed_mm_s(self) -> float | None:
        return self._modal.feed_mm_s

    def apply(self, text: str, line_no: int) -> Block:
        """Parse one line (terminator included or not) and advance the state."""
        lx = lex_line(text, line_no, self.source)
        pos = self._pos
        if lx.tape_mark or (lx.block_delete and self._options.block_delete):
            return Block(
                line_no, text, self._modal, None, pos, pos, 0.0,
                line_number=lx.line_number, has_checksum=lx.checksum is not None, skipped=True,
            )  # fmt: skip
        if not lx.g and not lx.m and not lx.values:
            return Block(
                line_no, text, self._modal, None, pos, pos, 0.0,
                line_number=lx.line_number, has_checksum=lx.checksum is not None,
            )  # fmt: skip
        return self._apply_words(lx, text, line_no)

    def _error(self, line_no: int, text: str, problem: str) -> GcodeError:
        return GcodeError(line_no, text, problem, self.source)

    def _apply_words(self, lx: Lexed, text: str, line_no: int) -> Block:
        old = self._modal
        motion_word: Motion | None = None
        plane, units, distance, feed_mode = old.plane, old.units, old.distance, old.feed_mode
        dwell = False
        frame_change = False
        seen: dict[int, int] = {}
        if lx.g:
            for code in lx.g:
                entry = _G_TABLE.get(code)
                if entry is None:
                    raise self._error(line_no, text, f"unsupported G code {_gname(code)}")
                group, value = entry
                if group in seen and group != _PASSIVE:
                    raise self._error(
                        line_no,
                        text,
                        f"two {_GROUP_NAMES[group]} codes in one line "
                        f"({_gname(seen[group])} and {_gname(code)})",
                    )
                seen[group] = code
                if group == _MOTION:
                    motion_word = value  # type: ignore[assignment]
                elif group == _PLANE:
                    plane = value  # type: ignore[assignment]
                elif group == _UNITS:
                    units = value  # type: ignore[assignment]
                elif group == _DISTANCE:
                    distance = value  # type: ignore[assignment]
                elif group == _FEED_MODE:
                    feed_mode = value  # type: ignore[assignment]
                elif group == _NON_MODAL:
                    if code == _DWELL_G:
                        dwell = True
                    else:
                        frame_change = True
                elif group in (_COORDS, _TOOL):
                    frame_change = True
        values = lx.values
        if not _KNOWN_LETTERS.issuperset(values):
            bad = next(letter for letter in values if letter not in _KNOWN_LETTERS)
            raise self._error(line_no, text, f"unknown word {bad}")
        non_modal = seen.get(_NON_MODAL)
        axis_words_taken = self._frame_words(lx, non_modal, motion_word, text, line_no)

        feed = old.feed_mm_s if feed_mode is old.feed_mode else None
        scale = _SCALE[units]
        inverse_f: float | None = None
        if "F" in values:
            f = values["F"]
            if f < 0.0:
                raise self._error(line_no, text, f"negative feed rate F{f:g}")
            if feed_mode is FeedMode.INVERSE_TIME:
                inverse_f = f
            else:
                feed = f * scale / 60.0
        dwell_s: float | None = None
        if not _PLAIN_LETTERS.issuperset(values) or dwell:
            dwell_s = self._other_words(values, dwell, non_modal == _G10, text, line_no)

        motion_mode = motion_word if motion_word is not None else old.motion
        has_axes = not axis_words_taken and ("X" in values or "Y" in values or "Z" in values)
        # A frame change acts before the line's motion (RS-274NGC order of execution).
        unknown = _AXES if frame_change else self._unknown
        frame_changed = frame_change or self._frame_changed
        path_known = True
        arc_words = not _ARC_LETTERS.isdisjoint(values)
        if motion_word in _ARC_MOTIONS and not (has_axes or arc_words):
            raise self._error(line_no, text, f"{_gname(motion_word.value * 10)} without I/J/K or R")

        pos = self._pos
        end = pos
        arc: ArcSegment | None = None
        block_motion: Motion | None = None
        block_feed: float | None = None
        length = 0.0
        if has_axes or arc_words:
            if motion_mode is None:
                raise self._error(line_no, text, "axis words without a motion mode (G0/G1/G2/G3)")
            if arc_words and motion_mode not in _ARC_MOTIONS:
                letters = "/".join(c for c in "IJKR" if c in values)
                raise self._error(line_no, text, f"{letters} without G2/G3")
            x, y, z = pos
            if distance is DistanceMode.ABSOLUTE:
                if "X" in values:
                    x = values["X"] * scale
                if "Y" in values:
                    y = values["Y"] * scale
                if "Z" in values:
                    z = values["Z"] * scale
            else:
                if "X" in values:
                    x += values["X"] * scale
                if "Y" in values:
                    y += values["Y"] * scale
                if "Z" in values:
                    z += values["Z"] * scale
            end = (x, y, z)
            if unknown or frame_changed:
                absolute = distance is DistanceMode.ABSOLUTE
                named = _AXES.intersection(values) if absolute else _NO_AXES
                path_known = not frame_changed and unknown.isdisjoint(named)
                unknown = unknown - named if named else unknown
                frame_changed = False
            if motion_mode in _ARC_MOTIONS:
                arc = self._arc(lx, text, line_no, pos, end, plane, scale, motion_mode)
                length = arc.length
            else:
                length = math.dist(pos, end)
            block_motion = motion_mode
            if motion_mode is not Motion.RAPID:
                if feed_mode is FeedMode.INVERSE_TIME:
                    if inverse_f is None or inverse_f <= 0.0:
                        raise self._error(
                            line_no, text, "inverse-time (G93) move without a positive F"
                        )
                    block_feed = length * inverse_f / 60.0
                else:
                    if feed is None:
                        raise self._error(line_no, text, "feed move without a feed rate (no F yet)")
                    if feed <= 0.0:
                        raise self._error(line_no, text, "feed rate is zero")
                    block_feed = feed

        if lx.m and not _PROGRAM_END_M.isdisjoint(lx.m):
            unknown, frame_changed = _AXES, True  # back to G54 (after this line's move)
            plane, distance = Plane.XY, DistanceMode.ABSOLUTE
            if feed_mode is not FeedMode.UNITS_PER_MIN:
                feed_mode, feed = FeedMode.UNITS_PER_MIN, None
            motion_mode = Motion.LINEAR
        if feed_mode is FeedMode.INVERSE_TIME:
            feed = None
        if (
            motion_mode is not old.motion
            or feed != old.feed_mm_s
            or units is not old.units
            or distance is not old.distance
            or plane is not old.plane
            or feed_mode is not old.feed_mode
        ):
            self._modal = Modal(units, distance, plane, motion_mode, feed_mode, feed)
        self._pos = end
        self._unknown, self._frame_changed = unknown, frame_changed
        return Block(
            line_no,
            text,
            self._modal,
            block_motion,
            pos,
            end,
            length,
            block_feed,
            inverse_f if block_feed is not None else None,  # a G0 is not timed by its F
            arc,
            motion_word is not None,
            lx.line_number,
            lx.checksum is not None,
            False,
            dwell_s,
            path_known,
        )

    def _frame_words(
        self, lx: Lexed, non_modal: int | None, motion_word: Motion | None, text: str, line_no: int
    ) -> bool:
        """Checks the H and L words and the words of G10, G92 and G43.1; True when the line's
        axis words are the frame change's values (then they make no move)."""
        values = lx.values
        if "H" in values:
            if _G43 not in lx.g:
                raise self._error(line_no, text, "H word without G43")
            h = values["H"]
            if h < 0.0 or h != int(h):
                raise self._error(line_no, text, f"tool length offset H{h:g} is not a whole number")
        if "L" in values and non_modal != _G10:
            raise self._error(line_no, text, "L word without G10")
        owners = (_G10, _G92, _G28, _G30)
        owner = non_modal if non_modal in owners else (_G43_1 if _G43_1 in lx.g else None)
        if owner is None:
            return False
        name = _gname(owner)
        if motion_word is not None:
            raise self._error(
                line_no, text, f"{name} and {_gname(motion_word.value * 10)} in one line"
            )
        if not _ARC_LETTERS.isdisjoint(values):
            letters = "/".join(c for c in "IJKR" if c in values)
            raise self._error(line_no, text, f"{letters} with {name}")
        if owner in (_G28, _G30):
            return True  # the axis words, if any, are the intermediate point: not a move of ours
        if owner == _G10:
            if values.get("L") not in (2.0, 20.0):
                raise self._error(line_no, text, "G10 without L2 or L20 (work offsets only)")
            p = values.get("P")
            if p is None or p != int(p) or not 0.0 <= p <= 9.0:
                raise self._error(line_no, text, "G10 without a coordinate system P0 to P9")
        elif _AXES.isdisjoint(values):
            raise self._error(line_no, text, f"{name} without X, Y or Z")
        return True

    def _other_words(
        self, values: dict[str, float], dwell: bool, p_taken: bool, text: str, line_no: int
    ) -> float | None:
        """S, T and the G4 dwell time P (`p_taken`: P is G10's); returns the dwell in s."""
        if "S" in values:
            if values["S"] < 0.0:
                raise self._error(line_no, text, "negative spindle speed S")
            self.spindle_rpm = values["S"]
        if "T" in values:
            t = values["T"]
            if t < 0.0 or t != int(t):
                raise self._error(line_no, text, f"tool number T{t:g} is not a whole number")
            self.tool = int(t)
        if dwell:
            if "P" not in values or values["P"] < 0.0:
                raise self._error(line_no, text, "G4 without a dwell time P >= 0")
            return values["P"]
        if "P" in values and not p_taken:
            raise self._error(line_no, text, "P word without G4")
        return None

    def _arc(
        self,
        lx: Lexed,
        text: str,
        line_no: int,
        start: Vec3,
        end: Vec3,
        plane: Plane,
        scale: float,
        motion: Motion,
    ) -> ArcSegment:
        values = lx.values
        ia, ib, inn = plane.value
        first, second = PLANE_OFFSETS[plane]
        for letter in "IJK":
            if letter in values and letter not in (first, second):
                raise self._error(
                    line_no, text, f"{letter} word not allowed in a G{PLANE_GCODE[plane]} arc"
                )
        clockwise = motion is Motion.CW
        has_offsets = first in values or second in values
        if "R" in values:
            if has_offsets:
                raise self._error(line_no, text, "arc with both R and I/J/K")
            try:
                ca, cb = arc_centre_from_radius(
                    (start[ia], start[ib]), (end[ia], end[ib]), values["R"] * scale, clockwise
                )
            except ValueError as exc:
                raise self._error(line_no, text, str(exc)) from None
        elif has_offsets:
            ca = start[ia] + values.get(first, 0.0) * scale
            cb = start[ib] + values.get(second, 0.0) * scale
        else:
            raise self._error(line_no, text, f"{_gname(motion.value * 10)} without I/J/K or R")
        centre = [0.0, 0.0, 0.0]
        centre[ia], centre[ib], centre[inn] = ca, cb, start[inn]
        try:
            arc = ArcSegment(start, end, (centre[0], centre[1], centre[2]), clockwise, plane)
        except ValueError as exc:
            raise self._error(line_no, text, str(exc)) from None
        opt = self._options
        delta = abs(arc.end_radius - arc.radius)
        if delta > opt.arc_tolerance_mm and (
            delta > opt.arc_tolerance_max_mm or delta > opt.arc_tolerance_rel * arc.radius
        ):
            raise self._error(
                line_no,
                text,
                f"arc radius mismatch start/end: {arc.radius:.4f} vs {arc.end_radius:.4f} mm",
            )
        return arc


def parse_lines(
    lines: Iterable[str], state: ModalState | None = None, *, first_line_no: int = 1
) -> Iterator[Block]:
    """Blocks of a streamed program, one per line, in constant memory."""
    st = state if state is not None else ModalState()
    for line_no, text in enumerate(lines, first_line_no):
        yield st.apply(text, line_no)


def read_lines(stream: BinaryIO) -> Iterator[str]:
    """Lines of a binary stream as text, terminators kept; bytes that are not UTF-8 survive
    the round trip through `encode_line` unchanged."""
    for raw in stream:
        yield raw.decode("utf-8", "surrogateescape")


def encode_line(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")
