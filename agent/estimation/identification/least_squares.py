"""The least squares of the identification (Madsen et al. 2020): OLS, then WLS with
each equation group (a joint) weighted by the reciprocal of the standard deviation of its OLS
residual (eqs. 13-14), the weights re-estimated from the WLS residual until they settle; the
relative standard deviation of every estimate.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import scipy.linalg

from agent.errors import EstimationError

Array = npt.NDArray[np.float64]
Method = Literal["ols", "wls"]

WLS_ITERATIONS = 5
WLS_TOLERANCE = 0.01


@contextlib.contextmanager
def single_thread_blas() -> Iterator[None]:
    """Small dense solves through a threaded BLAS stall for milliseconds on a busy 2-core box."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: only the speed changes
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


# ------------------------------------------------------------------------------- least squares


@dataclass(frozen=True)
class LsqSolution:
    """theta = argmin sum_g ||(y_g - A_g theta) / sigma_g||^2 and its statistics."""

    theta: Array
    covariance: Array
    sigma: Array  # residual standard deviation of each group (after the final fit)
    weights: Array  # 1 / sigma_g used in the final fit (ones for OLS)
    residual: Array
    condition_number: float  # of the (weighted) observation matrix, columns as they are
    method: Method

    @property
    def std(self) -> Array:
        return np.sqrt(np.maximum(np.diag(self.covariance), 0.0))

    @property
    def relative_std_pct(self) -> Array:
        """100 sigma_i / |theta_i| (Madsen et al. 2020, Table 4); inf where the estimate is 0."""
        with np.errstate(divide="ignore", invalid="ignore"):  # a pinned term: 0 / 0
            return np.where(self.theta != 0.0, 100.0 * self.std / np.abs(self.theta), np.inf)


def _group_sigma(res: Array, a: Array, groups: npt.NDArray[np.intp], n_groups: int) -> Array:
    """sigma_g^2 = ||rho_g||^2 / (r_g - b_g), b_g the parameters the group's rows see (eq. 14)."""
    sigma = np.empty(n_groups)
    for g in range(n_groups):
        rows = groups == g
        r_g = int(np.count_nonzero(rows))
        if r_g == 0:  # a group with no rows (left out) has no residual
            sigma[g] = math.nan
            continue
        b_g = int(np.count_nonzero(np.any(a[rows] != 0.0, axis=0)))
        dof = max(r_g - b_g, 1)
        sigma[g] = math.sqrt(float(res[rows] @ res[rows]) / dof)
    return sigma


def _solve(a: Array, y: Array) -> tuple[Array, Array]:
    """theta and (A^T A)^-1, through QR of the column-normalised matrix."""
    norms = np.linalg.norm(a, axis=0)
    if np.any(norms == 0.0):
        raise EstimationError(
            f"{int(np.count_nonzero(norms == 0.0))} parameter column(s) are zero in the data: "
            "the capture does not move what they describe"
        )
    q, r = scipy.linalg.qr(a / norms, mode="economic")
    theta_s = scipy.linalg.solve_triangular(r, q.T @ y)
    rinv = scipy.linalg.solve_triangular(r, np.eye(r.shape[0]))
    cov_s = rinv @ rinv.T
    return theta_s / norms, cov_s / np.outer(norms, norms)


def least_squares(
    a: npt.ArrayLike, y: npt.ArrayLike, groups: npt.ArrayLike, method: Method = "wls"
) -> LsqSolution:
    """OLS, or WLS weighted per group by 1 / sigma_g of the OLS residual (Madsen et al. 2020,
    eqs. 13-14)."""
    a_ = np.asarray(a, dtype=np.float64)
    y_ = np.asarray(y, dtype=np.float64)
    g_ = np.asarray(groups, dtype=np.intp)
    if a_.ndim != 2 or y_.shape != (a_.shape[0],) or g_.shape != y_.shape:
        raise EstimationError(f"least squares: A {a_.shape}, y {y_.shape}, groups {g_.shape}")
    if a_.shape[0] <= a_.shape[1]:
        raise EstimationError(f"{a_.shape[0]} rows cannot determine {a_.shape[1]} parameters")
    n_groups = int(g_.max()) + 1
    with single_thread_blas():
        theta, cov = _solve(a_, y_)
        res = y_ - a_ @ theta
        sigma = _group_sigma(res, a_, g_, n_groups)
        weights = np.ones(n_groups)
        aw = a_
        if method == "wls":
            # Madsen et al. 2020 weight by the OLS residual once. That residual still carries the
            # OLS error of the noisy groups into the quiet ones, so the weights are re-estimated
            # from the WLS residual until they settle (a few passes).
            for _ in range(WLS_ITERATIONS):
                if np.any(sigma <= 0.0):
                    raise EstimationError("a joint's equations fit exactly: WLS weights undefined")
                new_weights = 1.0 / sigma
                settled = np.allclose(new_weights, weights, rtol=WLS_TOLERANCE, equal_nan=True)
                weights = new_weights
                w_rows = weights[g_]
                aw = a_ * w_rows[:, None]
                theta, cov = _solve(aw, y_ * w_rows)
                res = y_ - a_ @ theta
                sigma = _group_sigma(res, a_, g_, n_groups)
                if settled:
                    break
        else:
            # OLS: one variance for all rows
            dof = max(a_.shape[0] - a_.shape[1], 1)
            cov = cov * float(res @ res) / dof
        sv = np.linalg.svd(aw, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
    return LsqSolution(theta, cov, sigma, weights, res, cond, method)
