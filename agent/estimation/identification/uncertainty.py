"""Parameter uncertainty that survives real data: the least squares' textbook covariance assumes
white residuals of a model that contains the truth. Identification residuals are neither: they
are low-pass filtered (so neighbouring rows are correlated) and carry what the model lacks
(Stribeck friction, cogging, a cable's spring). Two corrections, both standard:

- Newey-West (1987) heteroskedasticity and autocorrelation consistent (HAC) covariance: the
  sandwich (A'A)^-1 S (A'A)^-1, S summing the scores' autocovariances with Bartlett weights up to
  a bandwidth chosen per equation group by Andrews' (1991) AR(1) plug-in rule. Cross-group
  (joint-to-joint) correlations are not included: rows are ordered within groups only.
- A type-B term (GUM, JCGM 100:2008, 4.3.7) for the drive's torque constant: the torque is
  current times a nominal constant within a stated tolerance +-a. Every equation group's
  right-hand side is one drive's torque (or zero), so each group's error scales its rows; the
  parameters move by eps_g s_g with s_g = (A'A)^-1 A_g' y_g, and a uniform eps_g in [-a, a]
  adds (a^2 / 3) s_g s_g' to the covariance. No amount of data removes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]

# Above this the group's rows are nearly a random walk and the AR(1) rule's bandwidth is its cap.
_MAX_RHO = 0.97


@dataclass(frozen=True)
class RobustCovariance:
    """The HAC covariance, the torque-constant term, and what they were computed with."""

    hac: Array
    torque_constant: Array
    lags: tuple[int, ...]  # Bartlett bandwidth of each equation group (rows)
    torque_constant_tolerance: float

    @property
    def covariance(self) -> Array:
        return self.hac + self.torque_constant

    @property
    def std(self) -> Array:
        return np.sqrt(np.maximum(np.diag(self.covariance), 0.0))


def andrews_bandwidth(residual: npt.ArrayLike) -> int:
    """Bartlett bandwidth from an AR(1) fit of the residual (Andrews 1991, eq. 6.4):
    1.1447 (alpha n)^(1/3), alpha = 4 rho^2 / ((1 - rho)^2 (1 + rho)^2); capped at n / 4."""
    r = np.asarray(residual, dtype=np.float64)
    n = r.size
    if n < 8:
        return 0
    r = r - r.mean()
    denom = float(r[:-1] @ r[:-1])
    if denom <= 0.0:
        return 0
    rho = min(max(float(r[1:] @ r[:-1]) / denom, -_MAX_RHO), _MAX_RHO)
    alpha = 4.0 * rho * rho / ((1.0 - rho) ** 2 * (1.0 + rho) ** 2)
    lag = math.ceil(1.1447 * (alpha * n) ** (1.0 / 3.0))
    return min(lag, n // 4)


def robust_covariance(
    a_w: Array,
    res_w: Array,
    y_w: Array,
    groups: npt.NDArray[np.intp],
    *,
    torque_constant_tolerance: float = 0.0,
) -> RobustCovariance:
    """HAC + torque-constant covariance of the (weighted) least squares a_w theta ~ y_w.

    a_w, res_w and y_w are the weighted rows, residual and right-hand side of the final fit;
    rows of one group must be in time order."""
    if torque_constant_tolerance < 0:
        raise ValueError(f"torque_constant_tolerance must be >= 0, got {torque_constant_tolerance}")
    n_rows, p = a_w.shape
    bread = np.linalg.pinv(a_w.T @ a_w)
    meat = np.zeros((p, p))
    sens = np.zeros((p, p))
    lags = []
    for g in range(int(groups.max()) + 1 if groups.size else 0):
        rows = np.flatnonzero(groups == g)
        if rows.size == 0:
            lags.append(0)
            continue
        scores = a_w[rows] * res_w[rows, None]
        lag = andrews_bandwidth(res_w[rows])
        lags.append(lag)
        s = scores.T @ scores
        for k in range(1, lag + 1):
            gamma = scores[k:].T @ scores[:-k]
            s += (1.0 - k / (lag + 1.0)) * (gamma + gamma.T)
        meat += s
        shift = bread @ (a_w[rows].T @ y_w[rows])  # d theta / d (relative torque error of g)
        sens += np.outer(shift, shift)
    # the n / (n - p) small-sample factor, as the textbook covariance's degrees of freedom
    hac = bread @ meat @ bread * (n_rows / max(n_rows - p, 1))
    return RobustCovariance(
        hac,
        sens * torque_constant_tolerance**2 / 3.0,
        tuple(lags),
        torque_constant_tolerance,
    )
