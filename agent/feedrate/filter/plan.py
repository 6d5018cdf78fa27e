"""The half-window t* of each modulation window (Farouki & Swett 2022, section 5.3: t* >= dt).

Policy "fixed" takes the machine's half_window_s; policy "shortest" the least t* whose backlash
take-up, simulated on the dead-zone axis model (agent.models.axis.pid, the gap opening when the
axis really reverses), ends inside the window, at most half_window_s. The command seen by the
reversing axis depends on the geometry (`Geometry`, from `classify`):
  * smooth turning points (arc quadrant points, tangent-continuous vertices, and vertices of
    finely chorded curves, whose radius is the circle through the neighbouring vertices) use
    the osculating circle, X = rho (cos(s/rho) - 1) (eq. 30, window_length.take_up_instant_s);
  * corners use the two straight legs, X = a_in s for s < 0 and a_out s after.
A simulation takes ~40 ms and a bisection ~10 of them, so results are cached per axis, feed
(2 % bins), radius (5 % bins) or leg components (0.02 steps), in a bounded LRU.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from agent.feedrate.filter.window import UnitShape
from agent.feedrate.filter.window_length import take_up_instant_s
from agent.feedrate.geometry.arcs import ArcSegment
from agent.feedrate.geometry.primitives import LineSegment, PathPrimitive, TurningKind, Vec3
from agent.feedrate.geometry.turning_points import TurningPoint
from agent.feedrate.profile import BernsteinFeedrate
from agent.models.axis.params import AxisParams
from agent.models.axis.pid import simulate_axis

Array = npt.NDArray[np.float64]
AXIS_INDEX = {"X": 0, "Y": 1, "Z": 2}
MM = 1e-3  # m per mm
_CACHE_SIZE = 512
_LEAD_S = 1.5  # steady motion simulated before a window (start-up transient e^-gamma t)
_SMOOTH_RAD = 1e-6  # tangents this close at a vertex: a smooth turning point
_POLYLINE_RAD = math.radians(10.0)  # a chorded curve turns less than this at each vertex
_SAME_CIRCLE_REL = 1e-9


class GeometryKind(StrEnum):
    """How the reversing axis's command is modelled: on the osculating circle, or on two legs."""

    SMOOTH = "smooth"
    CORNER = "corner"


class Geometry(NamedTuple):
    """What the planner needs of a turning point: a radius (smooth) or the legs (corner).

    `osculating` marks a smooth point on G-code arcs: the window must then stay on the arcs of
    the same circle (the osculating circle's extent, eq. 6)."""

    kind: GeometryKind
    radius_mm: float
    tangent_in: Vec3
    tangent_out: Vec3
    osculating: bool = False


def circumradius(a: Vec3, b: Vec3, c: Vec3) -> float:
    """Radius of the circle through three points (inf when they are collinear)."""
    ab, bc, ca = math.dist(a, b), math.dist(b, c), math.dist(c, a)
    u = (b[0] - a[0], b[1] - a[1], b[2] - a[2])
    v = (c[0] - a[0], c[1] - a[1], c[2] - a[2])
    cross = (u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0])
    twice_area = math.sqrt(cross[0] ** 2 + cross[1] ** 2 + cross[2] ** 2)
    if twice_area <= 1e-15 * max(ab * bc, 1e-300):
        return math.inf
    return ab * bc * ca / (2.0 * twice_area)


def _bin(value: float, step: float) -> float:
    """value rounded to a logarithmic grid of relative spacing `step`."""
    k = round(math.log(value) / math.log1p(step))
    return math.exp(k * math.log1p(step))


def shortest_half_window(
    take_up: Callable[[float], float | None], cap_s: float, rel_tol: float = 1e-3
) -> tuple[float, bool]:
    """Least t* in (0, cap] with take_up(t*) <= t* (bisection), and whether one exists."""
    end = take_up(cap_s)
    if end is None or end > cap_s:
        return cap_s, False
    lo, hi = 0.0, cap_s
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        e = take_up(mid)
        if e is not None and e <= mid:
            hi = mid
        else:
            lo = mid
    return hi, True


def corner_take_up_s(
    axis: AxisParams, profile: BernsteinFeedrate, a_in: float, a_out: float, *, step_s: float = 1e-3
) -> float | None:
    """When the gear has taken up the backlash at a corner whose legs move the axis with
    direction cosines a_in then a_out (opposite signs), t = 0 at the corner; None if a gap is
    still open a window-length after the window (as take_up_instant_s for the circle)."""

    def command(t: Array) -> tuple[Array, Array]:
        s = np.asarray(profile.arc_length_m(t))
        a = np.where(s < 0.0, a_in, a_out)
        return a * s, a * np.asarray(profile.speed_m_s(t))

    window = profile.window_end_s - profile.window_start_s
    run = simulate_axis(
        axis,
        command,
        profile.window_start_s - _LEAD_S,
        profile.window_end_s + window,
        step_s=step_s,
        trigger="reversal",
    )
    ends = [i.end_s for i in run.intervals if i.start_s <= profile.window_end_s]
    if not ends or any(e is None for e in ends):
        return None
    return float(max(e for e in ends if e is not None))


@dataclass(frozen=True)
class PlanStats:
    simulated: int
    cache_hits: int
    not_contained: int  # keys where even the longest window ends before the take-up

    def to_dict(self) -> dict[str, int]:
        return {
            "simulated": self.simulated,
            "cache_hits": self.cache_hits,
            "not_contained": self.not_contained,
        }


class WindowPlanner:
    """t* needed at a turning point (policy "shortest") or the machine's t* ("fixed")."""

    def __init__(
        self,
        axes: dict[str, AxisParams],
        shape: UnitShape,
        *,
        policy: Literal["shortest", "fixed"],
        cap_s: float,
    ) -> None:
        self.axes = axes
        self.shape = shape
        self.policy = policy
        self.cap_s = cap_s
        self._cache: OrderedDict[tuple[object, ...], float] = OrderedDict()
        self._simulated = self._hits = self._not_contained = 0

    @property
    def stats(self) -> PlanStats:
        return PlanStats(self._simulated, self._hits, self._not_contained)

    def needed_s(self, axes: Sequence[str], feed_mm_s: float, geom: Geometry) -> float:
        """The t* the reversing `axes` need at this feed and geometry (at most cap_s)."""
        if self.policy == "fixed":
            return self.cap_s
        need = 0.0
        for name in axes:
            params = self.axes.get(name)
            if params is None or params.backlash_motor_rad == 0.0:
                continue
            need = max(need, self._needed_axis(name, params, feed_mm_s, geom))
        return need

    def _needed_axis(
        self, name: str, params: AxisParams, feed_mm_s: float, geom: Geometry
    ) -> float:
        v = _bin(feed_mm_s * MM, 0.02)
        if geom.kind == GeometryKind.SMOOTH:
            key: tuple[object, ...] = (name, "smooth", v, _bin(geom.radius_mm * MM, 0.05))
        else:
            k = AXIS_INDEX[name]
            key = (
                name,
                "corner",
                v,
                round(abs(geom.tangent_in[k]) / 0.02) * 0.02,
                round(abs(geom.tangent_out[k]) / 0.02) * 0.02,
            )
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self._hits += 1
            return hit
        coeffs = tuple(c * v for c in self.shape.profile.coefficients_m_s)

        def profile(ts: float) -> BernsteinFeedrate:
            return BernsteinFeedrate(coeffs, ts)

        def step(ts: float) -> float:
            return min(1e-3, ts / 50.0)

        take_up: Callable[[float], float | None]
        if geom.kind == GeometryKind.SMOOTH:
            radius_m = float(key[3])  # type: ignore[arg-type]

            def take_up(ts: float) -> float | None:
                return take_up_instant_s(
                    params, profile(ts), radius_m, step_s=step(ts), lead_s=_LEAD_S
                )
        else:
            a_in, a_out = float(key[3]), -float(key[4])  # type: ignore[arg-type]

            def take_up(ts: float) -> float | None:
                return corner_take_up_s(params, profile(ts), a_in, a_out, step_s=step(ts))

        value, contained = shortest_half_window(take_up, self.cap_s)
        self._simulated += 1
        self._not_contained += not contained
        self._cache[key] = value
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return value


def same_circle(prim: PathPrimitive, ref: ArcSegment) -> bool:
    """Whether `prim` is an arc on `ref`'s circle, in the same plane and sense."""
    if not isinstance(prim, ArcSegment):
        return False
    tol = _SAME_CIRCLE_REL * max(1.0, ref.radius) + 1e-9
    rise = abs(prim.start[ref.plane.value[2]] - ref.start[ref.plane.value[2]])
    return (
        prim.plane is ref.plane
        and prim.clockwise == ref.clockwise
        and abs(prim.radius - ref.radius) <= tol
        and math.dist(prim.centre, ref.centre) <= tol + rise
    )


def classify(
    tp: TurningPoint,
    prim: PathPrimitive,
    end_mm: Vec3,
    prev: PathPrimitive | None,
    prev_start_mm: Vec3 | None,
) -> Geometry:
    """The geometry of a turning point on `prim` (ending at end_mm), the primitive before it
    `prev` (starting at prev_start_mm) when the turning point is the vertex between them."""
    t_in, t_out = tp.tangent_in, tp.tangent_out
    if tp.kind != TurningKind.VERTEX:
        kappa = prim.frenet(tp.s_local).kappa
        return Geometry(GeometryKind.SMOOTH, 1.0 / abs(kappa), t_in, t_out, True)
    cos = max(-1.0, min(1.0, sum(a * b for a, b in zip(t_in, t_out, strict=True))))
    angle = math.acos(cos)
    if prev is not None:
        if angle <= _SMOOTH_RAD:
            arcs = [p for p in (prev, prim) if isinstance(p, ArcSegment)]
            if arcs:
                # On one circle the osculating circle is the path; at a line-arc junction
                # the arc's radius is the best estimate, with no circle to stay on.
                same = (
                    isinstance(prev, ArcSegment)
                    and isinstance(prim, ArcSegment)
                    and same_circle(prev, prim)
                )
                radius = min(1.0 / abs(p.frenet(0.0).kappa) for p in arcs)
                return Geometry(GeometryKind.SMOOTH, radius, t_in, t_out, same)
        elif (
            angle <= _POLYLINE_RAD
            and isinstance(prev, LineSegment)
            and isinstance(prim, LineSegment)
            and prev_start_mm is not None
        ):
            r = circumradius(prev_start_mm, tp.point, end_mm)
            if math.isfinite(r):
                return Geometry(GeometryKind.SMOOTH, r, t_in, t_out, False)
    return Geometry(GeometryKind.CORNER, math.inf, t_in, t_out, False)
