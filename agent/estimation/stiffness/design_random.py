"""Random feasible stiffness designs: the baseline the optimal design (Prod. Eng. 2023, eq. 20)
is measured against.

A random design draws its poses uniformly within the joint limits and keeps those that meet
the constraints (tool cone of eq. 21, closed-chain range). Its forces are drawn one of two ways:
  * "budget" (the fair baseline): every measurement applies one force at the force budget,
    each component on one of its bounds with a random sign (a random corner of the box). That
    is the force the optimal design applies (information grows with |F|^2, so its forces end
    on the bounds), so the comparison measures the choice of poses and directions, not force;
  * "box": each component uniform within its bounds, about a third of that force energy
    (E[F_i^2] = b^2 / 3): the baseline the bench used first, printed beside the fair one.
One force per measurement either way, as in the paper's experiment (one cylinder, one
direction at a time).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from agent.estimation.stiffness.design import TcpDesignSettings, given_information, tcp_problem
from agent.estimation.stiffness.design_solver import (
    Array,
    StiffnessDesign,
    criterion_value,
    whiten_prior,
)
from agent.estimation.stiffness.inference import StiffnessMethod, StiffnessPrior
from agent.models.robot.compliance import (
    ComplianceModel,
    InfeasibleRequestError,
    linear_sensitivity,
)
from agent.models.robot.kinematics import forward, position_jacobian

RandomForces = Literal["budget", "box"]
RANDOM_FORCES: tuple[RandomForces, ...] = ("budget", "box")


def random_forces_n(
    settings: TcpDesignSettings, count: int, rng: np.random.Generator, forces: RandomForces
) -> Array:
    """(count, 3) forces, one per measurement, drawn as `forces` says (module docstring)."""
    lo = np.asarray(settings.force_min_n, dtype=np.float64)
    hi = np.asarray(settings.force_max_n, dtype=np.float64)
    if forces == "budget":
        return np.asarray(np.where(rng.integers(0, 2, (count, 3)).astype(bool), hi, lo))
    if forces == "box":
        return np.asarray(rng.uniform(lo, hi, (count, 3)))
    raise ValueError(f"forces must be one of {RANDOM_FORCES}, got {forces!r}")


def random_feasible_poses(
    model: ComplianceModel,
    settings: TcpDesignSettings,
    prior: StiffnessPrior,
    count: int,
    rng: np.random.Generator,
) -> Array:
    """(count, n) poses uniform within the joint limits that meet the constraints (rejection
    sampling). Not for a target position (the poses would need inverse kinematics)."""
    if settings.target_m is not None:
        raise ValueError("random designs do not support a target position")
    n = model.n_joints
    problem, _ = tcp_problem(model, settings, prior, prior.mean_nm_rad, np.zeros((n, n)), 1)
    rows: list[Array] = []
    for _ in range(1000 + count // 16):
        cand = rng.uniform(problem.lower, problem.upper, (64, n + 3))
        _, ineq, _ = problem.evaluate(cand)
        rows += list(cand[np.all(ineq >= 0, axis=1), :n])
        if len(rows) >= count:
            return np.array(rows[:count])
    raise InfeasibleRequestError("constraints", "no random pose meets them")


def random_feasible_tcp(
    model: ComplianceModel,
    settings: TcpDesignSettings,
    prior: StiffnessPrior,
    count: int,
    rng: np.random.Generator,
    *,
    forces: RandomForces = "budget",
) -> list[StiffnessDesign]:
    """`count` random designs of `settings.measurements` measurements each."""
    k_n = settings.measurements
    scale, prior_w = whiten_prior(prior)
    out = []
    for _ in range(count):
        q = random_feasible_poses(model, settings, prior, k_n, rng)
        f = random_forces_n(settings, k_n, rng, forces)
        info = given_information(model, prior, q, f, settings.noise_m)
        cov = np.linalg.inv(info + prior_w) * scale[:, None] * scale[None, :]
        out.append(
            StiffnessDesign(
                StiffnessMethod.TCP_DEVIATION,
                settings.criterion,
                model.joint_names,
                q,
                f,
                forward(model.chain, q).tcp_pos,
                cov,
                criterion_value(cov, settings.criterion),
                math.nan,
                0,
                0,
                0.0,
                extra={"forces": forces},
            )
        )
    return out


def random_design_criteria(
    model: ComplianceModel,
    settings: TcpDesignSettings,
    prior: StiffnessPrior,
    designs: int,
    rng: np.random.Generator,
    *,
    forces: RandomForces = "budget",
) -> Array:
    """(designs, settings.measurements): the criterion of each random design's first K
    measurements, K = 1, 2, ... Nested designs: information adds up, so along a row the
    criterion only falls and the median over designs is monotone in K (the smallest K whose
    median reaches a target is then well defined, without resampling each K)."""
    k_n = settings.measurements
    scale, prior_w = whiten_prior(prior)
    out = np.empty((designs, k_n))
    for d in range(designs):
        q = random_feasible_poses(model, settings, prior, k_n, rng)
        f = random_forces_n(settings, k_n, rng, forces)
        jac = position_jacobian(model.chain, forward(model.chain, q))
        s = linear_sensitivity(jac, f, prior.mean_nm_rad) * scale  # whitened, (K, 3, n)
        each = np.einsum("kmi,kmj->kij", s, s) / settings.noise_m**2
        cov = np.linalg.inv(np.cumsum(each, axis=0) + prior_w) * scale[:, None] * scale[None, :]
        out[d] = [criterion_value(c, settings.criterion) for c in cov]
    return out


def measurements_to_match(criteria: Array, target: float) -> int | None:
    """The smallest K whose median criterion over the random designs is <= target (None: not
    within the designs' length)."""
    median = np.median(criteria, axis=0)
    hit = np.flatnonzero(median <= target)
    return int(hit[0]) + 1 if hit.size else None
