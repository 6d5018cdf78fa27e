"""Result objects of the estimators: frozen, self-describing, carrying their evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BacklashResult:
    """Fit of the backlash signature h(t) (Giovannitti et al. 2022, eqs. 1-7) to the speed residual
    (eq. 11).

    `params` holds the paper's parameters: A_rad_s, t0_s, tau_per_s, omega_rad_s, T1_s, T2_s,
    Td_s, Tf_s, n, plus the nuisance terms fitted with them (offset_rad_s, the load-turn
    harmonics, motor_harmonics_rms_rad_s). `amplitude_rad_s` is the fitted curve's peak.

    The intervals (None when not computed) are 95 % ones: the amplitude's from the random part
    of the residual (agent.estimation.backlash.uncertainty), the backlash's adds the
    calibration's residual and model mismatch (BacklashCalibration.interval). `ambiguous`: the
    restarts found optima that fit equally well within the noise with amplitudes further apart
    than the noise allows; both intervals then span them all. `uncertainty` says how each
    interval was made up.
    """

    amplitude_rad_s: float
    backlash_rad: float | None  # None without a calibration
    rmse_rad_s: float
    residual_rms_rad_s: float  # RMS of r(t) before the fit: rmse / this is the unexplained share
    params: dict[str, float]
    evaluations: int
    restarts: int
    converged: bool
    stop_reason: str
    fit_seconds: float
    seed: int
    period_metadata_s: float | None
    period_estimated_s: float | None
    period_mismatch: float | None  # relative difference estimated vs metadata
    warnings: tuple[str, ...] = ()
    amplitude_sd_rad_s: float | None = None
    amplitude_low_rad_s: float | None = None
    amplitude_high_rad_s: float | None = None
    backlash_low_rad: float | None = None
    backlash_high_rad: float | None = None
    ambiguous: bool = False
    interval_confidence: float = 0.95
    uncertainty: dict[str, Any] = field(default_factory=dict)
    # Evidence for plots: the residual and the fitted model on the fitted time base.
    time_s: Array = field(default_factory=lambda: np.zeros(0), repr=False)
    residual_rad_s: Array = field(default_factory=lambda: np.zeros(0), repr=False)
    fitted_rad_s: Array = field(default_factory=lambda: np.zeros(0), repr=False)

    @property
    def explained_fraction(self) -> float:
        if self.residual_rms_rad_s <= 0:
            return 0.0
        return float(1.0 - (self.rmse_rad_s / self.residual_rms_rad_s) ** 2)

    @property
    def amplitude_interval_rad_s(self) -> tuple[float, float] | None:
        if self.amplitude_low_rad_s is None or self.amplitude_high_rad_s is None:
            return None
        return self.amplitude_low_rad_s, self.amplitude_high_rad_s

    @property
    def backlash_interval_rad(self) -> tuple[float, float] | None:
        if self.backlash_low_rad is None or self.backlash_high_rad is None:
            return None
        return self.backlash_low_rad, self.backlash_high_rad

    def interval_of(self, indicator: str) -> tuple[float, float] | None:
        """The interval of the value recorded as `indicator` (backlash_rad, amplitude_rad_s)."""
        if indicator == "backlash_rad":
            return self.backlash_interval_rad
        if indicator == "amplitude_rad_s":
            return self.amplitude_interval_rad_s
        return None

    def to_dict(self, evidence: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "amplitude_rad_s": self.amplitude_rad_s,
            "backlash_rad": self.backlash_rad,
            "calibrated": self.backlash_rad is not None,
            "rmse_rad_s": self.rmse_rad_s,
            "residual_rms_rad_s": self.residual_rms_rad_s,
            "explained_fraction": self.explained_fraction,
            "params": dict(self.params),
            "evaluations": self.evaluations,
            "restarts": self.restarts,
            "converged": self.converged,
            "stop_reason": self.stop_reason,
            "fit_seconds": self.fit_seconds,
            "seed": self.seed,
            "period_metadata_s": self.period_metadata_s,
            "period_estimated_s": self.period_estimated_s,
            "period_mismatch": self.period_mismatch,
            "warnings": list(self.warnings),
            "amplitude_sd_rad_s": self.amplitude_sd_rad_s,
            "amplitude_interval_rad_s": _pair(self.amplitude_interval_rad_s),
            "backlash_interval_rad": _pair(self.backlash_interval_rad),
            "interval_confidence": self.interval_confidence,
            "ambiguous": self.ambiguous,
            "uncertainty": dict(self.uncertainty),
        }
        if evidence:
            d["evidence"] = {
                "time_s": self.time_s.tolist(),
                "residual_rad_s": self.residual_rad_s.tolist(),
                "fitted_rad_s": self.fitted_rad_s.tolist(),
            }
        return d


def _pair(pair: tuple[float, float] | None) -> list[float] | None:
    return None if pair is None else [pair[0], pair[1]]
