"""The TCP stiffness measurement model with the errors the paper's leaves out, as nuisance
parameters the posterior marginalises (Prod. Eng. 2023, eqs. 9-13, extended).

Why parameters and not a larger noise: link tilt, geometry, laser alignment and force scale
are the same for every measurement of one experiment, so their effect does not average out
over the measurements, and much of it looks like a joint compliance: a tilting link makes the
joints look softer, a 1 % force scale moves every k by 1 % and leaves no residual at all.
Residuals cannot show what they do to k; a prior on each (its tolerance) can, and the
posterior of k then widens by as much as the data cannot tell them apart.

With q, F (the force the sensor reads) and k, the predicted laser reading is
  d = R(w) [eta(k, (1 + c) F) + (1 + c) (T(q, F) t + sum_i G_i(q, F) g / k_i)]
  * eta: eq. 6; c is the force sensor's scale error (the force applied is (1 + c) F);
  * t: each link's tilt compliance (rad/(N·m)) about x and y of its body frame, through each
    of its two ends (agent.models.robot.compliance_errors.tilt_columns: that spans any bending
    of a straight link): links and bearings are not rigid. Prior: the link's total about
    each axis has mean and sd `link_tilt_ratio` / k0_i;
  * g: errors of the DH lengths and angles and of the tool offset; to first order each joint's
    term J_i J_i^T F / k_i of the deviation moves by G_i g / k_i (G_i by finite differences of
    the Jacobian, once per estimate);
  * R(w) = I + [w]x: the laser frame turned by the small angles w.
Every error with a zero sd is left out; all zero is the paper's model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from agent.estimation.stiffness.posterior import Model
from agent.models.robot.compliance import (
    ComplianceModel,
    compliance_model,
    deviation_and_sensitivity,
    load_case,
)
from agent.models.robot.compliance_errors import (
    TcpMismatch,
    geometry_is_length,
    tilt_columns,
    with_geometry_errors,
)
from agent.models.robot.compliance_measurements import TcpMeasurements
from agent.models.robot.kinematics import forward, position_jacobian

Array = npt.NDArray[np.float64]
GEOMETRY_STEP = 1e-6  # m or rad: the Jacobian is smooth; 1e-6 keeps round-off below 1e-9


@dataclass(frozen=True)
class TcpErrorPrior(TcpMismatch):
    """Tolerances of what the compliance model leaves out (prior sd, one value per kind): the
    quantities TcpMismatch draws a simulated experiment from, as the estimator assumes them
    (link_tilt_ratio is then both the mean and the sd of a link's tilt compliance ratio)."""

    @property
    def is_zero(self) -> bool:
        return not any(vars(self).values())

    def to_dict(self) -> dict[str, float]:
        return dict(vars(self))


@dataclass(frozen=True)
class ExtendedModel:
    """What map_fit needs: the prediction and sensitivity over [k, nuisances], their prior."""

    eta: Model
    prior_mean: Array
    prior_precision: Array
    slices: dict[str, slice]


def _geometry_terms(
    model: ComplianceModel, q: Array, force: Array, keep: npt.NDArray[np.bool_]
) -> Array:
    """(B, 3, n, G): d(J_i J_i^T F)/dg for the kept geometry parameters, forward differences."""

    def per_joint(m: ComplianceModel) -> Array:
        jac = position_jacobian(m.chain, forward(m.chain, q))  # (B, 3, n)
        return np.asarray(jac * np.einsum("bjn,bj->bn", jac, force)[:, None, :])

    base = per_joint(model)
    cols = []
    for p in np.flatnonzero(keep):
        delta = np.zeros(keep.size)
        delta[p] = GEOMETRY_STEP
        moved = compliance_model(with_geometry_errors(model.robot, delta))
        cols.append((per_joint(moved) - base) / GEOMETRY_STEP)
    return np.stack(cols, axis=3)


def _cross_matrix(v: Array) -> Array:
    """(B, 3, 3) [v]x for v (B, 3)."""
    out = np.zeros((v.shape[0], 3, 3))
    out[:, 0, 1], out[:, 0, 2] = -v[:, 2], v[:, 1]
    out[:, 1, 0], out[:, 1, 2] = v[:, 2], -v[:, 0]
    out[:, 2, 0], out[:, 2, 1] = -v[:, 1], v[:, 0]
    return out


def extended_model(
    model: ComplianceModel,
    data: TcpMeasurements,
    k_mean: Array,
    k_precision: Array,
    errors: TcpErrorPrior,
) -> ExtendedModel:
    """The measurement model of the module docstring and the prior of [k, nuisances]."""
    n, m = model.n_joints, len(data)
    q, force = data.q_rad, data.force_n
    case = load_case(model, q, force)
    blocks: dict[str, tuple[Array, Array]] = {}  # name -> (prior mean, prior sd)
    tilt = geo = None
    if errors.link_tilt_ratio > 0:
        tilt = tilt_columns(model.chain, q, force)  # (B, 3, 4n)
        # half of a link's tilt at each end on average; independent ends with sd mean / sqrt 2
        # give the link's total the sd it is said to have (its mean)
        ratio = np.repeat(errors.link_tilt_ratio / k_mean, 4)
        blocks["tilt"] = (ratio / 2, ratio / np.sqrt(2))
    is_len = geometry_is_length(model.robot)
    geo_sd = np.where(is_len, errors.length_sd_m, errors.angle_sd_rad)
    if np.any(geo_sd > 0):
        geo = _geometry_terms(model, q, force, geo_sd > 0)  # (B, 3, n, G)
        blocks["geometry"] = (np.zeros(geo.shape[3]), geo_sd[geo_sd > 0])
    if errors.force_scale_sd > 0:
        blocks["force_scale"] = (np.zeros(1), np.array([errors.force_scale_sd]))
    if errors.laser_rotation_sd_rad > 0:
        blocks["laser_rotation"] = (np.zeros(3), np.full(3, errors.laser_rotation_sd_rad))
    slices, start = {}, n
    for name, (mean, _) in blocks.items():
        slices[name] = slice(start, start + mean.size)
        start += mean.size
    prior_mean = np.concatenate([k_mean, *(b[0] for b in blocks.values())])
    precision = np.zeros((start, start))
    precision[:n, :n] = k_precision
    for name, (_, sd) in blocks.items():
        s = slices[name]
        precision[s, s] = np.diag(sd**-2.0)

    def eta(par: Array) -> tuple[Array, Array]:
        k = par[:n]
        c = float(par[slices["force_scale"]][0]) if "force_scale" in slices else 0.0
        scaled = replace(case, tau_force=case.tau_force * (1 + c))
        dev, s_k = deviation_and_sensitivity(model, scaled, k)
        sens = np.zeros((m, 3, start))
        sens[:, :, :n] = s_k
        extra = np.zeros((m, 3))
        if tilt is not None:
            t = par[slices["tilt"]]
            extra += tilt @ t
            sens[:, :, slices["tilt"]] = (1 + c) * tilt
        if geo is not None:
            g = par[slices["geometry"]]
            per_joint = geo @ g  # (B, 3, n)
            extra += per_joint @ (1.0 / k)
            sens[:, :, :n] -= (1 + c) * per_joint / k**2
            sens[:, :, slices["geometry"]] = (1 + c) * np.einsum("bjnp,n->bjp", geo, 1.0 / k)
        body = dev + (1 + c) * extra
        if "force_scale" in slices:
            # d eta / dc = sum_i J_i tau_i / k_i = -S_k k / (1 + c): the torques scale with c
            sens[:, :, slices["force_scale"]] = (-(s_k @ k) / (1 + c) + extra)[:, :, None]
        if "laser_rotation" in slices:
            w = par[slices["laser_rotation"]]
            sens += np.cross(w, np.swapaxes(sens, 1, 2)).swapaxes(1, 2)  # R(w) on every column
            sens[:, :, slices["laser_rotation"]] = -_cross_matrix(body)  # d(w x b)/dw
            body = body + np.cross(w, body)
        return body.ravel(), sens.reshape(m * 3, start)

    return ExtendedModel(eta, prior_mean, precision, slices)


def nuisance_summary(par: Array, slices: dict[str, slice], k_mean: Array) -> dict[str, float]:
    """The estimated nuisances worth reading: force scale, laser angles, tilt ratios."""
    out: dict[str, float] = {}
    if "force_scale" in slices:
        out["force_scale"] = float(par[slices["force_scale"]][0])
    if "laser_rotation" in slices:
        for axis, v in zip("xyz", par[slices["laser_rotation"]], strict=True):
            out[f"laser_rotation_{axis}_rad"] = float(v)
    if "tilt" in slices:
        # the link's total about x and y (both ends), relative to its joint's 1 / k0
        ratio = par[slices["tilt"]].reshape(-1, 2, 2).sum(axis=1) * k_mean[:, None]
        for i, (vx, vy) in enumerate(ratio):
            out[f"link_tilt_ratio_{i + 1}_x"] = float(vx)
            out[f"link_tilt_ratio_{i + 1}_y"] = float(vy)
    return out
