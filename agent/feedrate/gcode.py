"""Streaming G-code parser: a modal state machine that turns each line into a frozen Block.

The RS-274 subset of issue 3: G0 G1 G2 G3 in G17/G18/G19, G90/G91, G20/G21, G93/G94, G4 dwell,
F S T and M words, comments, N line numbers, '*NN' checksums, block delete '/'. Work offsets
(G54-G59) and path-control modes (G61, G61.1, G64) pass through: they change neither the program
coordinates nor the path. Anything else - other G codes, letters such as A/E/Q, missing or
contradictory words - raises GcodeError naming the line.

Positions are absolute program coordinates in mm (a G91 program starts at the state's initial
position, 0 by default), feeds in mm/s. Each Block keeps the original text, terminator included,
so lines outside modulation windows can be written back byte for byte.

Execution order within a line follows RS-274NGC: feed mode, F, S, T, dwell, plane, units,
distance mode, motion. F is read in the units in force after the line's G20/G21 (as GRBL does)
and kept in mm/s. Leaving or entering G93 makes the feed undefined (GRBL, LinuxCNC). M2/M30 reset
plane, distance and feed mode and select G1, as both controllers do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import BinaryIO

from agent.feedrate.gcode_lex import GcodeError, Lexed, lex_line
from agent.feedrate.geometry import (
    ArcSegment,
    LineSegment,
    PathPrimitive,
    Plane,
    Vec3,
    arc_centre_from_radius,
)

__all__ = [
    "Block",
    "DistanceMode",
    "FeedMode",
    "GcodeError",
    "Modal",
    "ModalState",
    "Motion",
    "ParserOptions",
    "Units",
    "encode_line",
    "parse_lines",
    "read_lines",
]

MM_PER_INCH = 25.4


class Units(Enum):
    INCH = 20
    MM = 21

    @property
    def mm_per_unit(self) -> float:
        return MM_PER_INCH if self is Units.INCH else 1.0


class DistanceMode(Enum):
    ABSOLUTE = 90
    INCREMENTAL = 91


class FeedMode(Enum):
    INVERSE_TIME = 93
    UNITS_PER_MIN = 94


class Motion(Enum):
    RAPID = 0
    LINEAR = 1
    CW = 2
    CCW = 3


PLANE_GCODE = {Plane.XY: 17, Plane.ZX: 18, Plane.YZ: 19}
# Centre-offset letters along the plane's first and second axis (I->X, J->Y, K->Z).
PLANE_OFFSETS = {Plane.XY: ("I", "J"), Plane.ZX: ("K", "I"), Plane.YZ: ("J", "K")}

_MOTION_G = {0: Motion.RAPID, 10: Motion.LINEAR, 20: Motion.CW, 30: Motion.CCW}
_PLANE_G = {170: Plane.XY, 180: Plane.ZX, 190: Plane.YZ}
_UNITS_G = {200: Units.INCH, 210: Units.MM}
_DISTANCE_G = {900: DistanceMode.ABSOLUTE, 910: DistanceMode.INCREMENTAL}
_FEED_G = {930: FeedMode.INVERSE_TIME, 940: FeedMode.UNITS_PER_MIN}
PASSIVE_GCODES = frozenset({540, 550, 560, 570, 580, 590, 610, 611, 640})
_KNOWN_LETTERS = frozenset("XYZIJKRFSTP")
_PROGRAM_END_M = frozenset({20, 300})


def _gname(tenths: int) -> str:
    return f"G{tenths // 10}" if tenths % 10 == 0 else f"G{tenths / 10:g}"


@dataclass(frozen=True, slots=True)
class ParserOptions:
    """Block delete switch and the arc end-radius tolerance (GRBL's rule: an error when the
    radii differ by more than `arc_tolerance_mm` and by more than `arc_tolerance_rel` of the
    radius or `arc_tolerance_max_mm`)."""

    block_delete: bool = False  # True: lines starting with '/' are skipped
    arc_tolerance_mm: float = 0.005
    arc_tolerance_rel: float = 0.001
    arc_tolerance_max_mm: float = 0.5


@dataclass(frozen=True, slots=True)
class Modal:
    """The modal state in force after a line."""

    units: Units = Units.MM
    distance: DistanceMode = DistanceMode.ABSOLUTE
    plane: Plane = Plane.XY
    motion: Motion | None = None
    feed_mode: FeedMode = FeedMode.UNITS_PER_MIN
    feed_mm_s: float | None = None  # G94 feed; None when undefined (and always in G93)


@dataclass(frozen=True, slots=True)
class Block:
    """One parsed line. `motion` is the move it makes (None for no move); start/end are
    absolute program coordinates in mm. Feed moves carry `feed_mm_s` (for G93 lines derived
    from the line's duration 60/F, which `inverse_time_f` keeps)."""

    line_no: int
    text: str
    modal: Modal
    motion: Motion | None
    start_mm: Vec3
    end_mm: Vec3
    feed_mm_s: float | None = None
    inverse_time_f: float | None = None
    arc: ArcSegment | None = None
    explicit_motion: bool = False  # the line names its motion code (else it is modal)
    line_number: int | None = None  # its N word
    has_checksum: bool = False
    skipped: bool = False  # block-deleted (options.block_delete) or a '%' tape mark
    dwell_s: float | None = None
    _length_mm: float | None = field(default=None, repr=False, compare=False)

    @property
    def centre_mm(self) -> Vec3 | None:
        return None if self.arc is None else self.arc.centre

    @property
    def clockwise(self) -> bool | None:
        return None if self.arc is None else self.arc.clockwise

    @property
    def length_mm(self) -> float:
        if self._length_mm is not None:
            return self._length_mm
        if self.motion is None:
            return 0.0
        return self.primitive().length  # type: ignore[union-attr]

    @property
    def duration_s(self) -> float | None:
        """Time the move takes at its programmed feed (None for rapids and non-moves)."""
        if self.inverse_time_f is not None:
            return 60.0 / self.inverse_time_f
        if self.feed_mm_s is None or self.motion is None:
            return None
        return self.length_mm / self.feed_mm_s

    def primitive(self) -> PathPrimitive | None:
        if self.motion is None:
            return None
        if self.arc is not None:
            return self.arc
        return LineSegment(self.start_mm, self.end_mm)


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
    ) -> None:
        self._modal = modal if modal is not None else Modal()
        self._pos: Vec3 = (float(position_mm[0]), float(position_mm[1]), float(position_mm[2]))
        self._options = options if options is not None else ParserOptions()
        self.source = source
        self.spindle_rpm: float | None = None
        self.tool: int | None = None

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
                line_no, text, self._modal, None, pos, pos,
                line_number=lx.line_number, has_checksum=lx.checksum is not None, skipped=True,
            )  # fmt: skip
        if not lx.g and not lx.m and not lx.values:
            return Block(
                line_no, text, self._modal, None, pos, pos,
                line_number=lx.line_number, has_checksum=lx.checksum is not None,
            )  # fmt: skip
        return self._apply_words(lx, text, line_no)

    def _error(self, line_no: int, text: str, problem: str) -> GcodeError:
        return GcodeError(line_no, text, problem, self.source)

    def _apply_words(self, lx: Lexed, text: str, line_no: int) -> Block:
        old = self._modal
        motion_word: Motion | None = None
        plane, units, distance, feed_mode = old.plane, old.units, old.distance, old.feed_mode
        seen: set[str] = set()
        dwell = False
        for code in lx.g:
            group = _group_of(code)
            if group is None:
                raise self._error(line_no, text, f"unsupported G code {_gname(code)}")
            if group in seen and group != "passive":
                raise self._error(line_no, text, f"two {group} codes in one line")
            seen.add(group)
            if group == "motion":
                motion_word = _MOTION_G[code]
            elif group == "plane":
                plane = _PLANE_G[code]
            elif group == "units":
                units = _UNITS_G[code]
            elif group == "distance":
                distance = _DISTANCE_G[code]
            elif group == "feed mode":
                feed_mode = _FEED_G[code]
            elif group == "dwell":
                dwell = True
        values = lx.values
        for letter in values:
            if letter not in _KNOWN_LETTERS:
                raise self._error(line_no, text, f"unknown word {letter}")

        feed = old.feed_mm_s if feed_mode is old.feed_mode else None
        scale = units.mm_per_unit
        inverse_f: float | None = None
        if "F" in values:
            f = values["F"]
            if f < 0.0:
                raise self._error(line_no, text, f"negative feed rate F{f:g}")
            if feed_mode is FeedMode.INVERSE_TIME:
                inverse_f = f
            else:
                feed = f * scale / 60.0
        if "S" in values:
            if values["S"] < 0.0:
                raise self._error(line_no, text, "negative spindle speed S")
            self.spindle_rpm = values["S"]
        if "T" in values:
            t = values["T"]
            if t < 0.0 or t != int(t):
                raise self._error(line_no, text, f"tool number T{t:g} is not a whole number")
            self.tool = int(t)
        dwell_s: float | None = None
        if dwell:
            if "P" not in values or values["P"] < 0.0:
                raise self._error(line_no, text, "G4 without a dwell time P >= 0")
            dwell_s = values["P"]
        elif "P" in values:
            raise self._error(line_no, text, "P word without G4")

        motion_mode = motion_word if motion_word is not None else old.motion
        has_axes = "X" in values or "Y" in values or "Z" in values
        offsets = [letter for letter in "IJK" if letter in values]
        has_r = "R" in values
        moves = has_axes or bool(offsets) or has_r
        if motion_word in (Motion.CW, Motion.CCW) and not moves:
            raise self._error(line_no, text, f"{_gname(motion_word.value * 10)} without I/J/K or R")

        pos = self._pos
        end = pos
        arc: ArcSegment | None = None
        block_motion: Motion | None = None
        block_feed: float | None = None
        length: float | None = None
        if moves:
            if motion_mode is None:
                raise self._error(line_no, text, "axis words without a motion mode (G0/G1/G2/G3)")
            if (offsets or has_r) and motion_mode not in (Motion.CW, Motion.CCW):
                letters = "/".join(offsets + (["R"] if has_r else []))
                raise self._error(line_no, text, f"{letters} without G2/G3")
            target = [pos[0], pos[1], pos[2]]
            for i, letter in enumerate("XYZ"):
                if letter in values:
                    v = values[letter] * scale
                    target[i] = v if distance is DistanceMode.ABSOLUTE else pos[i] + v
            end = (target[0], target[1], target[2])
            if motion_mode in (Motion.CW, Motion.CCW):
                arc = self._arc(lx, text, line_no, pos, end, plane, scale, motion_mode)
                length = arc.length
            block_motion = motion_mode
            if motion_mode is not Motion.RAPID:
                if length is None:
                    length = math.dist(pos, end)
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

        if any(m in _PROGRAM_END_M for m in lx.m):
            plane, distance = Plane.XY, DistanceMode.ABSOLUTE
            if feed_mode is not FeedMode.UNITS_PER_MIN:
                feed_mode, feed = FeedMode.UNITS_PER_MIN, None
            motion_mode = Motion.LINEAR
        if feed_mode is FeedMode.INVERSE_TIME:
            feed = None
        if (
            units is not old.units
            or distance is not old.distance
            or plane is not old.plane
            or motion_mode is not old.motion
            or feed_mode is not old.feed_mode
            or feed != old.feed_mm_s
        ):
            self._modal = Modal(units, distance, plane, motion_mode, feed_mode, feed)
        self._pos = end
        return Block(
            line_no,
            text,
            self._modal,
            block_motion,
            pos,
            end,
            feed_mm_s=block_feed,
            inverse_time_f=inverse_f if block_motion is not None else None,
            arc=arc,
            explicit_motion=motion_word is not None,
            line_number=lx.line_number,
            has_checksum=lx.checksum is not None,
            dwell_s=dwell_s,
            _length_mm=length if block_motion is not None else None,
        )

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


def _group_of(code: int) -> str | None:
    if code in _MOTION_G:
        return "motion"
    if code in _PLANE_G:
        return "plane"
    if code in _UNITS_G:
        return "units"
    if code in _DISTANCE_G:
        return "distance"
    if code in _FEED_G:
        return "feed mode"
    if code == 40:
        return "dwell"
    if code in PASSIVE_GCODES:
        return "passive"
    return None


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
