"""The generic MAP estimate and its linearised posterior (Prod. Eng. 2023, eqs. 12-13), for any
model that returns its prediction and sensitivity; and which joints the data leave to the prior.

The stiffness estimators (agent.estimation.stiffness.inference) state their measurement model and
prior and call `map_fit`; the experiment design (agent.estimation.stiffness.design_solver) asks
`unidentified_joints` which joints a design leaves undetermined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


# A direction of k whose data information is below this share of its prior information is
# "not determined by the data": its posterior variance is > 1 / (1 + 0.01) of the prior's.
IDENTIFIABLE_INFO_RATIO = 1e-2

# (parameters) -> (model prediction (N,), sensitivity (N, P)); data and weights are flat
Model = Callable[[Array], tuple[Array, Array]]


@dataclass(frozen=True)
class MapFit:
    p: Array
    covariance: Array
    sensitivity: Array
    residual: Array  # z - eta(p)
    iterations: int
    converged: bool


def map_fit(
    model: Model,
    z: Array,
    sigma: Array,
    prior_mean: Array,
    prior_precision: Array,
    *,
    reciprocal: int = 0,
    max_iter: int = 60,
    step_tol_sd: float = 1e-6,
) -> MapFit:
    """argmin 1/2 |z - eta(p)|^2_{Sigma^-1} + 1/2 |p - p0|^2_P (eq. 12), then eq. 13.

    Gauss-Newton with Levenberg-Marquardt damping, started at the prior mean. The first
    `reciprocal` parameters (the stiffnesses, prior mean > 0) are iterated as v = p0 / p: a
    deflection is linear in 1/k, so the data term is nearly quadratic in v and two or three
    steps reach the minimum; v > 0 keeps k > 0. The minimiser is the same point. It stops when
    every step is below `step_tol_sd` posterior standard deviations.
    """
    w = 1.0 / sigma**2
    p = prior_mean.copy()
    r = reciprocal
    if r and np.any(prior_mean[:r] <= 0):
        raise ValueError("reciprocal parameters need a positive prior mean")
    lam = 1e-9

    def cost(par: Array, eta: Array) -> float:
        d = par - prior_mean
        return 0.5 * float(np.sum(w * (z - eta) ** 2) + d @ prior_precision @ d)

    eta, s = model(p)
    current = cost(p, eta)
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - `it` is reported
        h = s.T @ (w[:, None] * s) + prior_precision
        g = s.T @ (w * (z - eta)) - prior_precision @ (p - prior_mean)
        dpdv = np.ones_like(p)  # chain rule for p = p0 / v at v = p0 / p
        dpdv[:r] = -(p[:r] ** 2) / prior_mean[:r]
        h_v = h * dpdv[:, None] * dpdv[None, :]
        g_v = g * dpdv
        v = p.copy()
        v[:r] = prior_mean[:r] / p[:r]
        sd = np.sqrt(np.diag(_inverse_spd(h)))
        accepted = tiny = False
        for _ in range(12):
            dv = np.linalg.solve(h_v + lam * np.diag(np.diag(h_v)), g_v)
            if np.all(np.abs(dv * dpdv) <= step_tol_sd * sd):
                tiny = True  # the (first-order) step is far inside the uncertainty: done
                break
            v_t = v + dv
            if r and np.any(v_t[:r] <= 0):
                lam = max(lam, 1e-6) * 10.0
                continue
            trial = v_t.copy()
            trial[:r] = prior_mean[:r] / v_t[:r]
            eta_t, s_t = model(trial)
            c_t = cost(trial, eta_t)
            if c_t <= current:
                accepted = True
                break
            lam = max(lam, 1e-6) * 10.0
        if not accepted:
            converged = tiny  # else even heavily damped steps fail to descend
            break
        p, eta, s, current = trial, eta_t, s_t, c_t
        lam = max(lam / 10.0, 1e-9)
    h = s.T @ (w[:, None] * s) + prior_precision
    return MapFit(p, _inverse_spd(h), s, z - eta, it, converged)


def effective_parameters(fit: MapFit, sigma: Array) -> float:
    """How many parameters the data determine: tr(S C_post S^T Sigma^-1), the trace of the
    hat matrix (each parameter counts 1 when its prior is negligible, 0 when the data add
    nothing to it)."""
    w = 1.0 / sigma**2
    return float(np.einsum("ij,jk,ik,i->", fit.sensitivity, fit.covariance, fit.sensitivity, w))


def _inverse_spd(a: Array) -> Array:
    # scaled to unit diagonal first: stiffness and offset columns differ by ~1e12
    d = 1.0 / np.sqrt(np.diag(a))
    inv = np.linalg.inv(a * d[:, None] * d[None, :])
    out = inv * d[:, None] * d[None, :]
    return np.asarray(0.5 * (out + out.T))


def unidentified_joints(
    covariance_k: Array, prior_precision_k: Array, names: tuple[str, ...]
) -> tuple[str, ...]:
    """Joints that take part in a direction of k the data leave undetermined.

    Data information in prior-whitened coordinates, L^-1 (C^-1 - P) L^-T with P = L L^T: an
    eigenvalue below IDENTIFIABLE_INFO_RATIO is a direction where the data add less than 1 %
    to the prior; joints with a component > 0.3 in it are named.
    """
    info = np.linalg.inv(covariance_k) - prior_precision_k
    l_inv = 1.0 / np.sqrt(np.diag(prior_precision_k))
    white = info * l_inv[:, None] * l_inv[None, :]
    vals, vecs = np.linalg.eigh(0.5 * (white + white.T))
    bad: list[str] = []
    for v, vec in zip(vals, vecs.T, strict=True):
        if v < IDENTIFIABLE_INFO_RATIO:
            bad += [names[i] for i in np.flatnonzero(np.abs(vec) > 0.3) if names[i] not in bad]
    return tuple(bad)
