"""Joint stiffness by Bayesian inference (Prod. Eng. 2023, section 3), and its dual-encoder variant.

Data z = eta(k, u) + noise, noise ~ N(0, Sigma) with Sigma diagonal (eq. 8-9). Prior
k ~ N(k0, Gamma0 / gamma) (eq. 11), Gamma0 = diag(sd^2). The MAP point (eq. 12) is found by
Gauss-Newton with Levenberg-Marquardt damping, iterated in k0 / k
(agent.estimation.stiffness.posterior.map_fit); the posterior
is linearised there, C_post = (S^T Sigma^-1 S + gamma Gamma0^-1)^-1 (eq. 13) with S
the sensitivity d eta / dk (eq. 14). The 1-alpha region is the ellipsoid of eq. 15 (chi-square
quantile with n_k degrees of freedom), taken in the compliance 1/k, in which every deflection
is linear: for the paper's narrow posteriors it is the same as in k; a wide one (a joint the
data barely separate from link compliance) is Gaussian in 1/k, not in k. Per joint the
marginal interval is 1/k_i +- z_{1-alpha/2} sd(1/k_i), mapped back to k.

The paper's model is exact nowhere: links tilt, the geometry and the sensors are off. With
`errors` (agent.estimation.stiffness.tcp_errors) the TCP estimator marginalises them as
nuisance parameters with the tolerances given, and its region covers under them too; without,
it covers only while the model is exact (bench/bench_stiffness.py measures both).

Two measurement models:
  * TCP deviation under a known force (the paper: laser sensors, eq. 6), `estimate_stiffness`;
  * dual encoder (not in the paper): motor angle / gear ratio minus link angle at standstill
    is the gravity twist tau_g(q) / k_i plus an unknown zero offset o_i per joint (the two
    encoders are not mounted in phase), `estimate_dual_encoder`. Gravity is the load and the
    encoders are the sensors; offsets are nuisance parameters with a wide prior.
A joint the data do not inform (no measurement loads it, or only in a fixed combination with
other joints) keeps (almost) its prior: it is listed in `unidentified` with a warning.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import chdtri, ndtri

from agent.errors import EstimationError
from agent.estimation.stiffness.posterior import (
    MapFit,
    Model,
    effective_parameters,
    map_fit,
    unidentified_joints,
)
from agent.estimation.stiffness.tcp_errors import (
    TcpErrorPrior,
    extended_model,
    nuisance_summary,
)
from agent.models.robot.compliance import (
    ComplianceModel,
    check_poses,
    deviation_and_sensitivity,
    load_case,
)
from agent.models.robot.compliance_measurements import DualEncoderMeasurements, TcpMeasurements
from agent.models.robot.kinematics import gravity_torques

Array = npt.NDArray[np.float64]


class StiffnessMethod(StrEnum):
    """What the stiffness is inferred from: TCP deviations under a known force (the paper), or
    the gravity twist two encoders per joint read at standstill."""

    TCP_DEVIATION = "tcp-deviation"
    DUAL_ENCODER = "dual-encoder"


@dataclass(frozen=True)
class StiffnessPrior:
    """N(mean, diag(std^2) / gamma): Gamma0 = diag(std^2) (eq. 11)."""

    mean_nm_rad: Array
    std_nm_rad: Array
    gamma: float = 1.0
    origin: str = ""

    @property
    def covariance(self) -> Array:
        return np.diag(self.std_nm_rad**2) / self.gamma

    @property
    def precision(self) -> Array:
        return np.diag(self.gamma / self.std_nm_rad**2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean_nm_rad": self.mean_nm_rad.tolist(),
            "std_nm_rad": self.std_nm_rad.tolist(),
            "gamma": self.gamma,
            "origin": self.origin,
        }


def prior_from_robot(
    model: ComplianceModel, rel_std: float = 0.5, gamma: float = 1.0
) -> StiffnessPrior:
    """The robot file's stiffnesses as prior mean, with a relative standard deviation."""
    if not rel_std > 0 or not gamma > 0:
        raise ValueError(f"rel_std and gamma must be > 0, got {rel_std}, {gamma}")
    k0 = model.nominal_stiffness()
    return StiffnessPrior(
        k0, rel_std * k0, gamma, f"{model.robot.source} stiffness_nm_rad, {rel_std:.0%} sd"
    )


@dataclass(frozen=True)
class StiffnessEstimate:
    """MAP stiffness with its linearised posterior (eqs. 12-15) and the evidence of the fit."""

    method: StiffnessMethod
    joint_names: tuple[str, ...]
    k_nm_rad: Array
    covariance: Array  # (n_k, n_k)
    alpha: float
    intervals_nm_rad: Array  # (n_k, 2) marginal 1-alpha intervals (upper inf: no bound)
    ellipsoid_radius2: float  # chi2_{n_k}(1 - alpha), eq. 15
    prior: StiffnessPrior
    residuals: Array  # same shape as the data, in data units
    residual_rms: float
    chi2_per_dof: float  # weighted SSR / (data count - effective parameters); ~1: noise right
    iterations: int
    converged: bool
    unidentified: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    nuisance: dict[str, float] = field(default_factory=dict)

    @property
    def std_nm_rad(self) -> Array:
        return np.sqrt(np.diag(self.covariance))

    @property
    def compliance_covariance(self) -> Array:
        """Covariance of 1/k, (rad/(N·m))^2: the same linearised posterior in the coordinates
        the data are linear in (a deflection is torque times 1/k)."""
        c = 1.0 / self.k_nm_rad**2
        return np.asarray(self.covariance * c[:, None] * c[None, :])

    def mahalanobis2(self, k: npt.ArrayLike) -> float:
        """Distance of k from the estimate in the posterior's metric, taken in 1/k: where the
        posterior is Gaussian even when it is wide (a k known to 30 % is not Gaussian in k)."""
        d = 1.0 / np.asarray(k, dtype=np.float64) - 1.0 / self.k_nm_rad
        return float(d @ np.linalg.solve(self.compliance_covariance, d))

    def contains(self, k: npt.ArrayLike) -> bool:
        """Is k inside the 1-alpha confidence ellipsoid G (eq. 15, in 1/k)?"""
        return self.mahalanobis2(k) <= self.ellipsoid_radius2

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "joint_names": list(self.joint_names),
            "k_nm_rad": self.k_nm_rad.tolist(),
            "std_nm_rad": self.std_nm_rad.tolist(),
            "covariance": self.covariance.tolist(),
            "confidence": 1.0 - self.alpha,
            "intervals_nm_rad": self.intervals_nm_rad.tolist(),
            "ellipsoid_radius2": self.ellipsoid_radius2,
            "prior": self.prior.to_dict(),
            "residuals": self.residuals.tolist(),
            "residual_rms": self.residual_rms,
            "chi2_per_dof": self.chi2_per_dof,
            "iterations": self.iterations,
            "converged": self.converged,
            "unidentified": list(self.unidentified),
            "warnings": list(self.warnings),
            "nuisance": dict(self.nuisance),
        }


@functools.cache
def _normal_quantile(p: float) -> float:
    return float(ndtri(p))


@functools.cache
def _chi2_quantile(p: float, dof: int) -> float:
    return float(chdtri(dof, 1.0 - p))  # chdtri inverts the upper tail


def _finish(
    method: StiffnessMethod,
    names: tuple[str, ...],
    fit: MapFit,
    n_k: int,
    prior: StiffnessPrior,
    sigma: Array,
    residual_shape: tuple[int, ...],
    alpha: float,
    nuisance: dict[str, float],
) -> StiffnessEstimate:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    k = fit.p[:n_k]
    cov = fit.covariance[:n_k, :n_k]
    # the interval is symmetric in 1/k (the data are linear in it) and mapped back to k: for a
    # narrow posterior this is k +- z sd; a wide one gets the longer side up, and no upper
    # bound at all when 1/k = 0 (a rigid joint) is inside it
    z = _normal_quantile(1 - alpha / 2)
    v, half_v = 1.0 / k, z * np.sqrt(np.diag(cov)) / k**2
    upper = np.full_like(k, math.inf)
    np.divide(1.0, v - half_v, out=upper, where=v > half_v)
    intervals = np.stack([1.0 / (v + half_v), upper], axis=1)
    # the prior takes part of the fit (nuisances above all): count what the data determine
    dof = fit.residual.size - effective_parameters(fit, sigma)
    chi2_dof = float(np.sum((fit.residual / sigma) ** 2) / dof) if dof > 0.5 else math.nan
    bad = unidentified_joints(cov, prior.precision, names)
    warnings = []
    if bad:
        warnings.append(
            f"joints {', '.join(bad)} are not determined by these measurements (no measurement "
            "loads them, or only together with others): their estimate is the prior"
        )
    if not fit.converged:
        warnings.append(f"MAP iteration stopped after {fit.iterations} steps without converging")
    if dof > 0.5 and chi2_dof > 4.0:
        warnings.append(
            f"residuals are {math.sqrt(chi2_dof):.1f} times the stated noise: model or noise "
            "level wrong, the intervals are too narrow"
        )
    return StiffnessEstimate(
        method=method,
        joint_names=names,
        k_nm_rad=k,
        covariance=cov,
        alpha=alpha,
        intervals_nm_rad=intervals,
        ellipsoid_radius2=_chi2_quantile(1 - alpha, n_k),
        prior=prior,
        residuals=fit.residual.reshape(residual_shape),
        residual_rms=float(np.sqrt(np.mean(fit.residual**2))),
        chi2_per_dof=chi2_dof,
        iterations=fit.iterations,
        converged=fit.converged,
        unidentified=bad,
        warnings=tuple(warnings),
        nuisance=nuisance,
    )


# -- TCP deviation under a force (the paper) ------------------------------------------------------


def estimate_stiffness(
    model: ComplianceModel,
    data: TcpMeasurements,
    prior: StiffnessPrior,
    *,
    alpha: float = 0.05,
    errors: TcpErrorPrior | None = None,
) -> StiffnessEstimate:
    """MAP k and its 1-alpha ellipsoid from TCP deviations under known forces.

    `errors`: tolerances of what the paper's model leaves out (link tilt, geometry, laser
    alignment, force scale), marginalised as nuisance parameters
    (agent.estimation.stiffness.tcp_errors); None or all zero: the paper's estimator, whose
    ellipsoid holds only when the model is exact.
    """
    n = model.n_joints
    _check_tcp(model, data)
    ext = None
    if errors is not None and not errors.is_zero:
        ext = extended_model(model, data, prior.mean_nm_rad, prior.precision, errors)
    eta = _paper_model(model, data) if ext is None else ext.eta
    fit = map_fit(
        eta,
        data.deviation_m.ravel(),
        data.sigma_m.ravel(),
        prior.mean_nm_rad if ext is None else ext.prior_mean,
        prior.precision if ext is None else ext.prior_precision,
        reciprocal=n,
    )
    nuisance = {} if ext is None else nuisance_summary(fit.p, ext.slices, prior.mean_nm_rad)
    return _finish(
        StiffnessMethod.TCP_DEVIATION,
        model.joint_names,
        fit,
        n,
        prior,
        data.sigma_m.ravel(),
        data.deviation_m.shape,
        alpha,
        nuisance,
    )


def _paper_model(model: ComplianceModel, data: TcpMeasurements) -> Model:
    """Eq. 6 and its sensitivity (eq. 14) over k alone."""
    case = load_case(model, data.q_rad, data.force_n)

    def eta(k: Array) -> tuple[Array, Array]:
        dev, s = deviation_and_sensitivity(model, case, k)
        return dev.ravel(), s.reshape(-1, model.n_joints)

    return eta


def _check_tcp(model: ComplianceModel, data: TcpMeasurements) -> None:
    m, n = len(data), model.n_joints
    shapes = {
        "q_rad": (data.q_rad.shape, (m, n)),
        "force_n": (data.force_n.shape, (m, 3)),
        "deviation_m": (data.deviation_m.shape, (m, 3)),
        "sigma_m": (data.sigma_m.shape, (m, 3)),
    }
    for name, (got, want) in shapes.items():
        if got != want:
            raise EstimationError(f"{data.source}: {name} has shape {got}, expected {want}")
    if m == 0:
        raise EstimationError(f"{data.source}: no measurements")
    if np.any(data.sigma_m <= 0):
        raise EstimationError(f"{data.source}: noise sd must be > 0")
    check_poses(model, data.q_rad, f"{data.source}: measurement")


# -- dual encoder: gravity twist ---------------------------------------------------------------


def joint_indices(model: ComplianceModel, joints: tuple[str, ...] | None) -> list[int]:
    names = model.joint_names
    if joints is None:
        return list(range(model.n_joints))
    unknown = [j for j in joints if j not in names]
    if unknown:
        raise EstimationError(f"no joints {', '.join(unknown)}; known: {', '.join(names)}")
    return [names.index(j) for j in joints]


def estimate_dual_encoder(
    model: ComplianceModel,
    data: DualEncoderMeasurements,
    prior: StiffnessPrior,
    *,
    joints: tuple[str, ...] | None = None,
    offset_std_rad: float = 0.01,
    alpha: float = 0.05,
) -> StiffnessEstimate:
    """MAP k of the chosen joints (default all) and the encoder offsets from windup readings.

    windup_ij = tau_g,i(q_j) / k_i + o_i: per joint a regression on the gravity torque, which
    needs at least two poses with different torques on that joint.
    """
    idx = joint_indices(model, joints)
    q = data.q_link_rad
    p_, n = q.shape
    if data.q_motor_link_rad.shape != q.shape or data.sigma_rad.shape != (n,) or p_ == 0:
        raise EstimationError(f"{data.source}: inconsistent dual-encoder arrays")
    tau = gravity_torques(model.chain, q)[:, idx]
    m = len(idx)
    z = data.windup_rad[:, idx].ravel()
    sigma = np.broadcast_to(data.sigma_rad[idx], (p_, m)).ravel()

    def eta(par: Array) -> tuple[Array, Array]:
        k, off = par[:m], par[m:]
        pred = tau / k + off
        s = np.zeros((p_, m, 2 * m))
        cols = np.arange(m)
        s[:, cols, cols] = -tau / k**2
        s[:, cols, m + cols] = 1.0
        return pred.ravel(), s.reshape(p_ * m, 2 * m)

    sub = StiffnessPrior(prior.mean_nm_rad[idx], prior.std_nm_rad[idx], prior.gamma, prior.origin)
    mean = np.concatenate([sub.mean_nm_rad, np.zeros(m)])
    prec = np.zeros((2 * m, 2 * m))
    prec[:m, :m] = sub.precision
    prec[m:, m:] = np.eye(m) / offset_std_rad**2
    fit = map_fit(eta, z, sigma, mean, prec, reciprocal=m)
    names = tuple(model.joint_names[i] for i in idx)
    offsets = {f"offset_{name}_rad": float(o) for name, o in zip(names, fit.p[m:], strict=True)}
    return _finish(StiffnessMethod.DUAL_ENCODER, names, fit, m, sub, sigma, (p_, m), alpha, offsets)
