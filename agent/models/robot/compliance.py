"""Compliance model of a robot with torsionally elastic joints (Prod. Eng. 2023, eqs. 1-7).

Links are rigid, every actuated joint i is a linear torsional spring of stiffness k_i
(the gear, eq. 3). A force F at the TCP loads the joints with M = J(q)^T F, J the TCP
position Jacobian of the actuated angles (eqs. 4-5: the z component of the lever arm from
joint i's axis to the TCP crossed with F); the joints twist by dq_i = M_i / k_i and the TCP
moves by eq. 6, the forward transformation at q + dq minus the one at q (eq. 2 adds the
twist as an extra rotation about each joint's z axis, which is what q + dq does). Closed
chains (the IRB 6660 parallelogram, eq. 7) enter through the robot file's `dh_coupling`.

The torques are taken at the unloaded pose (the paper's eqs. 4-5) and eq. 6 is evaluated
exactly; `sensitivity` is its exact derivative with respect to k. `linear_sensitivity` drops
the second-order term (J at q instead of q + dq, a relative change of order |dq| ~ 1e-4 rad)
and is what the experiment design uses, as the paper does when it fixes k at k0 (eq. 17).
Optionally the robot's own weight is part of the load (`with_gravity`): the deviation is then
the one between the loaded and the unloaded robot, both sagging under gravity.

Gravity alone as the load (the dual-encoder variant): at standstill each joint twists by
tau_g(q) / k, which a motor encoder (divided by the gear ratio) minus a link encoder reads.
The measurement records of both kinds and their simulators (sensor noise, encoder
quantisation) are agent.models.robot.compliance_measurements'.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.errors import ConfigError, EstimationError
from agent.models.robot.description import (
    InertiaTensor,
    LinkInertial,
    RobotDescription,
    rpy_matrix,
    skew,
)
from agent.models.robot.kinematics import (
    Chain,
    as_poses,
    forward,
    gravity_torques,
    make_chain,
    position_jacobian,
)

Array = npt.NDArray[np.float64]


class InfeasibleRequestError(EstimationError):
    """A pose, force or design that cannot be done: `subject` names the joint or constraint."""

    def __init__(self, subject: str, problem: str) -> None:
        super().__init__(f"{subject}: {problem}")
        self.subject = subject
        self.problem = problem


@dataclass(frozen=True)
class ComplianceModel:
    chain: Chain
    with_gravity: bool = False

    @property
    def robot(self) -> RobotDescription:
        return self.chain.robot

    @property
    def n_joints(self) -> int:
        return self.chain.n_joints

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self.robot.joint_names

    def nominal_stiffness(self) -> Array:
        """k from the robot file; every joint must have one."""
        missing = [j.name for j in self.robot.joints if j.stiffness_nm_rad is None]
        if missing:
            raise ConfigError(
                f"{self.robot.source}: joints {', '.join(missing)} have no stiffness_nm_rad "
                "(the compliance model needs a value, at least as a prior)"
            )
        return np.array([float(j.stiffness_nm_rad or 0.0) for j in self.robot.joints])


def compliance_model(robot: RobotDescription, *, with_gravity: bool = False) -> ComplianceModel:
    return ComplianceModel(make_chain(robot), with_gravity)


def _forces(force: npt.ArrayLike, b: int) -> Array:
    f = np.asarray(force, dtype=np.float64)
    if f.ndim == 1:
        f = f[None, :]
    if f.ndim != 2 or f.shape[1] != 3 or f.shape[0] not in (1, b):
        raise ValueError(f"force must have shape ({b}, 3) or (3,), got {np.shape(force)}")
    if not np.all(np.isfinite(f)):
        raise ValueError("force holds values that are not finite")
    return np.broadcast_to(f, (b, 3))


def _stiffness(k: npt.ArrayLike, n: int) -> Array:
    ka = np.asarray(k, dtype=np.float64)
    if ka.shape != (n,) or not np.all(np.isfinite(ka)) or np.any(ka <= 0):
        raise ValueError(f"k must be {n} positive finite stiffnesses (N·m/rad), got {ka!r}")
    return ka


def joint_torques(model: ComplianceModel, q: npt.ArrayLike, force: npt.ArrayLike) -> Array:
    """(B, n) joint torques M = J^T F of a TCP force (eqs. 3-5), plus gravity if modelled."""
    qa = as_poses(q, model.n_joints)
    f = _forces(force, qa.shape[0])
    jac = position_jacobian(model.chain, forward(model.chain, qa))
    return np.einsum("bjn,bj->bn", jac, f)


@dataclass(frozen=True)
class LoadCase:
    """Poses and TCP forces with everything that does not depend on k, computed once."""

    q: Array  # (B, n)
    force: Array  # (B, 3)
    tau_force: Array  # (B, n) J(q)^T F, eqs. 4-5
    tau_gravity: Array  # (B, n) zeros without the gravity model
    unloaded_tcp: Array | None  # (B, 3) TCP at q when gravity is left out (k-independent)


def load_case(model: ComplianceModel, q: npt.ArrayLike, force: npt.ArrayLike) -> LoadCase:
    qa = as_poses(q, model.n_joints)
    f = np.array(_forces(force, qa.shape[0]))
    pose = forward(model.chain, qa)
    jac = position_jacobian(model.chain, pose)
    tau_f = np.einsum("bjn,bj->bn", jac, f)
    if model.with_gravity:
        tau_g = gravity_torques(model.chain, qa)
        return LoadCase(qa, f, tau_f, tau_g, None)
    return LoadCase(qa, f, tau_f, np.zeros_like(tau_f), pose.tcp_pos)


def deviation_and_sensitivity(
    model: ComplianceModel, case: LoadCase, k: npt.ArrayLike
) -> tuple[Array, Array]:
    """Eq. 6 (B, 3) and its exact derivative with respect to k (B, 3, n), eq. 14.

    d/dk_i p(q + tau/k) = J(q + tau/k)[:, i] * (-tau_i / k_i^2), once for the loaded pose and
    (with the gravity torques only) once for the unloaded one.
    """
    ka = _stiffness(k, model.n_joints)
    tau = case.tau_force + case.tau_gravity
    loaded = forward(model.chain, case.q + tau / ka)
    sens = position_jacobian(model.chain, loaded) * (-tau / ka**2)[:, None, :]
    if case.unloaded_tcp is not None:
        return np.asarray(loaded.tcp_pos - case.unloaded_tcp), np.asarray(sens)
    sag = forward(model.chain, case.q + case.tau_gravity / ka)
    sens = sens + position_jacobian(model.chain, sag) * (case.tau_gravity / ka**2)[:, None, :]
    return np.asarray(loaded.tcp_pos - sag.tcp_pos), np.asarray(sens)


def tcp_deviation(
    model: ComplianceModel, q: npt.ArrayLike, force: npt.ArrayLike, k: npt.ArrayLike
) -> Array:
    """(B, 3) TCP displacement under the force, eq. 6: TCP_F - TCP_ideal."""
    return deviation_and_sensitivity(model, load_case(model, q, force), k)[0]


def sensitivity(
    model: ComplianceModel, q: npt.ArrayLike, force: npt.ArrayLike, k: npt.ArrayLike
) -> Array:
    """(B, 3, n): d(tcp_deviation)/dk, exact (eq. 14)."""
    return deviation_and_sensitivity(model, load_case(model, q, force), k)[1]


def linear_sensitivity(jac: Array, force: Array, k: Array) -> Array:
    """(B, 3, n) small-deflection sensitivity -J diag(J^T F / k^2) from Jacobians (B, 3, n).

    Gravity does not enter: to first order the deviation J K^-1 J^T F is independent of it.
    """
    tau = np.einsum("bjn,bj->bn", jac, force)
    return np.asarray(jac * (-tau / k**2)[:, None, :])


def cartesian_compliance(model: ComplianceModel, q: npt.ArrayLike, k: npt.ArrayLike) -> Array:
    """(B, 3, 3) translational compliance J K^-1 J^T (m/N) at small deflections."""
    jac = position_jacobian(model.chain, forward(model.chain, q))
    ka = _stiffness(k, model.n_joints)
    return np.asarray(np.einsum("bin,n,bjn->bij", jac, 1.0 / ka, jac))


@dataclass(frozen=True)
class DeviationPrediction:
    """TCP deviation under a force, with its covariance propagated from that of k."""

    q_rad: Array  # (B, n)
    force_n: Array  # (B, 3)
    deviation_m: Array  # (B, 3)
    covariance_m2: Array  # (B, 3, 3)
    joint_torque_nm: Array  # (B, n)
    joint_names: tuple[str, ...]

    @property
    def std_m(self) -> Array:
        return np.sqrt(np.clip(np.diagonal(self.covariance_m2, axis1=1, axis2=2), 0.0, None))

    def to_dict(self) -> dict[str, Any]:
        return {
            "joint_names": list(self.joint_names),
            "q_rad": self.q_rad.tolist(),
            "force_n": self.force_n.tolist(),
            "deviation_m": self.deviation_m.tolist(),
            "deviation_std_m": self.std_m.tolist(),
            "covariance_m2": self.covariance_m2.tolist(),
            "joint_torque_nm": self.joint_torque_nm.tolist(),
        }


def predict_deviation(
    model: ComplianceModel,
    q: npt.ArrayLike,
    force: npt.ArrayLike,
    k: npt.ArrayLike,
    k_covariance: npt.ArrayLike,
) -> DeviationPrediction:
    """Eq. 6 at k, and its covariance S C_k S^T (S = eq. 14) from the covariance of k."""
    qa = as_poses(q, model.n_joints)
    check_poses(model, qa)
    f = np.array(_forces(force, qa.shape[0]))
    cov = np.asarray(k_covariance, dtype=np.float64)
    n = model.n_joints
    if cov.shape != (n, n):
        raise ValueError(f"k_covariance must be ({n}, {n}), got {cov.shape}")
    case = load_case(model, qa, f)
    dev, s = deviation_and_sensitivity(model, case, k)
    return DeviationPrediction(
        q_rad=qa,
        force_n=f,
        deviation_m=dev,
        covariance_m2=np.einsum("bin,nm,bjm->bij", s, cov, s),
        joint_torque_nm=case.tau_force,
        joint_names=model.joint_names,
    )


def check_poses(model: ComplianceModel, q: Array, where: str = "pose") -> None:
    """Raise InfeasibleRequestError naming the joint if a pose leaves the joint limits or a
    coupled joint's DH range (tolerance 1e-9 rad for round-off)."""
    limits = model.robot.position_limits_rad()
    outside = (q < limits[:, 0] - 1e-9) | (q > limits[:, 1] + 1e-9)
    ranges = np.array(
        [
            j.dh_range_rad if j.dh_range_rad is not None else (-np.inf, np.inf)
            for j in model.robot.joints
        ]
    )
    coupled = q @ model.chain.coupling.T
    linkage = (coupled < ranges[:, 0] - 1e-9) | (coupled > ranges[:, 1] + 1e-9)
    if not (outside.any() or linkage.any()):
        return
    b, i = np.argwhere(outside | linkage)[0]
    label = where if q.shape[0] == 1 else f"{where} {b + 1}"
    name = model.joint_names[i]
    if outside[b, i]:
        lo, hi = limits[i]
        raise InfeasibleRequestError(
            f"joint {name}",
            f"{label} asks for {q[b, i]:.6g} rad, outside its limits [{lo:.6g}, {hi:.6g}] rad: "
            "the pose is not reachable",
        )
    lo, hi = ranges[i]
    raise InfeasibleRequestError(
        f"joint {name} (closed chain)",
        f"{label} puts its coupled angle at {coupled[b, i]:.6g} rad, outside dh_range_rad "
        f"[{lo:.6g}, {hi:.6g}]: the pose is not reachable",
    )


# -- gravity as the load (dual-encoder stiffness) ---------------------------------------------


@dataclass(frozen=True)
class Payload:
    """A rigid load on the flange, centre of mass in the last DH frame."""

    mass_kg: float
    com_m: tuple[float, float, float]


def with_payload(robot: RobotDescription, payload: Payload) -> RobotDescription:
    """The robot with a point-mass payload merged into its last link (mass, centre of mass and,
    by Steiner, the inertia about the new centre of mass)."""
    if payload.mass_kg < 0:
        raise ValueError(f"payload mass must be >= 0, got {payload.mass_kg}")
    if payload.mass_kg == 0:
        return robot
    last = robot.joints[-1]
    link = last.link
    m1, m2 = link.mass_kg, payload.mass_kg
    c1, c2 = np.asarray(link.com_m), np.asarray(payload.com_m, dtype=np.float64)
    m = m1 + m2
    c = (m1 * c1 + m2 * c2) / m
    rot = rpy_matrix(link.inertia_rpy_rad)
    inertia = rot @ link.inertia_com_kg_m2.matrix() @ rot.T
    for mass, at in ((m1, c1), (m2, c2)):
        s = skew(at - c)
        inertia = inertia + mass * (s.T @ s)
    merged = LinkInertial(
        mass_kg=m,
        com_m=(float(c[0]), float(c[1]), float(c[2])),
        inertia_com_kg_m2=InertiaTensor(
            xx=float(inertia[0, 0]),
            yy=float(inertia[1, 1]),
            zz=float(inertia[2, 2]),
            xy=float(inertia[0, 1]),
            xz=float(inertia[0, 2]),
            yz=float(inertia[1, 2]),
        ),
    )
    joints = (*robot.joints[:-1], replace(last, link=merged))
    return replace(robot, joints=joints)


def gravity_deflection(model: ComplianceModel, q: npt.ArrayLike, k: npt.ArrayLike) -> Array:
    """(B, n) static twist of every joint under the robot's weight, tau_g(q) / k: what a
    motor encoder (divided by the gear ratio) minus a link encoder reads at standstill."""
    qa = as_poses(q, model.n_joints)
    ka = _stiffness(k, model.n_joints)
    return np.asarray(gravity_torques(model.chain, qa) / ka)
