"""Modulation windows for the streaming filter: the unit profile and the samples of a window.

The profile of eq. 26 scales: at feed V and half-window t* the arc length about the turning
point is s(t) = V t* sigma(tau), t = t* (2 tau - 1), with sigma the arc of the same profile at
V = 1, t* = 1 (eqs. 27-29). `UnitShape` tabulates sigma once per machine, so a window costs a
few dozen float operations, not a new polynomial. The choice of t* is agent.feedrate.filter.plan's.

Samples (`build_window`): the profile's base instants (equal steps of speed change, plus the
instants where the feed stops, for retrograde profiles), every crossing of a block end (each
chord then lies on one primitive, and a corner is passed exactly; base samples within half
their spacing of one are dropped), and subdivisions on arcs so that no chord sags more than the
chord budget. An arc whose end point is off its circle keeps its last straight step.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from agent.feedrate.geometry.arcs import ArcSegment
from agent.feedrate.geometry.primitives import LineSegment, PathPrimitive, Vec3
from agent.feedrate.profile import BernsteinFeedrate, symmetric_feedrate

Array = npt.NDArray[np.float64]
_DENSE = 4097


# ------------------------------------------------------------------------------- unit shape


@dataclass(frozen=True, eq=False)
class UnitShape:
    """Eq. 26 at V_c = 1, t* = 1: sigma(tau) at the base samples and densely for inversion.

    Plain tuples, not arrays: a window has a few dozen samples, where numpy's per-call cost
    would dominate."""

    profile: BernsteinFeedrate
    base_tau: tuple[float, ...]  # equal steps of speed change, and the stop instants, sorted
    base_sigma: tuple[float, ...]
    pieces: tuple[tuple[int, int], ...]  # base index ranges on which sigma is monotone
    # Per piece: sigma ascending and the matching tau, densely, for inversion by bisection.
    inverse: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]
    excursion: float  # max |sigma|: the window's reach on the path per unit V t*
    half_arc: float  # sigma(1) = s*/(V t*) (eq. 27)
    stop_taus: frozenset[float] = frozenset()  # where the feed passes through zero

    @property
    def time_penalty(self) -> float:
        """Extra time per unit t*: 2 - 2 s*/(V t*)."""
        return 2.0 - 2.0 * self.half_arc

    def tau_at(self, piece: int, u: float) -> float:
        """tau in `piece` where sigma(tau) = u (linear between dense samples)."""
        sig, tau = self.inverse[piece]
        i = bisect.bisect_left(sig, u)
        if i <= 0:
            return tau[0]
        if i >= len(sig):
            return tau[-1]
        s0, s1 = sig[i - 1], sig[i]
        w = (u - s0) / (s1 - s0) if s1 > s0 else 0.0
        return tau[i - 1] + w * (tau[i] - tau[i - 1])

    def piece_of(self, tau: float) -> int:
        for p, (i0, i1) in enumerate(self.pieces):
            if self.base_tau[i0] <= tau <= self.base_tau[i1]:
                return p
        return len(self.pieces) - 1


def unit_shape(ratio: float, degree: int, segments: int, retrograde: bool) -> UnitShape:
    """The machine's profile (V(1/2)/V_c = ratio, degree n) tabulated with `segments` steps."""
    prof = symmetric_feedrate(1.0, 1.0, ratio=ratio, degree=degree, allow_retrograde=retrograde)
    stops = sorted(0.5 * (t + 1.0) for t in prof.stop_times_s)

    def sigma(tau: Array) -> Array:
        return np.asarray(prof.arc_length_m(2.0 * tau - 1.0))

    # Samples at equal steps of the measure |V'| dtau + 0.25 TV dtau (TV = int |V'|): every
    # segment's mean speed is exact (chord / duration), and its speed steps from the next by
    # about the same amount; near the window ends, where V hugs V_c, fewer segments are spent.
    fine = np.linspace(0.0, 1.0, _DENSE)
    slope = np.abs(np.asarray(prof.derivative(2.0 * fine - 1.0, 1)))
    measure = slope + 0.25 * float(np.trapezoid(slope, fine))
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (measure[1:] + measure[:-1]) * np.diff(fine))])
    uniform = np.interp(np.linspace(0.0, cum[-1], segments + 1), cum, fine)
    uniform[0], uniform[-1] = 0.0, 1.0
    base = np.unique(np.concatenate([uniform, stops]))
    cuts = [0.0, *stops, 1.0]
    pieces = []
    inverse = []
    for a, b in itertools.pairwise(cuts):
        pieces.append((int(np.searchsorted(base, a)), int(np.searchsorted(base, b))))
        tau = np.linspace(a, b, max(65, int(_DENSE * (b - a))))
        sig = sigma(tau)
        if sig[-1] < sig[0]:
            sig, tau = sig[::-1], tau[::-1]
        inverse.append((tuple(sig.tolist()), tuple(tau.tolist())))
    return UnitShape(
        prof,
        tuple(base.tolist()),
        tuple(sigma(base).tolist()),
        tuple(pieces),
        tuple(inverse),
        float(prof.excursion_m),
        float(prof.half_arc_m),
        frozenset(float(t) for t in base if any(abs(t - x) < 1e-15 for x in stops)),
    )


# ------------------------------------------------------------------------------- windows


class Span(NamedTuple):
    """A stretch of the path the window may touch: one block's primitive."""

    s0: float
    s1: float
    prim: PathPrimitive
    start_mm: Vec3
    end_mm: Vec3


@dataclass(eq=False)
class Window:
    """The samples of one modulation window, in time order (absolute path arc s in mm).

    `last[b]` is the last sample index at block end b (exact vertex): the filter cuts the
    sample sequence there, so each replaced block ends on its own end point. `inner[k]`: the
    sample lies inside a straight block, so leaving it out keeps the path (its neighbours are
    on the same line or are that line's ends)."""

    tp_s: float
    feed_mm_s: float
    half_window_s: float
    s: list[float]
    t: list[float]
    points: list[Vec3]
    last: dict[float, int]
    inner: list[bool]
    region_lo: float
    region_hi: float
    axes: tuple[str, ...]

    @property
    def s_entry(self) -> float:
        return self.s[0]

    @property
    def s_exit(self) -> float:
        return self.s[-1]


def chord_step_mm(prim: PathPrimitive, chord_eps_mm: float, rounding_mm: float = 0.0) -> float:
    """Longest arc length whose chord stays within chord_eps of the primitive.

    An arc whose end lies off its circle by e ends with a straight step; when e is so small
    that its last point and its end round to the same written coordinates (e < 2 rounding),
    the last chord runs to the end instead and may stray e/2 further: the budget allows it."""
    if not isinstance(prim, ArcSegment):
        return math.inf
    e = end_step_mm(prim)
    if e < 2.0 * rounding_mm:
        chord_eps_mm = max(chord_eps_mm - 0.5 * e, 1e-3 * chord_eps_mm)
    r = prim.radius
    if chord_eps_mm >= r:
        return prim.length
    return prim.length_per_rad * 2.0 * math.acos(1.0 - chord_eps_mm / r)


def build_window(
    shape: UnitShape,
    tp_s: float,
    feed_mm_s: float,
    half_window_s: float,
    spans: Sequence[Span],
    chord_eps_mm: float,
    axes: tuple[str, ...],
    rounding_mm: float = 0.0,
) -> Window:
    """Samples of the window about the turning point at tp_s (see the module docstring).

    `spans` must cover [tp_s - excursion, tp_s + excursion] and be in path order."""
    scale = feed_mm_s * half_window_s  # mm of path per unit sigma
    inv = 1.0 / scale
    # (tau, s, block end or None), sorted by tau at the end.
    samples: list[tuple[float, float, float | None]] = [
        (tau, tp_s + scale * sig, None)
        for tau, sig in zip(shape.base_tau, shape.base_sigma, strict=True)
    ]
    ends = [sp.s1 for sp in spans[:-1]]  # interior block ends
    base_sigma = shape.base_sigma
    if ends:
        for p, (i0, i1) in enumerate(shape.pieces):
            a, b = base_sigma[i0], base_sigma[i1]
            lo, hi = (a, b) if a < b else (b, a)
            for e in ends:
                u = (e - tp_s) * inv
                if lo < u < hi:
                    samples.append((shape.tau_at(p, u), e, e))
        samples.sort(key=_first)
        samples = _thin(shape, samples)
    starts = [sp.s0 for sp in spans]
    steps = [chord_step_mm(sp.prim, chord_eps_mm, rounding_mm) for sp in spans]
    if any(st != math.inf for st in steps):
        samples = _subdivide_arcs(shape, tp_s, inv, samples, starts, steps)
    points: list[Vec3] = []
    last: dict[float, int] = {}
    s_list: list[float] = []
    t_list: list[float] = []
    inner: list[bool] = []
    by_end = {sp.s1: i for i, sp in enumerate(spans)}
    n_spans = len(spans)
    prev_span = -1  # span of the previous sample; -2 - i: at the end of span i
    for tau, sk, end in samples:
        t = half_window_s * (2.0 * tau - 1.0)
        if end is not None:
            i = by_end[end]
            sp = spans[i]
            if prev_span == i:
                _arc_end_step(sp, s_list, t_list, points, inner, t)
            last[end] = len(points)
            points.append(sp.end_mm)
            s_list.append(end)
            t_list.append(t)
            inner.append(False)
            prev_span = -2 - i
            continue
        j = bisect.bisect_right(starts, sk) - 1
        j = 0 if j < 0 else (j if j < n_spans else n_spans - 1)
        sp = spans[j]
        if prev_span == -2 - j:
            _arc_end_step(sp, s_list, t_list, points, inner, t)  # from the end onto the arc
        local = sk - sp.s0
        length = sp.s1 - sp.s0
        points.append(sp.prim.point(0.0 if local < 0.0 else (length if local > length else local)))
        s_list.append(sk)
        t_list.append(t)
        inner.append(isinstance(sp.prim, LineSegment))
        prev_span = j
    reach = shape.excursion * scale
    return Window(
        tp_s,
        feed_mm_s,
        half_window_s,
        s_list,
        t_list,
        points,
        last,
        inner,
        tp_s - reach,
        tp_s + reach,
        axes,
    )


def end_step_mm(prim: PathPrimitive) -> float:
    """How far an arc's end point lies off its circle (the parser accepts a small radius
    mismatch; the controller reaches the end by a last short straight step)."""
    if not isinstance(prim, ArcSegment):
        return 0.0
    return math.dist(prim.point(prim.length), prim.end)


def _arc_end_step(
    sp: Span,
    s_list: list[float],
    t_list: list[float],
    points: list[Vec3],
    inner: list[bool],
    t_next: float,
) -> None:
    """Between an arc sample and the arc's block end: the arc's own last point first, so the
    output follows the controller's final straight step instead of cutting across it."""
    if end_step_mm(sp.prim) <= 1e-9:
        return
    t_prev = t_list[-1] if t_list else t_next
    points.append(sp.prim.point(sp.prim.length))
    s_list.append(sp.s1)
    t_list.append(t_prev + 0.999 * (t_next - t_prev))
    inner.append(False)


def _first(sample: tuple[float, float, float | None]) -> float:
    return sample[0]


def _thin(
    shape: UnitShape, samples: list[tuple[float, float, float | None]]
) -> list[tuple[float, float, float | None]]:
    """Drop the uniform samples that lie within half their spacing of a block end: the block
    end then marks that step of the speed (every block a window touches is written as its own
    segments anyway), and short blocks get one segment instead of two or three."""
    n = len(samples)
    if n < 3:
        return samples
    base = shape.base_tau
    out = [samples[0]]
    for k in range(1, n - 1):
        tau, _, end = samples[k]
        if end is None and tau not in shape.stop_taus:
            i = bisect.bisect_left(base, tau)
            lo = base[i] - base[i - 1] if 0 < i < len(base) else math.inf
            hi = base[i + 1] - base[i] if i + 1 < len(base) else math.inf
            half = 0.5 * min(lo, hi)
            before, after = samples[k - 1], samples[k + 1]
            if (before[2] is not None and tau - before[0] < half) or (
                after[2] is not None and after[0] - tau < half
            ):
                continue
        out.append(samples[k])
    out.append(samples[-1])
    return out


def _subdivide_arcs(
    shape: UnitShape,
    tp_s: float,
    inv: float,
    samples: list[tuple[float, float, float | None]],
    starts: list[float],
    steps: list[float],
) -> list[tuple[float, float, float | None]]:
    """More samples where a chord on an arc would sag more than the budget."""
    out = [samples[0]]
    n_spans = len(starts)
    for prev, cur in itertools.pairwise(samples):
        ds = cur[1] - prev[1]
        j = bisect.bisect_right(starts, 0.5 * (prev[1] + cur[1])) - 1
        step = steps[0 if j < 0 else (j if j < n_spans else n_spans - 1)]
        if abs(ds) > step:
            n = math.ceil(abs(ds) / step)
            piece = shape.piece_of(0.5 * (prev[0] + cur[0]))
            for i in range(1, n):
                s = prev[1] + ds * i / n
                out.append((shape.tau_at(piece, (s - tp_s) * inv), s, None))
        out.append(cur)
    return out
