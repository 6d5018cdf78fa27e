"""Turning points of a streamed toolpath: where the velocity of an axis changes sign (Farouki &
Swett 2022, section 2) - at the vertex between two primitives, or inside one (the quadrant points of
an arc, interior points of a curve). Found one primitive at a time in constant memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from agent.feedrate.geometry.primitives import (
    AXIS_NAMES,
    AXIS_ZERO_TOL,
    LineSegment,
    PathPrimitive,
    TurningKind,
    Vec3,
)


@dataclass(frozen=True, slots=True)
class TurningPoint:
    """Where the velocity of one or more axes changes sign along the path.

    `s` is the arc length from the start of the path, `s_local` from the start of primitive
    `primitive_index`. `axes` name the axes that reverse and `directions` their new signs. For a
    vertex the tangents on both sides differ (the osculating circle is then undefined).
    """

    s: float
    point: Vec3
    axes: tuple[str, ...]
    directions: tuple[int, ...]
    kind: TurningKind
    primitive_index: int
    s_local: float
    tangent_in: Vec3
    tangent_out: Vec3

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TurningPointTracker:
    """Finds turning points on a streamed path, one primitive at a time, in constant memory.

    Each axis remembers the sign it last moved with; an axis that stands still for a while
    (e.g. X during a pure Y move) and then moves back reverses at the start of that move.
    """

    def __init__(self) -> None:
        self._last_sign = [0, 0, 0]
        self._s = 0.0
        self._index = -1
        self._previous: PathPrimitive | None = None

    @property
    def arc_length(self) -> float:
        """Arc length of the path fed so far."""
        return self._s

    def feed(self, primitive: PathPrimitive) -> list[TurningPoint]:
        self._index += 1
        if not primitive.length > 0.0:
            return []
        if type(primitive) is LineSegment:
            out = self._feed_line(primitive)
        else:
            out = self._feed_events(primitive)
        self._s += primitive.length
        self._previous = primitive
        return out

    def _feed_line(self, line: LineSegment) -> list[TurningPoint]:
        # The common case of a streamed program, without building AxisEvent lists.
        last = self._last_sign
        axes: list[str] = []
        dirs: list[int] = []
        for axis, c in enumerate(line.direction):
            if c > AXIS_ZERO_TOL:
                sign = 1
            elif c < -AXIS_ZERO_TOL:
                sign = -1
            else:
                continue
            if last[axis] == -sign:
                axes.append(AXIS_NAMES[axis])
                dirs.append(sign)
            last[axis] = sign
        return [self._turning_point(line, 0.0, axes, dirs)] if axes else []

    def _feed_events(self, primitive: PathPrimitive) -> list[TurningPoint]:
        out: list[TurningPoint] = []
        events = primitive.axis_events()
        i = 0
        while i < len(events):
            s_local = events[i].s
            axes: list[str] = []
            dirs: list[int] = []
            while i < len(events) and events[i].s == s_local:
                ev = events[i]
                last = self._last_sign[ev.axis]
                if ev.sign != 0 and last != 0 and ev.sign != last:
                    axes.append(AXIS_NAMES[ev.axis])
                    dirs.append(ev.sign)
                if ev.sign != 0:
                    self._last_sign[ev.axis] = ev.sign
                i += 1
            if axes:
                out.append(self._turning_point(primitive, s_local, axes, dirs))
        return out

    def _turning_point(
        self, primitive: PathPrimitive, s_local: float, axes: list[str], dirs: list[int]
    ) -> TurningPoint:
        t_out = primitive.tangent(s_local)
        vertex = s_local == 0.0
        prev = self._previous
        t_in = prev.tangent(prev.length) if vertex and prev is not None else t_out
        return TurningPoint(
            s=self._s + s_local,
            point=primitive.point(s_local),
            axes=tuple(axes),
            directions=tuple(dirs),
            kind=TurningKind.VERTEX if vertex else primitive.interior_kind,
            primitive_index=self._index,
            s_local=s_local,
            tangent_in=t_in,
            tangent_out=t_out,
        )


def turning_points(primitives: Iterable[PathPrimitive]) -> Iterator[TurningPoint]:
    """All turning points of a path given as consecutive primitives (streamed)."""
    tracker = TurningPointTracker()
    for primitive in primitives:
        yield from tracker.feed(primitive)
