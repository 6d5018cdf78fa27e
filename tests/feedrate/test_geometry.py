"""Toolpath geometry (Farouki & Swett 2022 section 2): primitives, curvature derivatives, turning
points, and eq. 6 checked against brute-force deviation of the osculating circle."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad
from scipy.optimize import brentq
from scipy.special import ellipe, fresnel

from agent.feedrate.geometry.arcs import ArcSegment, arc_centre_from_radius
from agent.feedrate.geometry.curves import ParametricCurve, bezier_curve, polynomial_curve
from agent.feedrate.geometry.primitives import (
    LineSegment,
    OsculatingCircle,
    PathPrimitive,
    Plane,
    osculating_extent,
)
from agent.feedrate.geometry.turning_points import TurningPointTracker, turning_points

Derivs = Callable[[float], Sequence[Sequence[float]]]


# -- analytic test curves, derivatives written out by hand ------------------------------------


def ellipse(a: float, b: float, rotation: float = 0.0) -> Derivs:
    c, s = math.cos(rotation), math.sin(rotation)

    def derivs(t: float) -> list[tuple[float, float]]:
        ct, st_ = math.cos(t), math.sin(t)
        base = [(a * ct, b * st_), (-a * st_, b * ct), (-a * ct, -b * st_), (a * st_, -b * ct)]
        base.append(base[0])
        return [(c * x - s * y, s * x + c * y) for x, y in base]

    return derivs


def clothoid(a: float) -> Derivs:
    """Euler spiral with curvature s / a^2, parameterised by arc length (Fresnel integrals)."""
    k = a * math.sqrt(math.pi)

    def derivs(s: float) -> list[tuple[float, float]]:
        th, w, a2 = s * s / (2 * a * a), s / (a * a), a * a
        ct, st_ = math.cos(th), math.sin(th)
        fs, fc = fresnel(s / k)
        return [
            (k * float(fc), k * float(fs)),
            (ct, st_),
            (-st_ * w, ct * w),
            (-ct * w * w - st_ / a2, -st_ * w * w + ct / a2),
            (st_ * w**3 - 3 * w * ct / a2, -ct * w**3 - 3 * w * st_ / a2),
        ]

    return derivs


def close(p: Sequence[float], q: Sequence[float], tol: float = 1e-9) -> bool:
    return math.dist(p, q) <= tol


# -- primitives ---------------------------------------------------------------------------------


def test_line_segment_geometry_and_axis_events() -> None:
    line = LineSegment((1.0, 2.0, 3.0), (4.0, -2.0, 3.0))
    assert line.length == pytest.approx(5.0)
    assert close(line.point(2.5), (2.5, 0.0, 3.0))
    assert close(line.tangent(1.0), (0.6, -0.8, 0.0))
    assert line.curvature(1.0) == (0.0, 0.0, 0.0)
    assert [(e.axis, e.sign) for e in line.axis_events()] == [(0, 1), (1, -1)]
    circle = line.osculating_circle(0.0)
    assert circle.radius == math.inf and circle.centre is None
    assert circle.extent(1e-6) == math.inf


@pytest.mark.parametrize("plane", list(Plane))
@pytest.mark.parametrize("clockwise", [False, True])
def test_arc_in_every_plane(plane: Plane, clockwise: bool) -> None:
    ia, ib, inn = plane.value
    r, rise = 5.0, 0.0

    def pt(a: float, b: float, n: float = 0.0) -> tuple[float, float, float]:
        out = [0.0, 0.0, 0.0]
        out[ia], out[ib], out[inn] = a, b, n
        return (out[0], out[1], out[2])

    start, centre = pt(r, 0.0), pt(0.0, 0.0)
    end = pt(0.0, -r if clockwise else r, rise)
    arc = ArcSegment(start, end, centre, clockwise, plane)
    assert arc.sweep_rad == pytest.approx(math.pi / 2)
    assert arc.length == pytest.approx(r * math.pi / 2)
    assert close(arc.point(arc.length), end)
    half = arc.point(arc.length / 2)
    d = -1.0 if clockwise else 1.0
    assert close(half, pt(r / math.sqrt(2), d * r / math.sqrt(2)))
    f = arc.frenet(arc.length / 3)
    assert f.kappa == pytest.approx(d / r)
    assert f.dkappa_ds == 0.0 and f.d2kappa_ds2 == 0.0
    # The osculating circle of an arc is its own circle.
    circle = OsculatingCircle.from_frenet(f)
    assert close(circle.centre or (9, 9, 9), centre)
    assert math.sqrt(sum(c * c for c in f.tangent)) == pytest.approx(1.0)
    # Tangent is the derivative of the point (central difference).
    h = 1e-6
    p1, p0 = arc.point(1.0 + h), arc.point(1.0 - h)
    numeric = [(x1 - x0) / (2 * h) for x1, x0 in zip(p1, p0, strict=True)]
    assert close(numeric, arc.tangent(1.0), 1e-8)


def test_full_circle_and_major_arc() -> None:
    full = ArcSegment((1.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.0, 0.0), False)
    assert full.sweep_rad == pytest.approx(2 * math.pi)
    cw_major = ArcSegment((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 0.0), True)
    assert cw_major.sweep_rad == pytest.approx(1.5 * math.pi)
    with pytest.raises(ValueError, match="radius is zero"):
        ArcSegment((0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.0, 0.0), False)


def test_helical_arc_curvature_torsion_and_length() -> None:
    r, pitch_rise = 2.0, 3.0  # one full turn climbing 3
    helix = ArcSegment((r, 0.0, 0.0), (r, 0.0, pitch_rise), (0.0, 0.0, 0.0), False)
    c = pitch_rise / (2 * math.pi)
    assert helix.length == pytest.approx(2 * math.pi * math.hypot(r, c))
    f = helix.frenet(1.234)
    assert f.kappa == pytest.approx(r / (r * r + c * c))
    assert f.torsion == pytest.approx(c / (r * r + c * c))
    assert close(helix.point(helix.length), (r, 0.0, pitch_rise))
    # The osculating circle of a helix leaves it along the binormal at k*tau*s^3/6.
    circle = helix.osculating_circle(0.0)
    for eps in (1e-5, 1e-7):
        s_ext = circle.extent(eps)
        dev = max(
            math.dist(helix.point(s), circle.point_at(s)) for s in np.linspace(0.0, s_ext, 101)
        )
        assert dev / eps == pytest.approx(1.0, abs=0.02)


def test_arc_centre_from_radius_conventions() -> None:
    a, b = (1.0, 0.0), (0.0, 1.0)
    assert close(arc_centre_from_radius(a, b, 1.0, clockwise=False), (0.0, 0.0))
    assert close(arc_centre_from_radius(a, b, -1.0, clockwise=False), (1.0, 1.0))
    assert close(arc_centre_from_radius(a, b, 1.0, clockwise=True), (1.0, 1.0))
    assert close(arc_centre_from_radius(a, b, -1.0, clockwise=True), (0.0, 0.0))
    with pytest.raises(ValueError, match="shorter than half the chord"):
        arc_centre_from_radius(a, b, 0.5, clockwise=False)
    with pytest.raises(ValueError, match="different from the start"):
        arc_centre_from_radius(a, a, 1.0, clockwise=False)


# -- curvature and its arc-length derivatives ---------------------------------------------------


def test_clothoid_curvature_is_linear_in_arc_length() -> None:
    a = 1.3
    curve = ParametricCurve(clothoid(a), 0.2, 3.0)
    assert curve.length == pytest.approx(2.8, rel=1e-12)
    for s in (0.0, 0.7, 1.9, 2.8):
        kappa, kdot, kddot = curve.curvature(s)
        assert kappa == pytest.approx((0.2 + s) / a**2, rel=1e-10)
        assert kdot == pytest.approx(1 / a**2, rel=1e-9)
        assert kddot == pytest.approx(0.0, abs=1e-9)


def test_ellipse_curvature_derivatives_match_finite_differences() -> None:
    a, b = 3.0, 1.5
    curve = ParametricCurve(ellipse(a, b), 0.0, 2 * math.pi)
    # Perimeter against the complete elliptic integral: 4 a E(1 - b^2/a^2).
    assert curve.length == pytest.approx(4 * a * ellipe(1 - (b / a) ** 2), rel=1e-12)

    def kappa_at(s: float) -> float:
        t = curve.xi_at(s)
        return a * b / (a * a * math.sin(t) ** 2 + b * b * math.cos(t) ** 2) ** 1.5

    h = 1e-3
    for s in (0.4, 1.3, 2.9, 5.5):
        kappa, kdot, kddot = curve.curvature(s)
        assert kappa == pytest.approx(kappa_at(s), rel=1e-12)
        fd1 = (kappa_at(s + h) - kappa_at(s - h)) / (2 * h)
        fd2 = (kappa_at(s + h) - 2 * kappa_at(s) + kappa_at(s - h)) / h**2
        assert kdot == pytest.approx(fd1, rel=1e-5, abs=1e-8)
        assert kddot == pytest.approx(fd2, rel=1e-4, abs=1e-6)


def test_parabola_vertex_has_extremum_curvature() -> None:
    a = 0.7  # y = a x^2: kappa = 2a, kappa' = 0, kappa'' = -24 a^3 at the vertex
    curve = polynomial_curve([0.0, 1.0], [0.0, 0.0, a], -1.0, 1.0)
    xi_vertex = 0.0
    f = curve.frenet_at_xi(xi_vertex)
    assert f.kappa == pytest.approx(2 * a)
    assert f.dkappa_ds == pytest.approx(0.0, abs=1e-12)
    assert f.d2kappa_ds2 == pytest.approx(-24 * a**3)
    assert curve.xi_at(curve.s_at(0.3)) == pytest.approx(0.3, abs=1e-13)


def test_bezier_matches_de_casteljau() -> None:
    ctrl = [(0.0, 0.0), (1.0, 2.0), (2.5, -1.0), (3.0, 1.0), (4.0, 0.5)]
    curve = bezier_curve(ctrl)

    def casteljau(t: float) -> tuple[float, float]:
        pts = [np.array(p) for p in ctrl]
        while len(pts) > 1:
            pts = [(1 - t) * p + t * q for p, q in itertools.pairwise(pts)]
        return (float(pts[0][0]), float(pts[0][1]))

    for t in (0.0, 0.25, 0.6, 1.0):
        assert close(curve.derivatives(t)[0], casteljau(t), 1e-12)
    assert close(curve.start, (0.0, 0.0, 0.0)) and close(curve.end, (4.0, 0.5, 0.0))


def test_curve_in_other_planes_embeds_coordinates() -> None:
    curve = polynomial_curve([1.0, 1.0], [2.0, 0.0, 1.0], plane=Plane.ZX, offset=7.0)
    # plane coordinates (a, b) = (Z, X); Y is the offset
    assert close(curve.start, (2.0, 7.0, 1.0))
    assert close(curve.end, (3.0, 7.0, 2.0))


# -- turning points -----------------------------------------------------------------------------


def test_vertices_of_a_square_and_a_stationary_axis() -> None:
    pts = [(0.0, 0.0, 0.0), (10.0, 0.0, 0.0), (10.0, 5.0, 0.0), (0.0, 5.0, 0.0), (0.0, 0.0, 0.0)]
    lines = [LineSegment(p, q) for p, q in itertools.pairwise(pts)]
    tps = list(turning_points(lines))
    # X reverses at the start of the third side (after standing still on the second); Y at the
    # start of the fourth.
    assert [(tp.axes, tp.directions, tp.kind, tp.s) for tp in tps] == [
        (("X",), (-1,), "vertex", 15.0),
        (("Y",), (-1,), "vertex", 25.0),
    ]
    assert tps[0].tangent_in == (0.0, 1.0, 0.0) and tps[0].tangent_out == (-1.0, 0.0, 0.0)
    assert tps[0].primitive_index == 2 and tps[0].point == (10.0, 5.0, 0.0)


def test_zigzag_reverses_both_axes_at_one_vertex() -> None:
    lines = [LineSegment((0.0, 0.0, 0.0), (1.0, 1.0, 0.0)), LineSegment((1.0, 1.0, 0.0), (0, 0, 0))]
    (tp,) = turning_points(lines)
    assert tp.axes == ("X", "Y") and tp.directions == (-1, -1)


def test_full_circle_quadrant_points() -> None:
    circle = ArcSegment((5.0, 0.0, 0.0), (5.0, 0.0, 0.0), (0.0, 0.0, 0.0), False)
    lead_in = LineSegment((5.0, -3.0, 0.0), (5.0, 0.0, 0.0))
    tps = list(turning_points([lead_in, circle]))
    quarter = 5.0 * math.pi / 2
    assert [(tp.axes, tp.directions, tp.kind) for tp in tps] == [
        (("Y",), (-1,), "quadrant"),
        (("X",), (1,), "quadrant"),
        (("Y",), (1,), "quadrant"),
    ]
    assert [tp.s for tp in tps] == pytest.approx([3 + quarter, 3 + 2 * quarter, 3 + 3 * quarter])
    assert close(tps[0].point, (0.0, 5.0, 0.0)) and close(tps[1].point, (-5.0, 0.0, 0.0))


def test_arc_starting_on_a_quadrant_point_reverses_at_the_vertex() -> None:
    # Moving +X into a CCW half circle that starts at its rightmost point: X turns back right
    # after the joint, so its reversal is the vertex; Y reverses at the top, inside the arc.
    approach = LineSegment((4.0, -3.0, 0.0), (5.0, 0.0, 0.0))
    arc = ArcSegment((5.0, 0.0, 0.0), (-5.0, 0.0, 0.0), (0.0, 0.0, 0.0), False)
    tps = list(turning_points([approach, arc]))
    assert [(tp.axes, tp.kind, tp.s_local) for tp in tps] == [
        (("X",), "vertex", 0.0),
        (("Y",), "quadrant", pytest.approx(2.5 * math.pi)),
    ]
    # Approaching with -X instead, the same joint is no reversal.
    away = LineSegment((6.0, -3.0, 0.0), (5.0, 0.0, 0.0))
    assert [tp.axes for tp in turning_points([away, arc])] == [("Y",)]


@pytest.mark.parametrize(("plane", "names"), [(Plane.ZX, ("Z", "X")), (Plane.YZ, ("Y", "Z"))])
def test_quadrant_points_name_the_plane_axes(plane: Plane, names: tuple[str, str]) -> None:
    ia, ib, _ = plane.value

    def pt(a: float, b: float) -> tuple[float, float, float]:
        out = [0.0, 0.0, 0.0]
        out[ia], out[ib] = a, b
        return (out[0], out[1], out[2])

    arc = ArcSegment(pt(0.0, -2.0), pt(0.0, 2.0), pt(0.0, 0.0), False, plane)
    (tp,) = turning_points([arc])
    assert tp.axes == (names[0],) and close(tp.point, pt(2.0, 0.0))


def test_interior_turning_points_of_an_ellipse() -> None:
    curve = ParametricCurve(ellipse(2.0, 1.0), 0.1, 2 * math.pi + 0.1)
    tps = list(turning_points([curve]))
    # y' = b cos t vanishes at pi/2 and 3pi/2, x' = -a sin t at pi and 2pi.
    expected = [(math.pi / 2, "Y"), (math.pi, "X"), (1.5 * math.pi, "Y"), (2 * math.pi, "X")]
    assert [tp.axes for tp in tps] == [(name,) for _, name in expected]
    for tp, (t, _) in zip(tps, expected, strict=True):
        assert tp.kind == "interior"
        assert curve.xi_at(tp.s_local) == pytest.approx(t, abs=1e-10)


def test_bezier_turning_points_are_roots_of_the_derivative() -> None:
    ctrl = [(0.0, 0.0), (3.0, 2.0), (-1.0, 1.0), (4.0, 3.0), (2.0, -1.0)]
    curve = bezier_curve(ctrl)
    tps = list(turning_points([curve]))
    found = sorted((curve.xi_at(tp.s_local), tp.axes[0]) for tp in tps)
    expected = []
    for comp, name in ((0, "X"), (1, "Y")):
        coeffs = np.polynomial.polynomial.polyder(
            [curve.derivatives(0.0)[k][comp] / math.factorial(k) for k in range(5)]
        )
        for root in np.polynomial.polynomial.polyroots(coeffs):
            if abs(root.imag) < 1e-12 and 0 < root.real < 1:
                expected.append((float(root.real), name))
    expected.sort()
    assert [n for _, n in found] == [n for _, n in expected]
    assert [x for x, _ in found] == pytest.approx([x for x, _ in expected], abs=1e-10)


def test_two_roots_inside_one_panel_and_a_touching_zero() -> None:
    # x'(xi) = (xi - 0.5)^2 - d^2: two reversals 2d apart, inside the middle one of 3 panels,
    # where x' has the same sign at both knots.
    d = 0.01
    two = polynomial_curve([0.0, 0.25 - d * d, -0.5, 1.0 / 3.0], [0.0, 1.0], panels=3)
    tps = list(turning_points([two]))
    assert [tp.axes for tp in tps] == [("X",), ("X",)]
    xis = [two.xi_at(tp.s_local) for tp in tps]
    assert xis == pytest.approx([0.5 - d, 0.5 + d], abs=1e-10)
    # x'(xi) = (xi - 0.5)^2 touches zero without changing sign: an inflectional tangent is no
    # reversal (Farouki & Swett 2022, footnote 1).
    touch = polynomial_curve([0.0, 0.25, -0.5, 1.0 / 3.0], [0.0, 1.0], panels=3)
    assert list(turning_points([touch])) == []


def test_streaming_tracker_matches_batch_and_counts_length() -> None:
    prims: list[PathPrimitive] = [
        LineSegment((0.0, 0.0, 0.0), (4.0, 1.0, 0.0)),
        ArcSegment((4.0, 1.0, 0.0), (4.0, 5.0, 0.0), (4.0, 3.0, 0.0), False),
        LineSegment((4.0, 5.0, 0.0), (4.0, 5.0, 0.0)),  # zero length: ignored
        LineSegment((4.0, 5.0, 0.0), (8.0, 5.0, 1.0)),
        bezier_curve([(8.0, 5.0), (12.0, 9.0), (6.0, 9.0)], offset=1.0),
    ]
    tracker = TurningPointTracker()
    streamed = [tp for p in prims for tp in tracker.feed(p)]
    assert streamed == list(turning_points(prims))
    assert tracker.arc_length == pytest.approx(sum(p.length for p in prims))
    kinds = [tp.kind for tp in streamed]
    assert "quadrant" in kinds and "vertex" in kinds and "interior" in kinds
    assert all(a.s < b.s for a, b in itertools.pairwise(streamed))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-5, 5).map(float), st.integers(-5, 5).map(float), st.just(0.0)),
        min_size=2,
        max_size=12,
    )
)
def test_polyline_reversals_match_sign_sequence(points: list[tuple[float, float, float]]) -> None:
    """On a polyline every axis reverses exactly where its direction of motion flips, ignoring
    segments on which it stands still."""
    lines = [LineSegment(p, q) for p, q in itertools.pairwise(points)]
    tps = list(turning_points(lines))
    for axis, name in enumerate("XY"):
        moves = [q[axis] - p[axis] for p, q in itertools.pairwise(points)]
        signs = [int(math.copysign(1, m)) for m in moves if m != 0]
        flips = sum(1 for u, v in itertools.pairwise(signs) if u != v)
        assert sum(name in tp.axes for tp in tps) == flips


# -- eq. 6 against brute force ------------------------------------------------------------------


def brute_force_deviation(curve: ParametricCurve, xi0: float, s_ext: float) -> tuple[float, float]:
    """Max |r(s) - c(s)| over |s| <= s_ext (points at equal arc length, the paper's delta) and
    max distance of the curve from the circle, by dense sampling. Arc length by adaptive
    quadrature, independent of the curve's own arc-length table."""

    def speed(x: float) -> float:
        return math.hypot(*curve.derivatives(x)[1])

    def arclen(x: float) -> float:
        return float(quad(speed, xi0, x, epsabs=1e-16, epsrel=1e-13, limit=200)[0])

    def xi_at_distance(direction: float) -> float:
        step = direction * 2 * s_ext / speed(xi0)
        far = xi0 + step
        while abs(arclen(far)) < s_ext:
            far += step
        return float(brentq(lambda x: abs(arclen(x)) - s_ext, xi0, far, xtol=1e-15))

    circle = OsculatingCircle.from_frenet(curve.frenet_at_xi(xi0, 0.0))
    centre, rho = circle.centre, circle.radius
    assert centre is not None
    pointwise = radial = 0.0
    for x in np.linspace(xi_at_distance(-1.0), xi_at_distance(1.0), 161):
        r = curve.derivatives(float(x))[0]
        p = (r[0], r[1], 0.0)
        pointwise = max(pointwise, math.dist(p, circle.point_at(arclen(float(x)))))
        radial = max(radial, abs(math.dist(p, centre) - rho))
    return pointwise, radial


EQ6_CURVES = {
    # turning points with kappa' != 0: the cubic term of eq. 4 sets the extent
    "rotated ellipse": lambda: ParametricCurve(ellipse(2.0, 1.0, 0.5), 0.0, 2 * math.pi),
    "cubic bezier": lambda: bezier_curve([(0.0, 0.0), (1.0, 2.0), (2.0, -1.0), (3.0, 1.0)]),
    # kappa'' = 0: clothoid
    "clothoid": lambda: ParametricCurve(clothoid(1.0), 0.5, 3.0),
    # curvature extrema (kappa' = 0): the quartic term sets the extent
    "ellipse vertex": lambda: ParametricCurve(ellipse(2.0, 1.0), -1.0, 2.0),
    "parabola vertex": lambda: polynomial_curve([0.0, 1.0], [0.0, 0.0, 0.5], -1.0, 1.0),
}


@pytest.mark.parametrize("name", sorted(EQ6_CURVES))
def test_eq6_extent_against_brute_force(name: str) -> None:
    """At the extent of eq. 6 the osculating circle deviates from the curve by eps times the
    truncated series ratio (|k'| s^3/6 + |k''| s^4/24) / eps, up to O(s^2); that ratio is
    1 + O(s) for the paper's formula and exactly 1 for method="combined"."""
    curve = EQ6_CURVES[name]()
    tps = list(turning_points([curve]))
    assert tps, "each test curve has turning points"
    for tp in tps[:2]:
        xi0 = curve.xi_at(tp.s_local)
        axis = "XY".index(tp.axes[0])
        assert curve.derivatives(xi0)[1][axis] == pytest.approx(0.0, abs=1e-12)
        f = curve.frenet_at_xi(xi0)
        kd, kdd = abs(f.dkappa_ds), abs(f.d2kappa_ds2)
        ratios = []
        for eps in (1e-5, 1e-6, 1e-7):
            for method in ("paper", "combined"):
                s_ext = osculating_extent(f.dkappa_ds, f.d2kappa_ds2, eps, method=method)
                pointwise, radial = brute_force_deviation(curve, xi0, s_ext)
                predicted = (kd * s_ext**3 / 6 + kdd * s_ext**4 / 24) / eps
                if method == "combined":
                    assert predicted == pytest.approx(1.0, rel=1e-12)
                ratio = pointwise / eps
                assert abs(ratio - predicted) <= 5 * s_ext**2, (eps, method, ratio, predicted)
                assert radial <= pointwise * (1 + 1e-6)
                if method == "paper":
                    ratios.append(ratio)
        # The paper's estimate converges to eps as eps -> 0.
        assert abs(ratios[-1] - 1) < 0.01
        assert abs(ratios[-1] - 1) <= abs(ratios[0] - 1) + 1e-4


def test_osculating_extent_formula_cases() -> None:
    eps = 1e-6
    assert osculating_extent(2.0, 0.0, eps) == pytest.approx((6 * eps / 2.0) ** (1 / 3))
    assert osculating_extent(0.0, 3.0, eps) == pytest.approx((24 * eps / 3.0) ** 0.25)
    both = osculating_extent(2.0, 3.0, eps)
    assert both == min((6 * eps / 2.0) ** (1 / 3), (24 * eps / 3.0) ** 0.25)
    combined = osculating_extent(2.0, 3.0, eps, method="combined")
    assert combined < both
    assert 2.0 * combined**3 / 6 + 3.0 * combined**4 / 24 == pytest.approx(eps, rel=1e-12)
    assert osculating_extent(0.0, 0.0, eps) == math.inf
    with pytest.raises(ValueError, match="eps"):
        osculating_extent(1.0, 1.0, 0.0)


def test_deviation_estimate_matches_curve_for_small_s() -> None:
    curve = bezier_curve([(0.0, 0.0), (1.0, 2.0), (2.0, -1.0), (3.0, 1.0)])
    s0 = 1.0
    circle = curve.osculating_circle(s0)
    for ds in (0.02, -0.01):
        true = math.dist(curve.point(s0 + ds), circle.point_at(ds))
        assert circle.deviation_estimate(ds) == pytest.approx(true, rel=0.05)
    d = circle.to_dict()
    assert d["radius"] == pytest.approx(1 / abs(circle.kappa))
