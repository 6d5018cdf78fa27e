"""Toolpath geometry for feedrate modulation (Farouki & Swett 2022, section 2).

Path primitives - line segments, circular (and helical) arcs, and smooth planar parametric
curves (agent.feedrate.geometry.curves) - give the point, unit tangent, signed curvature and its
first two arc-length derivatives at an arc length s, and the axis events from which
agent.feedrate.geometry.turning_points finds where an axis velocity changes sign. The osculating
circle at a point and the extent of eq. 6 say how far that circle stays within a tolerance of the
path.

Lengths are in the caller's unit (the G-code layer uses mm) and curvature in 1/length. Points are
plain (x, y, z) tuples: a streamed toolpath builds one primitive per line, and numpy's per-call
cost on 3-vectors would dominate.

Curvature is signed with respect to the normal axis of the primitive's plane (positive when the
path turns counter-clockwise seen from that axis, as a G3 arc does) and `normal` is the unit
vector z x t, so the centre of curvature is always point + normal / kappa.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from enum import Enum, StrEnum
from typing import Any, ClassVar, Literal, NamedTuple

Vec3 = tuple[float, float, float]
AXIS_NAMES = ("X", "Y", "Z")
ExtentMethod = Literal["paper", "combined"]

# Unit-tangent components below this count as "axis not moving": G-code coordinates repeat
# exactly, so real motion is many orders of magnitude larger.
AXIS_ZERO_TOL = 1e-12
# Quadrant angles this close (rad) to an arc end belong to the end, not the interior.
ANGLE_TOL_RAD = 1e-9
TWO_PI = 2.0 * math.pi


class TurningKind(StrEnum):
    """Where a turning point lies: at the vertex between two primitives, at a quadrant point of
    an arc, or inside a smooth curve."""

    VERTEX = "vertex"
    QUADRANT = "quadrant"
    INTERIOR = "interior"


class Plane(Enum):
    """Working plane as (first axis, second axis, normal axis) indices, right-handed, so that
    G3 (counter-clockwise) is counter-clockwise seen from the positive normal axis."""

    XY = (0, 1, 2)  # G17
    ZX = (2, 0, 1)  # G18
    YZ = (1, 2, 0)  # G19


def embed(axes: tuple[int, int, int], a: float, b: float, n: float) -> Vec3:
    out = [0.0, 0.0, 0.0]
    out[axes[0]] = a
    out[axes[1]] = b
    out[axes[2]] = n
    return (out[0], out[1], out[2])


def sign_of(value: float) -> int:
    return 1 if value > 0.0 else (-1 if value < 0.0 else 0)


@dataclass(frozen=True, slots=True)
class FrenetSample:
    """Local differential geometry at arc length `s` of one primitive."""

    s: float
    point: Vec3
    tangent: Vec3
    normal: Vec3
    kappa: float
    dkappa_ds: float
    d2kappa_ds2: float
    torsion: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def osculating_extent(
    dkappa_ds: float,
    d2kappa_ds2: float,
    eps: float,
    *,
    kappa: float = 0.0,
    torsion: float = 0.0,
    method: ExtentMethod = "paper",
) -> float:
    """Half-length |s| over which the osculating circle stays within `eps` of the path (eq. 6).

    Derivation (Farouki & Swett 2022, eqs. 3-6). The arc-length Taylor series of a plane curve
    about r0 is
        r(s) = r0 + t s + k n s^2/2 + (k' n - k^2 t) s^3/6 + ((k'' - k^3) n - 3 k k' t) s^4/24 + ...
    (differentiate t' = k n, n' = -k t three times). The osculating circle has the same r0, t, n,
    k and k' = k'' = 0, so the deviation at equal arc length is
        delta(s) = k' n s^3/6 + (k'' n - 3 k k' t) s^4/24 + O(s^5)              (eq. 4)
    Dropping the small t term and asking each remaining term to be <= eps on its own gives
        |s| = min[(6 eps/|k'|)^(1/3), (24 eps/|k''|)^(1/4)]                     (eq. 6)
    This is an estimate, not a bound: at that |s| the true deviation is eps (1 + O(|s|)), with
    the cubic term setting the extent for small eps whenever k' != 0. method="combined" instead
    solves |k'| s^3/6 + |k''| s^4/24 = eps, which bounds the truncated series by eps.

    Space curves (helical arcs) add k tau b s^3/6 along the binormal b; it is orthogonal to n,
    so the cubic coefficient becomes hypot(k', k tau)/6 (reduces to the paper for tau = 0).
    Returns math.inf when the circle matches the path to all orders used (a circle or a line).
    """
    if not eps > 0.0:
        raise ValueError(f"tolerance eps must be > 0, got {eps!r}")
    cubic = math.hypot(dkappa_ds, kappa * torsion) / 6.0
    quartic = abs(d2kappa_ds2) / 24.0
    s3 = (eps / cubic) ** (1.0 / 3.0) if cubic > 0.0 else math.inf
    s4 = (eps / quartic) ** 0.25 if quartic > 0.0 else math.inf
    s = min(s3, s4)
    if method == "paper" or math.isinf(s):
        return s
    # f(s) = cubic s^3 + quartic s^4 - eps is convex and increasing for s > 0 and f(s) >= 0 at
    # the paper's extent, so Newton from there converges monotonically from above.
    for _ in range(60):
        f = cubic * s**3 + quartic * s**4 - eps
        step = f / (3.0 * cubic * s * s + 4.0 * quartic * s**3)
        s -= step
        if abs(step) <= 1e-15 * s:
            break
    return s


@dataclass(frozen=True, slots=True)
class OsculatingCircle:
    """The circle with second-order contact at `point` (Farouki & Swett 2022, section 2)."""

    point: Vec3
    tangent: Vec3
    normal: Vec3
    kappa: float
    dkappa_ds: float
    d2kappa_ds2: float
    torsion: float = 0.0

    @classmethod
    def from_frenet(cls, f: FrenetSample) -> OsculatingCircle:
        return cls(f.point, f.tangent, f.normal, f.kappa, f.dkappa_ds, f.d2kappa_ds2, f.torsion)

    @property
    def radius(self) -> float:
        return math.inf if self.kappa == 0.0 else 1.0 / abs(self.kappa)

    @property
    def centre(self) -> Vec3 | None:
        if self.kappa == 0.0:
            return None
        p, n, k = self.point, self.normal, self.kappa
        return (p[0] + n[0] / k, p[1] + n[1] / k, p[2] + n[2] / k)

    def point_at(self, s: float) -> Vec3:
        """Point of the circle at signed arc length s from the contact point (along tangent)."""
        p, t, n, k = self.point, self.tangent, self.normal, self.kappa
        if k == 0.0:
            return (p[0] + t[0] * s, p[1] + t[1] * s, p[2] + t[2] * s)
        a = math.sin(k * s) / k
        b = (1.0 - math.cos(k * s)) / k
        return (p[0] + t[0] * a + n[0] * b, p[1] + t[1] * a + n[1] * b, p[2] + t[2] * a + n[2] * b)

    def deviation_estimate(self, s: float) -> float:
        """|delta(s)| from the two leading terms of eq. 4 (normal and tangential parts)."""
        k, k1, k2 = self.kappa, self.dkappa_ds, self.d2kappa_ds2
        normal = k1 * s**3 / 6.0 + k2 * s**4 / 24.0
        binormal = k * self.torsion * s**3 / 6.0
        tangential = -3.0 * k * k1 * s**4 / 24.0
        return math.sqrt(normal * normal + binormal * binormal + tangential * tangential)

    def extent(self, eps: float, method: ExtentMethod = "paper") -> float:
        return osculating_extent(
            self.dkappa_ds,
            self.d2kappa_ds2,
            eps,
            kappa=self.kappa,
            torsion=self.torsion,
            method=method,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["radius"] = self.radius
        out["centre"] = self.centre
        return out


class AxisEvent(NamedTuple):
    """From arc length `s` of a primitive on, axis `axis` (0..2) moves with sign `sign`."""

    s: float
    axis: int
    sign: int


class PathPrimitive(ABC):
    """One piece of a toolpath, parameterised by arc length s in [0, length]."""

    __slots__ = ()
    interior_kind: ClassVar[TurningKind] = TurningKind.INTERIOR
    start: Vec3
    end: Vec3
    length: float

    @abstractmethod
    def point(self, s: float) -> Vec3: ...

    @abstractmethod
    def tangent(self, s: float) -> Vec3: ...

    @abstractmethod
    def frenet(self, s: float) -> FrenetSample: ...

    @abstractmethod
    def axis_events(self) -> list[AxisEvent]:
        """Sign of each moving axis at s = 0+ and at every interior sign change, sorted by s."""

    def curvature(self, s: float) -> tuple[float, float, float]:
        """(kappa, dkappa/ds, d2kappa/ds2) at arc length s."""
        f = self.frenet(s)
        return f.kappa, f.dkappa_ds, f.d2kappa_ds2

    def osculating_circle(self, s: float) -> OsculatingCircle:
        return OsculatingCircle.from_frenet(self.frenet(s))


_set_frozen = object.__setattr__


@dataclass(frozen=True, slots=True, init=False)
class LineSegment(PathPrimitive):
    """LineSegment(start, end); length and direction follow from them."""

    start: Vec3
    end: Vec3
    length: float
    direction: Vec3

    def __init__(self, start: Vec3, end: Vec3) -> None:
        # Written out rather than generated + __post_init__: one is built per streamed line,
        # and this is a quarter cheaper.
        d0, d1, d2 = end[0] - start[0], end[1] - start[1], end[2] - start[2]
        length = math.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
        _set_frozen(self, "start", start)
        _set_frozen(self, "end", end)
        _set_frozen(self, "length", length)
        _set_frozen(
            self,
            "direction",
            (d0 / length, d1 / length, d2 / length) if length > 0.0 else (0.0, 0.0, 0.0),
        )

    def point(self, s: float) -> Vec3:
        p, u = self.start, self.direction
        return (p[0] + u[0] * s, p[1] + u[1] * s, p[2] + u[2] * s)

    def tangent(self, s: float) -> Vec3:
        return self.direction

    def frenet(self, s: float) -> FrenetSample:
        u = self.direction
        h = math.hypot(u[0], u[1])
        # A line has no normal of its own; z x t keeps the convention of the XY plane.
        normal = (-u[1] / h, u[0] / h, 0.0) if h > 0.0 else (1.0, 0.0, 0.0)
        return FrenetSample(s, self.point(s), u, normal, 0.0, 0.0, 0.0)

    def axis_events(self) -> list[AxisEvent]:
        return [
            AxisEvent(0.0, i, sign_of(c))
            for i, c in enumerate(self.direction)
            if abs(c) > AXIS_ZERO_TOL
        ]
