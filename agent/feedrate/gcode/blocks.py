"""What the G-code parser (agent.feedrate.gcode.parser) produces: the modal codes, the modal state
in force after a line, and the frozen Block of one parsed line; with the parser's options.

Kept apart from the state machine so the filter, the emitter and the executor read blocks
without the parser's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from agent.feedrate.geometry.arcs import ArcSegment
from agent.feedrate.geometry.primitives import LineSegment, PathPrimitive, Plane, Vec3

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

# Path-control modes (G61 exact stop, G61.1, G64 blending): how the controller joins blocks,
# not where they lie. Passed through and never modelled.
PATH_CONTROL_GCODES = frozenset({610, 611, 640})
# Changes of the frame program coordinates are given in, by values the program cannot be read
# for: work offsets G54-G59 (and LinuxCNC's G59.1-G59.3), G10 L2/L20, G92 and G92.1-G92.3,
# tool length G43, G43.1, G49. They are passed through; the parser marks the program position
# unknown after them (Block.path_known), and the filter starts afresh (agent.feedrate.filter).
FRAME_GCODES = frozenset(
    {540, 550, 560, 570, 580, 590, 591, 592, 593, 100, 920, 921, 922, 923, 430, 431, 490}
)
# Cancels of modes the parser never enters (G40 cutter compensation, G80 canned cycles) and G91.1,
# incremental arc centres, which is what it assumes: the usual CAM preamble, passed through.
CANCEL_GCODES = frozenset({400, 800, 911})
# G28 / G30: to a stored home position, through the line's axis words as an intermediate point.
# Where that leaves the program position is the machine's, not the program's: a frame change.
HOME_GCODES = frozenset({280, 300})
# Every G code the parser passes through without modelling its effect (dialect checks read it).
PASSIVE_GCODES = PATH_CONTROL_GCODES | FRAME_GCODES | CANCEL_GCODES | HOME_GCODES


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


class Block(NamedTuple):
    """One parsed line, immutable. `motion` is the move it makes (None for no move); start
    and end are absolute program coordinates in mm (a guess where `path_known` is False).
    Feed moves carry `feed_mm_s` (for G93 lines derived from the line's duration 60/F, which
    `inverse_time_f` keeps).

    A NamedTuple rather than a frozen dataclass: one is built per streamed line and this is
    four times cheaper to construct.
    """

    line_no: int
    text: str
    modal: Modal
    motion: Motion | None
    start_mm: Vec3
    end_mm: Vec3
    length_mm: float = 0.0
    feed_mm_s: float | None = None
    inverse_time_f: float | None = None
    arc: ArcSegment | None = None
    explicit_motion: bool = False  # the line names its motion code (else it is modal)
    line_number: int | None = None  # its N word
    has_checksum: bool = False
    skipped: bool = False  # block-deleted (options.block_delete) or a '%' tape mark
    dwell_s: float | None = None
    # False for a move whose start or end the program does not fix: the first move after a
    # frame change (FRAME_GCODES) or a G90 move naming an axis left unknown by one. Its start,
    # end and length are then the parser's guess (the old program coordinates), not the path.
    path_known: bool = True

    @property
    def centre_mm(self) -> Vec3 | None:
        return None if self.arc is None else self.arc.centre

    @property
    def clockwise(self) -> bool | None:
        return None if self.arc is None else self.arc.clockwise

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

    def to_dict(self) -> dict[str, Any]:
        out = self._asdict()
        out["modal"] = {
            "units": self.modal.units.name,
            "distance": self.modal.distance.name,
            "plane": self.modal.plane.name,
            "motion": None if self.modal.motion is None else self.modal.motion.name,
            "feed_mode": self.modal.feed_mode.name,
            "feed_mm_s": self.modal.feed_mm_s,
        }
        out["motion"] = None if self.motion is None else self.motion.name
        out["arc"] = None
        if self.arc is not None:
            out["arc"] = {
                "centre_mm": self.arc.centre,
                "clockwise": self.arc.clockwise,
                "radius_mm": self.arc.radius,
                "sweep_rad": self.arc.sweep_rad,
            }
        return out
