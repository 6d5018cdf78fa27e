"""Stiffness design for a joint with two encoders (not in Prod. Eng. 2023): the standstill poses
whose gravity torques best determine each joint's stiffness.

The poses are the only input and gravity the load; the criterion is taken on the stiffness
block of the posterior, the encoder offsets marginalised. The optimisation is
agent.estimation.stiffness.design_solver's.
"""

from __future__ import annotations

import math
import time

import numpy as np

from agent.estimation.stiffness.design_solver import (
    Array,
    Criterion,
    Problem,
    StiffnessDesign,
    check_identified,
    criterion_value,
    solve,
)
from agent.estimation.stiffness.inference import StiffnessMethod, StiffnessPrior, joint_indices
from agent.models.robot.compliance import ComplianceModel, InfeasibleRequestError
from agent.models.robot.compliance_measurements import encoder_sigma_rad
from agent.models.robot.kinematics import forward, gravity_torques


def design_dual_encoder(
    model: ComplianceModel,
    poses: int,
    prior: StiffnessPrior,
    *,
    criterion: Criterion = "A",
    joints: tuple[str, ...] | None = None,
    noise_counts: float = 0.5,
    offset_std_rad: float = 0.01,
    starts: int = 3,
    max_iter: int = 200,
    seed: int = 0,
) -> StiffnessDesign:
    """Standstill poses whose gravity torques best determine k of `joints` (default all)."""
    started = time.perf_counter()
    robot, n = model.robot, model.n_joints
    if robot.encoder_counts_per_turn is None:
        raise InfeasibleRequestError(
            "encoder_counts_per_turn", f"{robot.source} has no encoder resolution"
        )
    if poses < 2:
        raise InfeasibleRequestError("poses", f"need 2 or more (stiffness, offset), got {poses}")
    names = model.joint_names
    idx = joint_indices(model, joints)
    m = len(idx)
    gear = np.array([j.gear_ratio for j in robot.joints])
    sigma = encoder_sigma_rad(robot.encoder_counts_per_turn, gear, noise_counts)[idx]
    k0 = prior.mean_nm_rad[idx]
    k_scale = (prior.std_nm_rad / math.sqrt(prior.gamma))[idx]
    scale = np.concatenate([k_scale, np.full(m, offset_std_rad)])
    limits = robot.position_limits_rad()
    lower, upper = np.tile(limits[:, 0], poses), np.tile(limits[:, 1], poses)
    ranged = [i for i, j in enumerate(robot.joints) if j.dh_range_rad is not None]
    cols = np.arange(m)

    def evaluate(x: Array) -> tuple[Array, Array, Array]:
        b = x.shape[0]
        q = x.reshape(b * poses, n)
        tau = gravity_torques(model.chain, q)[:, idx].reshape(b, poses, m)
        s4 = np.zeros((b, poses, m, 2 * m))
        s4[:, :, cols, cols] = -tau / k0**2 * k_scale / sigma
        s4[:, :, cols, m + cols] = offset_std_rad / sigma
        s = s4.reshape(b, poses * m, 2 * m)
        info = np.einsum("bmi,bmj->bij", s, s)
        ineq = np.zeros((b, 0))
        if ranged:
            coupled = (q @ model.chain.coupling.T)[:, ranged]
            lo = np.array([robot.joints[i].dh_range_rad[0] for i in ranged])  # type: ignore[index]
            hi = np.array([robot.joints[i].dh_range_rad[1] for i in ranged])  # type: ignore[index]
            ineq = np.concatenate([coupled - lo, hi - coupled], axis=1).reshape(b, -1)
        return info, ineq, np.zeros((b, 0))

    problem = Problem(lower, upper, evaluate, scale, np.eye(2 * m), m, criterion)
    rng = np.random.default_rng(seed)
    start_list = [rng.uniform(lower, upper) for _ in range(max(starts, 1))]
    sol = solve(problem, start_list, max_iter, 1e-6)
    if sol.feasible_starts == 0:
        raise InfeasibleRequestError("closed-chain range", "no start found feasible poses")
    info = problem.evaluate(sol.x[None, :])[0]
    sub = tuple(names[i] for i in idx)
    check_identified(
        problem,
        info[0],
        sub,
        "gravity does not twist it in any pose: axis parallel to gravity, or the centre of "
        "mass beyond it on its axis; exclude it, tilt the base or add an off-axis payload",
    )
    cov = problem.covariance(info)[0]
    prior_cov = problem.covariance(np.zeros_like(info))[0]
    q = sol.x.reshape(poses, n)
    tau = gravity_torques(model.chain, q)
    return StiffnessDesign(
        method=StiffnessMethod.DUAL_ENCODER,
        criterion=criterion,
        joint_names=sub,
        q_rad=q,
        force_n=None,
        tcp_m=forward(model.chain, q).tcp_pos,
        covariance=cov,
        criterion_value=criterion_value(cov, criterion),
        prior_criterion_value=criterion_value(prior_cov, criterion),
        starts=len(start_list),
        feasible_starts=sol.feasible_starts,
        seconds=time.perf_counter() - started,
        extra={
            "gravity_torque_nm": tau[:, idx].tolist(),
            "windup_sd_rad": sigma.tolist(),
            "noise_counts": noise_counts,
        },
    )
