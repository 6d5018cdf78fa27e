"""Smooth planar parametric curves as path primitives (Farouki & Swett 2022, section 2): arc length
by quadrature, curvature and its arc-length derivatives from the parametric derivatives, and the
interior turning points where an axis derivative changes sign. Polynomial and Bezier builders.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import brentq

from agent.feedrate.geometry.primitives import (
    AxisEvent,
    FrenetSample,
    PathPrimitive,
    Plane,
    Vec3,
    embed,
    sign_of,
)

_GL_NODES, _GL_WEIGHTS = (a.tolist() for a in np.polynomial.legendre.leggauss(8))

# r(xi) and its first four derivatives, each as (a, b) in the plane's coordinates.
CurveDerivatives = Callable[[float], Sequence[Sequence[float]]]


class ParametricCurve(PathPrimitive):
    """Smooth planar curve r(xi), xi in [xi_start, xi_end], in `plane` at normal coordinate
    `offset`. `derivatives(xi)` returns r, r', r'', r''', r'''' as (a, b) pairs.

    Arc length comes from 8-point Gauss-Legendre quadrature on `panels` equal panels in xi and
    is inverted by Newton's method; the panels also set the resolution of the root search for
    interior turning points (any two roots of an axis derivative separated by an extremum of
    it are found; raise `panels` for curves that wiggle faster than that).
    """

    __slots__ = ("_cum", "_knots", "derivatives", "end", "length", "offset", "plane", "start")

    def __init__(
        self,
        derivatives: CurveDerivatives,
        xi_start: float,
        xi_end: float,
        *,
        plane: Plane = Plane.XY,
        offset: float = 0.0,
        panels: int = 64,
    ) -> None:
        if not xi_end > xi_start:
            raise ValueError(f"need xi_end > xi_start, got [{xi_start}, {xi_end}]")
        if panels < 1:
            raise ValueError("panels must be >= 1")
        self.derivatives = derivatives
        self.plane = plane
        self.offset = float(offset)
        self._knots: list[float] = np.linspace(xi_start, xi_end, panels + 1).tolist()
        cum = [0.0]
        for a, b in zip(self._knots[:-1], self._knots[1:], strict=True):
            cum.append(cum[-1] + self._integral(a, b))
        self._cum = cum
        self.length = cum[-1]
        if not self.length > 0.0:
            raise ValueError("curve has zero length")
        self.start = self._point_xi(xi_start)
        self.end = self._point_xi(xi_end)

    @property
    def xi_start(self) -> float:
        return self._knots[0]

    @property
    def xi_end(self) -> float:
        return self._knots[-1]

    def _speed(self, xi: float) -> float:
        d1 = self.derivatives(xi)[1]
        return math.hypot(d1[0], d1[1])

    def _integral(self, a: float, b: float) -> float:
        half, mid = 0.5 * (b - a), 0.5 * (a + b)
        return half * sum(
            w * self._speed(mid + half * x) for x, w in zip(_GL_NODES, _GL_WEIGHTS, strict=True)
        )

    def _point_xi(self, xi: float) -> Vec3:
        r = self.derivatives(xi)[0]
        return embed(self.plane.value, float(r[0]), float(r[1]), self.offset)

    def s_at(self, xi: float) -> float:
        """Arc length from xi_start to xi."""
        k = min(max(bisect.bisect_right(self._knots, xi) - 1, 0), len(self._knots) - 2)
        return self._cum[k] + self._integral(self._knots[k], xi)

    def xi_at(self, s: float) -> float:
        """Parameter at arc length s (Newton on the quadrature, inside one panel)."""
        if s < 0.0 or s > self.length * (1.0 + 1e-12):
            raise ValueError(f"arc length {s} outside [0, {self.length}]")
        cum, knots = self._cum, self._knots
        k = min(max(bisect.bisect_right(cum, s) - 1, 0), len(knots) - 2)
        a, b = knots[k], knots[k + 1]
        target = s - cum[k]
        xi = a + (b - a) * target / (cum[k + 1] - cum[k])
        for _ in range(40):
            step = (self._integral(a, xi) - target) / self._speed(xi)
            xi = min(max(xi - step, a), b)
            if abs(step) <= 1e-14 * (b - a):
                break
        return xi

    def point(self, s: float) -> Vec3:
        return self._point_xi(self.xi_at(s))

    def tangent(self, s: float) -> Vec3:
        return self.frenet(s).tangent

    def frenet(self, s: float) -> FrenetSample:
        return self.frenet_at_xi(self.xi_at(s), s)

    def frenet_at_xi(self, xi: float, s: float | None = None) -> FrenetSample:
        """Curvature and its arc-length derivatives from the xi-derivatives (paper eqs. 1-2 and
        the two formulas after eq. 3, re-derived: differentiate k sigma^3 = r' x r'' with
        d/dxi = sigma d/ds twice)."""
        r0, r1, r2, r3, r4 = (tuple(float(c) for c in v) for v in self.derivatives(xi)[:5])
        x1, y1 = r1
        x2, y2 = r2
        x3, y3 = r3
        x4, y4 = r4
        sig2 = x1 * x1 + y1 * y1
        sig = math.sqrt(sig2)
        if sig == 0.0:
            raise ValueError(f"parametric speed vanishes at xi={xi} (cusp)")
        dsig = (x1 * x2 + y1 * y2) / sig
        d2sig = (x1 * x3 + y1 * y3 + x2 * x2 + y2 * y2 - dsig * dsig) / sig
        kappa = (x1 * y2 - y1 * x2) / (sig2 * sig)
        kdot = ((x1 * y3 - y1 * x3) - 3.0 * sig2 * dsig * kappa) / (sig2 * sig2)
        kddot = (
            (x2 * y3 - y2 * x3)
            + (x1 * y4 - y1 * x4)
            - 3.0 * sig * (2.0 * dsig * dsig + sig * d2sig) * kappa
            - 7.0 * sig2 * sig * dsig * kdot
        ) / (sig2 * sig2 * sig)
        axes = self.plane.value
        ta, tb = x1 / sig, y1 / sig
        return FrenetSample(
            self.s_at(xi) if s is None else s,
            embed(axes, r0[0], r0[1], self.offset),
            embed(axes, ta, tb, 0.0),
            embed(axes, -tb, ta, 0.0),
            kappa,
            kdot,
            kddot,
        )

    def _component_roots(self, comp: int) -> list[float]:
        def f(x: float) -> float:
            return float(self.derivatives(x)[1][comp])

        def g(x: float) -> float:
            return float(self.derivatives(x)[2][comp])

        knots = self._knots
        vals = [f(x) for x in knots]
        accs = [g(x) for x in knots]
        roots: list[float] = []
        for k in range(len(knots) - 1):
            a, b, fa, fb = knots[k], knots[k + 1], vals[k], vals[k + 1]
            xtol = 1e-14 * (b - a)
            if fa == 0.0:
                roots.append(a)
            elif fa * fb < 0.0:
                roots.append(float(brentq(f, a, b, xtol=xtol)))
            elif fa * fb > 0.0 and accs[k] * accs[k + 1] < 0.0:
                # Same sign at both knots but r' has an extremum inside: it may dip through 0.
                e = float(brentq(g, a, b, xtol=xtol))
                fe = f(e)
                if fe * fa < 0.0:
                    roots.append(float(brentq(f, a, e, xtol=xtol)))
                    roots.append(float(brentq(f, e, b, xtol=xtol)))
        span = knots[-1] - knots[0]
        return [r for r in roots if knots[0] + 1e-9 * span < r < knots[-1] - 1e-9 * span]

    def axis_events(self) -> list[AxisEvent]:
        axes = self.plane.value
        events: list[AxisEvent] = []
        for comp in (0, 1):
            cuts = [self._knots[0], *self._component_roots(comp), self._knots[-1]]
            last = 0
            for i in range(len(cuts) - 1):
                mid = 0.5 * (cuts[i] + cuts[i + 1])
                sign = sign_of(float(self.derivatives(mid)[1][comp]))
                if sign != 0 and sign != last:
                    s = 0.0 if i == 0 else self.s_at(cuts[i])
                    events.append(AxisEvent(s, axes[comp], sign))
                    last = sign
        events.sort(key=lambda e: (e.s, e.axis))
        return events


def _horner(coeffs: Sequence[float], x: float) -> float:
    acc = 0.0
    for c in reversed(coeffs):
        acc = acc * x + c
    return acc


def polynomial_curve(
    coeffs_a: Sequence[float],
    coeffs_b: Sequence[float],
    xi_start: float = 0.0,
    xi_end: float = 1.0,
    *,
    plane: Plane = Plane.XY,
    offset: float = 0.0,
    panels: int = 64,
) -> ParametricCurve:
    """Planar polynomial curve, coefficients in the power basis (c0 + c1 xi + c2 xi^2 + ...)."""
    chains: list[list[list[float]]] = []
    for coeffs in (coeffs_a, coeffs_b):
        chain = [[float(c) for c in coeffs] or [0.0]]
        for _ in range(4):
            prev = chain[-1]
            chain.append([i * prev[i] for i in range(1, len(prev))] or [0.0])
        chains.append(chain)
    ca, cb = chains

    def derivatives(xi: float) -> list[tuple[float, float]]:
        return [(_horner(ca[k], xi), _horner(cb[k], xi)) for k in range(5)]

    return ParametricCurve(derivatives, xi_start, xi_end, plane=plane, offset=offset, panels=panels)


def bezier_curve(
    control_points: Sequence[tuple[float, float]],
    *,
    plane: Plane = Plane.XY,
    offset: float = 0.0,
    panels: int = 64,
) -> ParametricCurve:
    """Planar Bezier curve on xi in [0, 1] from its control points (in plane coordinates)."""
    n = len(control_points) - 1
    if n < 1:
        raise ValueError("a Bezier curve needs at least two control points")
    power: list[list[float]] = [[], []]
    for j in range(n + 1):
        for comp in (0, 1):
            # Bernstein -> power basis: c_j = C(n,j) sum_i (-1)^(j-i) C(j,i) P_i.
            total = sum(
                (-1) ** (j - i) * math.comb(j, i) * float(control_points[i][comp])
                for i in range(j + 1)
            )
            power[comp].append(math.comb(n, j) * total)
    return polynomial_curve(power[0], power[1], 0.0, 1.0, plane=plane, offset=offset, panels=panels)
