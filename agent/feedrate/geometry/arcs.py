"""Circular and helical arcs (G2/G3) as path primitives (Farouki & Swett 2022, section 2), and
the centre of an R-format arc.

An arc is parameterised by arc length like every agent.feedrate.geometry.primitives primitive;
its axis events are the quadrant points, where one in-plane axis reverses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from agent.feedrate.geometry.primitives import (
    ANGLE_TOL_RAD,
    TWO_PI,
    AxisEvent,
    FrenetSample,
    PathPrimitive,
    Plane,
    TurningKind,
    Vec3,
    embed,
    sign_of,
)


def arc_centre_from_radius(
    start_ab: tuple[float, float],
    end_ab: tuple[float, float],
    radius_signed: float,
    clockwise: bool,
) -> tuple[float, float]:
    """In-plane centre of the R-format arc (RS-274: R < 0 selects the arc longer than 180 deg).

    Raises ValueError when start == end or |R| is shorter than half the chord.
    """
    da, db = end_ab[0] - start_ab[0], end_ab[1] - start_ab[1]
    chord = math.hypot(da, db)
    if chord == 0.0:
        raise ValueError("R-format arc needs an end point different from the start")
    r = abs(radius_signed)
    h2 = r * r - 0.25 * chord * chord
    if h2 < 0.0:
        # Rounded coordinates can make an exact half circle look a hair short.
        if -h2 > 1e-9 * max(r * r, 1e-12):
            raise ValueError(f"radius {r:g} is shorter than half the chord {chord / 2:g}")
        h2 = 0.0
    h = math.sqrt(h2)
    # Centre sits to the left of start->end for a counter-clockwise minor arc.
    if clockwise:
        h = -h
    if radius_signed < 0.0:
        h = -h
    return (
        0.5 * (start_ab[0] + end_ab[0]) - db / chord * h,
        0.5 * (start_ab[1] + end_ab[1]) + da / chord * h,
    )


@dataclass(frozen=True, slots=True)
class ArcSegment(PathPrimitive):
    """Circular arc in `plane` about `centre` (its normal coordinate is ignored), possibly helical.

    The radius is the start radius (as GRBL does); an end point off that circle by the parser's
    tolerance is reached by the controller's last step, so `point(length)` may differ from `end`
    by that much. start == end in the plane is a full circle.
    """

    start: Vec3
    end: Vec3
    centre: Vec3
    clockwise: bool
    plane: Plane = Plane.XY
    interior_kind: ClassVar[TurningKind] = TurningKind.QUADRANT
    radius: float = field(init=False)
    end_radius: float = field(init=False)
    theta0_rad: float = field(init=False)
    sweep_rad: float = field(init=False)
    rise_per_rad: float = field(init=False)
    length_per_rad: float = field(init=False)
    length: float = field(init=False)

    def __post_init__(self) -> None:
        ia, ib, inn = self.plane.value
        sa, sb = self.start[ia] - self.centre[ia], self.start[ib] - self.centre[ib]
        ea, eb = self.end[ia] - self.centre[ia], self.end[ib] - self.centre[ib]
        radius = math.hypot(sa, sb)
        if radius == 0.0:
            raise ValueError("arc radius is zero (centre at the start point)")
        theta0 = math.atan2(sb, sa)
        d = -1.0 if self.clockwise else 1.0
        chord = math.hypot(ea - sa, eb - sb)
        if chord <= 1e-12 * max(1.0, radius):
            sweep = TWO_PI
        else:
            sweep = (d * (math.atan2(eb, ea) - theta0)) % TWO_PI
            if sweep == 0.0:
                sweep = TWO_PI
        rise = (self.end[inn] - self.start[inn]) / sweep
        per_rad = math.hypot(radius, rise)
        setter = object.__setattr__
        setter(self, "radius", radius)
        setter(self, "end_radius", math.hypot(ea, eb))
        setter(self, "theta0_rad", theta0)
        setter(self, "sweep_rad", sweep)
        setter(self, "rise_per_rad", rise)
        setter(self, "length_per_rad", per_rad)
        setter(self, "length", sweep * per_rad)

    @property
    def direction(self) -> float:
        return -1.0 if self.clockwise else 1.0

    def _angle(self, s: float) -> tuple[float, float]:
        phi = s / self.length_per_rad
        return self.theta0_rad + self.direction * phi, phi

    def point(self, s: float) -> Vec3:
        th, phi = self._angle(s)
        axes = self.plane.value
        r = self.radius
        return embed(
            axes,
            self.centre[axes[0]] + r * math.cos(th),
            self.centre[axes[1]] + r * math.sin(th),
            self.start[axes[2]] + self.rise_per_rad * phi,
        )

    def tangent(self, s: float) -> Vec3:
        th, _ = self._angle(s)
        d, lr = self.direction, self.length_per_rad
        return embed(
            self.plane.value,
            -d * self.radius * math.sin(th) / lr,
            d * self.radius * math.cos(th) / lr,
            self.rise_per_rad / lr,
        )

    def frenet(self, s: float) -> FrenetSample:
        th, _ = self._angle(s)
        d, lr2 = self.direction, self.length_per_rad**2
        normal = embed(self.plane.value, -d * math.cos(th), -d * math.sin(th), 0.0)
        kappa = d * self.radius / lr2
        torsion = self.rise_per_rad / lr2
        return FrenetSample(s, self.point(s), self.tangent(s), normal, kappa, 0.0, 0.0, torsion)

    def axis_events(self) -> list[AxisEvent]:
        # Tangent components ~ (-d sin th, d cos th, rise): the first vanishes at th = 0, pi and
        # the second at +-pi/2 (the quadrant points). Just past a zero the new sign is
        # -sign(cos th) resp. -sign(sin th), whatever the direction.
        axes = self.plane.value
        d, th0, sweep = self.direction, self.theta0_rad, self.sweep_rad
        events: list[AxisEvent] = []
        for comp, base in ((0, 0.0), (1, 0.5 * math.pi)):
            first = (d * (base - th0)) % math.pi
            if first > math.pi - ANGLE_TOL_RAD:
                first -= math.pi
            if abs(first) <= ANGLE_TOL_RAD:
                th = th0 + d * first
                sign = -sign_of(math.cos(th)) if comp == 0 else -sign_of(math.sin(th))
                phi = first + math.pi
            else:
                sign = (
                    -int(d) * sign_of(math.sin(th0))
                    if comp == 0
                    else int(d) * sign_of(math.cos(th0))
                )
                phi = first
            events.append(AxisEvent(0.0, axes[comp], sign))
            while phi < sweep - ANGLE_TOL_RAD:
                th = th0 + d * phi
                sign = -sign_of(math.cos(th)) if comp == 0 else -sign_of(math.sin(th))
                events.append(AxisEvent(phi * self.length_per_rad, axes[comp], sign))
                phi += math.pi
        if self.rise_per_rad != 0.0:
            events.append(AxisEvent(0.0, axes[2], sign_of(self.rise_per_rad)))
        events.sort(key=lambda e: (e.s, e.axis))
        return events
