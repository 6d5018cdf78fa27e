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
    Td_s, Tf_s, n, plus the nuisance terms fitted with them (offset_rad_s and the load-turn
    harmonics). `amplitude_rad_s` is |A|.
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
    # Evidence for plots: the residual and the fitted model on the fitted time base.
    time_s: Array = field(default_factory=lambda: np.zeros(0), repr=False)
    residual_rad_s: Array = field(default_factory=lambda: np.zeros(0), repr=False)
    fitted_rad_s: Array = field(default_factory=lambda: np.zeros(0), repr=False)

    @property
    def explained_fraction(self) -> float:
        if self.residual_rms_rad_s <= 0:
            return 0.0
        return float(1.0 - (self.rmse_rad_s / self.residual_rms_rad_s) ** 2)

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
        }
        if evidence:
            d["evidence"] = {
                "time_s": self.time_s.tolist(),
                "residual_rad_s": self.residual_rad_s.tolist(),
                "fitted_rad_s": self.fitted_rad_s.tolist(),
            }
        return d
