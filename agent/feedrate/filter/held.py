"""The lines the feedrate filter holds back, and what the windows ask of them.

Each input line waits as a `HeldLine` (its block, its path interval [s0, s1] and its role for
the windows) until no window still to be decided can reach it; each turning point waits as a
`PendingTurningPoint` until there is enough path ahead of it to decide its window. The queries
here read the held lines: which blocks a window of path interval [lo, hi] covers (`window_spans`)
and how far a turning point on arcs of one circle may let its window reach (`osculating_room`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agent.feedrate.filter.plan import Geometry, classify, same_circle
from agent.feedrate.filter.window import Span
from agent.feedrate.gcode.blocks import Block
from agent.feedrate.gcode.lex import lex_line
from agent.feedrate.geometry.arcs import ArcSegment
from agent.feedrate.geometry.primitives import osculating_extent
from agent.feedrate.geometry.turning_points import TurningPoint

# What a held line is to the windows: a feed move of the run (MOVE), a line that does not
# end the run because the controller does nothing with it (NEUTRAL: blank, comment), or a
# line that ends it (BREAK: rapid, dwell, M/S/T word, modal or feed change). Plain ints, not an
# enum: the filter compares them once per line on its fastest path.
MOVE, NEUTRAL, BREAK = 0, 1, 2


class HeldLine:
    """One input line waiting to be written."""

    __slots__ = ("block", "duration_s", "kind", "prim", "s0", "s1")

    def __init__(
        self, block: Block, kind: int, s0: float, s1: float, prim: Any, duration_s: float
    ) -> None:
        self.block, self.kind, self.s0, self.s1, self.prim = block, kind, s0, s1, prim
        self.duration_s = duration_s


class PendingTurningPoint:
    """A turning point whose window is not decided yet; `seq` numbers the line it lies on."""

    __slots__ = ("axes", "feed_mm_s", "geom", "seq", "tp")

    def __init__(
        self, tp: TurningPoint, feed_mm_s: float, geom: Geometry, axes: tuple[str, ...], seq: int
    ) -> None:
        self.tp, self.feed_mm_s, self.geom, self.axes, self.seq = tp, feed_mm_s, geom, axes, seq


def is_word_free(text: str, line_no: int) -> bool:
    """True for blank, comment-only and number-only lines (nothing for the controller to do)."""
    lx = lex_line(text, line_no)
    return not (lx.g or lx.m or lx.values)


def turning_point_geometry(tp: TurningPoint, item: HeldLine, prev: HeldLine | None) -> Geometry:
    """What the window planner needs of a turning point on `item`; `prev` is the run's move
    before it (None at the start of a run)."""
    return classify(
        tp,
        item.prim,
        item.block.end_mm,
        None if prev is None else prev.prim,
        None if prev is None else prev.block.start_mm,
    )


def window_spans(
    items: Sequence[HeldLine], head: int, base: int, lo: float, hi: float, seq: int
) -> list[Span]:
    """The feed moves a window over path interval [lo, hi] about line `seq` touches.

    `items[head:]` are the held lines not yet written, `base` the sequence number of items[0]."""
    i = seq - base
    while i > head and items[i].s0 > lo:
        i -= 1
    out: list[Span] = []
    while i < len(items):
        it = items[i]
        if it.kind == MOVE and it.s1 > lo:
            if it.s0 >= hi:
                break
            out.append(Span(it.s0, it.s1, it.prim, it.block.start_mm, it.block.end_mm))
        i += 1
    return out


def osculating_room(
    items: Sequence[HeldLine], head: int, base: int, p: PendingTurningPoint, eps_mm: float
) -> float:
    """Half-length of the stretch about the turning point on arcs of the same circle."""
    i = p.seq - base
    ref = items[i].prim
    if not isinstance(ref, ArcSegment):
        return math.inf
    lo = hi = i
    while lo - 1 >= head and _same_circle_item(items[lo - 1], ref):
        lo -= 1
    while hi + 1 < len(items) and _same_circle_item(items[hi + 1], ref):
        hi += 1
    # Eq. 6 within the primitive: infinite on a circular arc, finite on a helix (torsion).
    f = ref.frenet(min(max(p.tp.s - items[i].s0, 0.0), ref.length))
    extent = osculating_extent(f.dkappa_ds, f.d2kappa_ds2, eps_mm, kappa=f.kappa, torsion=f.torsion)
    return min(p.tp.s - items[lo].s0, items[hi].s1 - p.tp.s, extent)


def _same_circle_item(item: HeldLine, ref: ArcSegment) -> bool:
    return item.kind == MOVE and same_circle(item.prim, ref)
