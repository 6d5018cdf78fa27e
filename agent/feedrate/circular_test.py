"""ISO 230-4 style circular test on the simulated fake CNC (agent.feedrate.executor): the
program (`circle_program`: approach, settle, lead-in arc, one lap, lead-out arc) and the radial
deviation of the realised path from the nominal circle (`circular_test`, `radial_error`: max,
RMS, and the circular deviation G about the least-squares centre).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.feedrate.executor import MM, Array, Execution, Vec3


@dataclass(frozen=True)
class RadialError:
    """Deviation of a path from a nominal circle (ISO 230-4 style circular test)."""

    centre_m: tuple[float, float]
    radius_m: float
    samples: int
    max_abs_m: float  # max |r - R|
    rms_m: float
    min_deviation_m: float  # most inside (r - R < 0)
    max_deviation_m: float  # most outside
    circular_deviation_m: float  # ISO 230-4 G: max r - min r about the least-squares centre
    start_s: float | None = None
    end_s: float | None = None

    @property
    def max_fraction(self) -> float:
        """Farouki & Swett 2022's max |e|, e = (r - rho_0) / rho_0 (figure 11)."""
        return self.max_abs_m / self.radius_m

    @property
    def rms_fraction(self) -> float:
        return self.rms_m / self.radius_m

    def to_dict(self) -> dict[str, Any]:
        return {
            "centre_m": list(self.centre_m),
            "radius_m": self.radius_m,
            "samples": self.samples,
            "max_abs_m": self.max_abs_m,
            "rms_m": self.rms_m,
            "min_deviation_m": self.min_deviation_m,
            "max_deviation_m": self.max_deviation_m,
            "circular_deviation_m": self.circular_deviation_m,
            "max_fraction": self.max_fraction,
            "rms_fraction": self.rms_fraction,
            "start_s": self.start_s,
            "end_s": self.end_s,
        }


def radial_error(
    points_m: Array,
    centre_m: tuple[float, float],
    radius_m: float,
    *,
    start_s: float | None = None,
    end_s: float | None = None,
) -> RadialError:
    """Radial deviation of points (N, 2) in m from the circle; max, RMS and ISO 230-4 G."""
    p = np.asarray(points_m, dtype=float).reshape(-1, 2)
    if len(p) < 3 or not radius_m > 0:
        raise ValueError(
            f"radial_error: need >= 3 points and radius_m > 0, got {len(p)} "
            f"points, radius {radius_m!r}"
        )
    dev = np.hypot(p[:, 0] - centre_m[0], p[:, 1] - centre_m[1]) - radius_m
    # Least-squares (Kasa) centre: x^2 + y^2 = 2 a x + 2 b y + c, linear in (a, b, c).
    q = p - p.mean(axis=0)
    sol = np.linalg.lstsq(
        np.column_stack([2 * q, np.ones(len(q))]), (q**2).sum(axis=1), rcond=None
    )[0]
    r_lsq = np.hypot(q[:, 0] - sol[0], q[:, 1] - sol[1])
    return RadialError(
        (float(centre_m[0]), float(centre_m[1])),
        float(radius_m),
        len(p),
        float(np.max(np.abs(dev))),
        float(np.sqrt(np.mean(dev**2))),
        float(np.min(dev)),
        float(np.max(dev)),
        float(np.max(r_lsq) - np.min(r_lsq)),
        start_s,
        end_s,
    )


def circle_window(
    run: Execution, centre_mm: tuple[float, float], radius_mm: float, tol_mm: float = 1e-3
) -> tuple[float, float]:
    """From the start of the first block that starts on the circle to the end of the last
    block that ends on it (leaves out approach and retract moves)."""

    def on(p: Vec3) -> bool:
        return abs(math.hypot(p[0] - centre_mm[0], p[1] - centre_mm[1]) - radius_mm) <= tol_mm

    first = next((b for b in run.blocks if on(b.start_mm)), None)
    last = next((b for b in reversed(run.blocks) if on(b.end_mm)), None)
    if first is None or last is None or last.end_s <= first.start_s:
        raise ValueError(
            f"circle_window: no block runs on the circle of radius {radius_mm} mm about {centre_mm}"
        )
    return first.start_s, last.end_s


def circular_test(
    run: Execution, centre_mm: tuple[float, float], radius_mm: float, *, skip_mm: float = 0.0
) -> RadialError:
    """Radial error of the realised path over the part of the program on the circle, less the
    first and last skip_mm of commanded path (lead-in and lead-out arcs, ISO 230-4 overrun)."""
    start, end = circle_window(run, centre_mm, radius_mm)
    mask = run.between(start, end)
    if skip_mm > 0.0:
        steps = np.hypot(*np.diff(run.commanded_m[mask], axis=0).T) / MM
        s = np.concatenate([[0.0], np.cumsum(steps)])
        keep = (s >= skip_mm) & (s <= s[-1] - skip_mm)
        idx = np.nonzero(mask)[0][keep]
        if idx.size < 3:
            raise ValueError(f"circular_test: skip_mm={skip_mm} leaves nothing of the circle")
        mask = np.zeros_like(mask)
        mask[idx] = True
        start, end = float(run.time_s[idx[0]]), float(run.time_s[idx[-1]])
    return radial_error(
        run.realised_m[mask],
        (centre_mm[0] * MM, centre_mm[1] * MM),
        radius_mm * MM,
        start_s=start,
        end_s=end,
    )


def circle_program(
    radius_mm: float,
    feed_mm_min: float,
    *,
    centre_mm: tuple[float, float] = (0.0, 0.0),
    clockwise: bool = False,
    lead_deg: float = 90.0,
    settle_s: float = 1.0,
) -> list[str]:
    """An ISO 230-4 style circle: a rapid to the circle, a dwell of settle_s for the axes to
    come to rest, a lead-in arc of lead_deg, the measured full lap from angle 0 (+X of the
    centre), a lead-out arc of lead_deg; measure it with circular_test(skip_mm=lead_mm)."""
    if not (radius_mm > 0 and feed_mm_min > 0 and 0 <= lead_deg < 360 and settle_s >= 0):
        raise ValueError(
            "circle_program: need radius_mm > 0, feed_mm_min > 0, 0 <= lead_deg "
            "< 360, settle_s >= 0"
        )
    cx, cy = centre_mm
    sense = -1.0 if clockwise else 1.0
    word = "G2" if clockwise else "G3"

    def at(deg: float) -> tuple[float, float]:
        a = math.radians(sense * deg)
        return cx + radius_mm * math.cos(a), cy + radius_mm * math.sin(a)

    def arc(from_deg: float, to_deg: float, feed: str = "") -> str:
        (x0, y0), (x1, y1) = at(from_deg), at(to_deg)
        return f"{word} X{x1:.4f} Y{y1:.4f} I{cx - x0:.4f} J{cy - y0:.4f}{feed}\n"

    x, y = at(-lead_deg)
    lines = ["G17 G21 G90 G94\n", f"G0 X{x:.4f} Y{y:.4f}\n"]
    if settle_s > 0:
        lines.append(f"G4 P{settle_s:g}\n")
    feed = f" F{feed_mm_min:.3f}"
    if lead_deg > 0:
        lines.append(arc(-lead_deg, 0.0, feed))
        feed = ""
    lines.append(arc(0.0, 0.0, feed))  # start == end: a full circle
    if lead_deg > 0:
        lines.append(arc(0.0, lead_deg))
    return lines


def lead_mm(radius_mm: float, lead_deg: float = 90.0) -> float:
    """Path length of circle_program's lead-in (and lead-out) arc."""
    return math.radians(lead_deg) * radius_mm
