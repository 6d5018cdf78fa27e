"""Static characteristic of the backlash virtual sensor: delta = f(A) (Giovannitti et al. 2022,
eq. 10).

A cubic in A fitted to (A, delta) pairs by least squares, constrained to be non-decreasing over
the calibrated amplitude range (a larger signature must never mean a smaller gap). The pairs come
from a simulation sweep of the configured joint or from bench measurements in the config.

The interval of a backlash estimate combines three things, by Monte Carlo propagation (GUM
Supplement 1, JCGM 101:2008): the amplitude's own uncertainty (the fit's, from the noise), the
calibration curve's residual (its RMSE, as a normal error), and, for a simulation calibration,
model mismatch: the real joint is not exactly its configured model, and the sweep of agent.kinds.
backlash.calibration measured what f(A) reads on joints at the ends of the model's tolerances
(ModelSensitivity). A tolerance is read as the range the parameter lies in for 9 joints in 10:
each parameter is normal with its tolerance ends at the 5 % and 95 % quantiles (log-normal for
a factor such as the damping's). Its error is linear on each side of the nominal joint (no
error) through the end on that side, interpolated linearly in backlash, and the parameters'
errors add. One slope per side: the response to the load inertia is steeper below the nominal
than above (a parabola through the three points bends back beyond the upper end, where a
twentieth of the joints lie). Runs at the 2.5/97.5 % quantiles instead of the ends were tried:
the response is concave above the nominal inertia, so the line through them passed inside the
upper end's error, and the coverage under mismatch did not improve (bench: 92.9 against 92.1 %
of 240 joints). A joint at
either end of one tolerance then lies inside the 95 % interval, with the other parameters'
spread to spare; a joint beyond its tolerances may not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize

from agent.errors import EstimationError

# Giovannitti et al. 2022, eq. 10, for the COMAU bench joint:
# delta = 1e-6 (c3 A^3 + c2 A^2 + c1 A + c0).
PAPER_EQ10_COEFFS = (34.0313e-6, 9.2524e-6, 0.4323e-6, -0.0018e-6)


# Monte Carlo draws of the interval: enough for its 2.5 % and 97.5 % quantiles to within about
# 1 % of the interval's width; a fixed seed makes an interval a function of its inputs.
_DRAWS = 20_000
# A tolerance's ends are the 5 % and 95 % quantiles of its parameter (in units of the end).
Z90 = 1.6448536269514722
# The straight lines through the ends are not trusted far beyond them: draws are held within
# twice the tolerance, which cuts 0.1 % of them.
_MAX_ENDS = 2.0


@dataclass(frozen=True)
class ModelSensitivity:
    """What f(A) reads on a joint at the two ends of one model tolerance, at one backlash: the
    errors f(A_joint(delta)) - delta (rad) with the parameter at its low and its high end."""

    parameter: str  # e.g. "load_inertia_kg_m2"
    ends: tuple[float, float]  # factors on the nominal value at the two ends, e.g. (0.7, 1.3)
    backlash_rad: float
    error_low_rad: float
    error_high_rad: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameter": self.parameter,
            "ends": list(self.ends),
            "backlash_rad": self.backlash_rad,
            "error_low_rad": self.error_low_rad,
            "error_high_rad": self.error_high_rad,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelSensitivity:
        lo, hi = (float(v) for v in d["ends"])
        return cls(
            parameter=str(d["parameter"]),
            ends=(lo, hi),
            backlash_rad=float(d["backlash_rad"]),
            error_low_rad=float(d["error_low_rad"]),
            error_high_rad=float(d["error_high_rad"]),
        )


@dataclass(frozen=True)
class BacklashInterval:
    """The interval of one backlash estimate and what makes it up (half-widths at the same
    confidence: each term alone, the others left out)."""

    low_rad: float
    high_rad: float
    confidence: float
    noise_half_width_rad: float  # from the amplitude's uncertainty alone
    model_half_width_rad: float | None  # from model mismatch alone; None: not known
    calibration_rmse_rad: float  # the calibration curve's own residual (a standard deviation)

    def to_dict(self) -> dict[str, Any]:
        return {
            "low_rad": self.low_rad,
            "high_rad": self.high_rad,
            "confidence": self.confidence,
            "noise_half_width_rad": self.noise_half_width_rad,
            "model_half_width_rad": self.model_half_width_rad,
            "calibration_rmse_rad": self.calibration_rmse_rad,
        }


@dataclass(frozen=True)
class BacklashCalibration:
    """delta = c0 + c1 A + c2 A^2 + c3 A^3, valid on amplitude_range_rad_s; `sensitivity` how
    far it reads off on joints within the model's tolerances (empty: not measured)."""

    coeffs: tuple[float, float, float, float]
    amplitude_range_rad_s: tuple[float, float]
    rmse_rad: float
    points: tuple[tuple[float, float], ...]
    source: str
    sensitivity: tuple[ModelSensitivity, ...] = field(default=())

    def backlash_rad(self, amplitude_rad_s: float) -> float:
        c0, c1, c2, c3 = self.coeffs
        a = amplitude_rad_s
        return float(max(0.0, c0 + a * (c1 + a * (c2 + a * c3))))

    def _curve(self, a: np.ndarray) -> np.ndarray:
        c0, c1, c2, c3 = self.coeffs
        out: np.ndarray = np.maximum(0.0, c0 + a * (c1 + a * (c2 + a * c3)))
        return out

    def _mismatch(self, delta: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Error f(A_joint) - delta of joints drawn around the model (one column of `draws` per
        parameter, in units of its tolerance: -1 and 1 are the ends), at true backlash
        `delta`."""
        total = np.zeros_like(delta)
        for k, name in enumerate(sorted({s.parameter for s in self.sensitivity})):
            rows = sorted(
                (s for s in self.sensitivity if s.parameter == name), key=lambda s: s.backlash_rad
            )
            # No backlash, no signature on any joint: the error goes to zero with delta.
            at = np.array([0.0] + [s.backlash_rad for s in rows])
            lo = np.array([0.0] + [s.error_low_rad for s in rows])
            hi = np.array([0.0] + [s.error_high_rad for s in rows])
            # Past the last level the error grows in proportion to the backlash.
            scale = np.maximum(delta / at[-1], 1.0)
            d = np.minimum(delta, at[-1])
            e_lo, e_hi = np.interp(d, at, lo) * scale, np.interp(d, at, hi) * scale
            u = draws[:, k]
            total += np.where(u >= 0.0, u * e_hi, -u * e_lo)
        return total

    def interval(
        self, amplitudes_rad_s: Sequence[float], amplitude_sd_rad_s: float, confidence: float = 0.95
    ) -> BacklashInterval:
        """The backlash interval of an amplitude known to `amplitude_sd_rad_s` (one standard
        deviation); several amplitudes (an ambiguous fit's optima) are taken as equally likely."""
        rng = np.random.default_rng(0)
        tail = 50.0 * (1.0 - confidence)
        amps = np.asarray(amplitudes_rad_s, dtype=np.float64)
        a = amps[rng.integers(0, amps.size, _DRAWS)] + amplitude_sd_rad_s * rng.standard_normal(
            _DRAWS
        )
        noisy = self._curve(a)
        measured = noisy + self.rmse_rad * rng.standard_normal(_DRAWS)
        point = float(np.median(self._curve(amps)))
        n_par = len({s.parameter for s in self.sensitivity})
        model_half: float | None = None
        truth = measured
        if n_par:
            draws = np.clip(rng.standard_normal((_DRAWS, n_par)) / Z90, -_MAX_ENDS, _MAX_ENDS)
            # delta_true + error(delta_true) = measured, by fixed-point iteration (the error
            # is a fraction of delta, so two steps are enough).
            truth = measured.copy()
            for _ in range(3):
                truth = np.maximum(0.0, measured - self._mismatch(truth, draws))
            alone = point - self._mismatch(np.full(_DRAWS, point), draws)
            q = np.percentile(alone, [tail, 100.0 - tail])
            model_half = float(0.5 * (q[1] - q[0]))
        low, high = np.percentile(np.maximum(truth, 0.0), [tail, 100.0 - tail])
        nq = np.percentile(noisy, [tail, 100.0 - tail])
        return BacklashInterval(
            low_rad=float(low),
            high_rad=float(high),
            confidence=confidence,
            noise_half_width_rad=float(0.5 * (nq[1] - nq[0])),
            model_half_width_rad=model_half,
            calibration_rmse_rad=self.rmse_rad,
        )

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
            "sensitivity": [m.to_dict() for m in self.sensitivity],
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
            # Calibrations cached before the model term existed have none.
            sensitivity=tuple(ModelSensitivity.from_dict(m) for m in d.get("sensitivity", ())),
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
