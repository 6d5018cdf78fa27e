"""Static characteristic of the backlash virtual sensor: delta = f(A) (Giovannitti et al. 2022,
eq. 10).

A cubic in A fitted to (A, delta) pairs by least squares, constrained to be non-decreasing over
the calibrated amplitude range (a larger signature must never mean a smaller gap). The pairs come
from a simulation sweep of the configured joint or from bench measurements in the config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

from agent.errors import EstimationError

# Giovannitti et al. 2022, eq. 10, for the COMAU bench joint:
# delta = 1e-6 (c3 A^3 + c2 A^2 + c1 A + c0).
PAPER_EQ10_COEFFS = (34.0313e-6, 9.2524e-6, 0.4323e-6, -0.0018e-6)


@dataclass(frozen=True)
class BacklashCalibration:
    """delta = c0 + c1 A + c2 A^2 + c3 A^3, valid on amplitude_range_rad_s."""

    coeffs: tuple[float, float, float, float]
    amplitude_range_rad_s: tuple[float, float]
    rmse_rad: float
    points: tuple[tuple[float, float], ...]
    source: str

    def backlash_rad(self, amplitude_rad_s: float) -> float:
        c0, c1, c2, c3 = self.coeffs
        a = amplitude_rad_s
        return float(max(0.0, c0 + a * (c1 + a * (c2 + a * c3))))

    def covers(self, amplitude_rad_s: float) -> bool:
        lo, hi = self.amplitude_range_rad_s
        span = hi - lo
        return lo - 0.05 * span <= amplitude_rad_s <= hi + 0.05 * span

    def to_dict(self) -> dict[str, Any]:
        return {
            "coeffs": list(self.coeffs),
            "amplitude_range_rad_s": list(self.amplitude_range_rad_s),
            "rmse_rad": self.rmse_rad,
            "points": [list(p) for p in self.points],
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BacklashCalibration:
        c = tuple(float(v) for v in d["coeffs"])
        lo, hi = (float(v) for v in d["amplitude_range_rad_s"])
        return cls(
            coeffs=(c[0], c[1], c[2], c[3]),
            amplitude_range_rad_s=(lo, hi),
            rmse_rad=float(d["rmse_rad"]),
            points=tuple((float(a), float(b)) for a, b in d["points"]),
            source=str(d["source"]),
        )


def fit_calibration(
    points: Sequence[tuple[float, float]], source: str = "points"
) -> BacklashCalibration:
    """Monotone cubic through (amplitude_rad_s, backlash_rad) pairs."""
    pts = sorted((float(a), float(d)) for a, d in points)
    if len(pts) < 4:
        raise EstimationError(f"calibration needs at least 4 (A, delta) pairs, got {len(pts)}")
    a = np.array([p[0] for p in pts])
    d = np.array([p[1] for p in pts])
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(d))):
        raise EstimationError("calibration pairs must be finite numbers")
    if np.ptp(a) <= 0:
        raise EstimationError("calibration amplitudes are all equal: delta = f(A) is undefined")
    # Scale A to [0, 1] and delta to O(1) so the least-squares problem is well conditioned.
    a_lo, a_hi = float(a.min()), float(a.max())
    d_scale = float(np.max(np.abs(d))) or 1.0
    x = (a - a_lo) / (a_hi - a_lo)
    y = d / d_scale
    vander = np.vander(x, 4, increasing=True)
    coef0, *_ = np.linalg.lstsq(vander, y, rcond=None)
    grid = np.linspace(0.0, 1.0, 101)
    dvander = np.column_stack([np.zeros_like(grid), np.ones_like(grid), 2 * grid, 3 * grid**2])
    if np.any(dvander @ coef0 < 0):
        res = minimize(
            lambda c: float(np.sum((vander @ c - y) ** 2)),
            coef0,
            jac=lambda c: 2.0 * vander.T @ (vander @ c - y),
            constraints=[{"type": "ineq", "fun": lambda c: dvander @ c, "jac": lambda c: dvander}],
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 500},
        )
        coef0 = res.x
    # Back to the unscaled polynomial in A: substitute x = (A - a_lo) / span.
    span = a_hi - a_lo
    poly_x = np.polynomial.Polynomial(coef0 * d_scale)
    poly_a = poly_x(np.polynomial.Polynomial([-a_lo / span, 1.0 / span]))
    c = np.zeros(4)
    c[: poly_a.coef.size] = poly_a.coef
    fitted = np.polynomial.polynomial.polyval(a, c)
    rmse = float(np.sqrt(np.mean((fitted - d) ** 2)))
    return BacklashCalibration(
        coeffs=(float(c[0]), float(c[1]), float(c[2]), float(c[3])),
        amplitude_range_rad_s=(a_lo, a_hi),
        rmse_rad=rmse,
        points=tuple(pts),
        source=source,
    )
