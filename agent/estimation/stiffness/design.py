"""Optimal design of stiffness experiments (Prod. Eng. 2023, eqs. 16-21), and its dual-encoder twin.

The design u = (poses, forces) minimises a scalar criterion of the linearised posterior
covariance at the prior mean k0 (eq. 17): A = trace, D = determinant, E = largest eigenvalue
(eq. 16). Bounds: joint limits and force components (eq. 19, +-300 N in the paper). Nonlinear
constraints: g(u) <= 0 keeps the tool within the cone of eq. 21 (the angle between the vector
joint 6 -> TCP and the horizontal direction base -> TCP at most phi_max, 80 deg in the paper;
eq. 21 is the law of cosines for that angle between two unit vectors) and a closed chain's
coupled angle within its range; h(u) = 0 optionally holds the TCP at one target position (the
paper's experiment: one position, several orientations). Solved by SLSQP (scipy) from several
starts; gradients are forward differences evaluated for all variables in one batched pass.

Criteria are minimised as logarithms relative to the prior (same minimiser, scale-free); the
design reports the plain values of eq. 16. Sequential design: `given` measurements add their
information (at k0 or at the current estimate) and only the new ones are optimised.

Dual encoder (not in the paper): the poses are the only input, gravity the load; the
criterion is taken on the stiffness block of the posterior, the encoder offsets marginalised
(agent.estimation.stiffness.design_dual).

The criteria, the design dataclass and the multi-start SLSQP live in
agent.estimation.stiffness.design_solver; this module states the paper's TCP problem; the
random designs it is compared with are agent.estimation.stiffness.design_random's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.estimation.stiffness.design_solver import (
    CRITERIA,
    Array,
    Criterion,
    Problem,
    StiffnessDesign,
    check_identified,
    criterion_value,
    solve,
    whiten_prior,
)
from agent.estimation.stiffness.inference import StiffnessMethod, StiffnessPrior
from agent.models.robot.compliance import (
    ComplianceModel,
    InfeasibleRequestError,
    linear_sensitivity,
)
from agent.models.robot.kinematics import forward, position_jacobian


@dataclass(frozen=True)
class TcpDesignSettings:
    measurements: int
    criterion: Criterion = "A"
    force_min_n: tuple[float, float, float] = (-300.0, -300.0, -300.0)
    force_max_n: tuple[float, float, float] = (300.0, 300.0, 300.0)
    cone_max_deg: float | None = 80.0  # eq. 21; None: no orientation constraint
    target_m: tuple[float, float, float] | None = None  # h(u) = 0: one TCP position
    noise_m: float = 1e-6  # laser sensor sd (the paper's Keyence LK-G32: 1 um)
    starts: int = 4
    max_iter: int = 200
    seed: int = 0
    tolerance: float = 1e-5  # constraint violation accepted (rad, m, cosine)


# -- TCP force and laser deviation (the paper) -------------------------------------------------


def tcp_problem(
    model: ComplianceModel,
    settings: TcpDesignSettings,
    prior: StiffnessPrior,
    k_ref: Array,
    base_extra: Array,
    n_meas: int,
) -> tuple[Problem, float]:
    robot, n = model.robot, model.n_joints
    fmin = np.asarray(settings.force_min_n, dtype=np.float64)
    fmax = np.asarray(settings.force_max_n, dtype=np.float64)
    if fmin.shape != (3,) or fmax.shape != (3,) or np.any(fmin > fmax):
        raise InfeasibleRequestError("force bounds", f"need min <= max, got {fmin}, {fmax}")
    f_scale = max(float(np.max(np.abs(np.concatenate([fmin, fmax])))), 1.0)
    limits = robot.position_limits_rad()
    lower = np.tile(np.concatenate([limits[:, 0], fmin / f_scale]), n_meas)
    upper = np.tile(np.concatenate([limits[:, 1], fmax / f_scale]), n_meas)
    scale, prior_w = whiten_prior(prior)
    ranged = [i for i, j in enumerate(robot.joints) if j.dh_range_rad is not None]
    rng_lo = np.array([robot.joints[i].dh_range_rad[0] for i in ranged])  # type: ignore[index]
    rng_hi = np.array([robot.joints[i].dh_range_rad[1] for i in ranged])  # type: ignore[index]
    cone = settings.cone_max_deg
    cos_max = None if cone is None else math.cos(math.radians(cone))
    target = None if settings.target_m is None else np.asarray(settings.target_m, dtype=np.float64)

    def evaluate(x: Array) -> tuple[Array, Array, Array]:
        b = x.shape[0]
        u = x.reshape(b * n_meas, n + 3)
        q, f = u[:, :n], u[:, n:] * f_scale
        pose = forward(model.chain, q)
        s = linear_sensitivity(position_jacobian(model.chain, pose), f, k_ref) * scale
        s = s.reshape(b, n_meas * 3, n)
        info = np.einsum("bmi,bmj->bij", s, s) / settings.noise_m**2
        ineq = []
        if cos_max is not None:
            ineq.append((_cone_cosine(pose) - cos_max).reshape(b, n_meas))
        if ranged:
            coupled = (q @ model.chain.coupling.T)[:, ranged]
            ineq.append((coupled - rng_lo).reshape(b, -1))
            ineq.append((rng_hi - coupled).reshape(b, -1))
        eq = [] if target is None else [(pose.tcp_pos - target).reshape(b, -1)]
        return (
            info,
            np.concatenate(ineq, axis=1) if ineq else np.zeros((b, 0)),
            np.concatenate(eq, axis=1) if eq else np.zeros((b, 0)),
        )

    problem = Problem(lower, upper, evaluate, scale, prior_w + base_extra, n, settings.criterion)
    return problem, f_scale


def _cone_cosine(pose: Any) -> Array:
    """cos(phi) of eq. 21: tool direction (joint 6 -> TCP, the tool z axis when the TCP is on
    the flange) against the horizontal direction from the base to the TCP."""
    tool = pose.tcp_pos - pose.flange_pos
    length = np.linalg.norm(tool, axis=1, keepdims=True)
    tool = np.where(length > 1e-9, tool / np.maximum(length, 1e-300), pose.tcp_rot[:, :, 2])
    radial = pose.tcp_pos.copy()
    radial[:, 2] = 0.0
    radial /= np.maximum(np.linalg.norm(radial, axis=1, keepdims=True), 1e-9)
    return np.asarray(np.sum(tool * radial, axis=1))


def _constraint_names(model: ComplianceModel, settings: TcpDesignSettings, k: int) -> list[str]:
    names = []
    if settings.cone_max_deg is not None:
        names += [f"tool-axis cone (eq. 21, phi <= {settings.cone_max_deg:g} deg)"] * k
    ranged = [j.name for j in model.robot.joints if j.dh_range_rad is not None]
    names += [f"closed-chain range of joint {name} (lower)" for _ in range(k) for name in ranged]
    names += [f"closed-chain range of joint {name} (upper)" for _ in range(k) for name in ranged]
    if settings.target_m is not None:
        names += [f"target TCP position {tuple(settings.target_m)} m (h(u) = 0)"] * (3 * k)
    return names


def given_information(
    model: ComplianceModel,
    prior: StiffnessPrior,
    q: npt.ArrayLike,
    force: npt.ArrayLike,
    noise_m: float,
    k_ref: npt.ArrayLike | None = None,
) -> Array:
    """Whitened information of measurements already taken (for sequential design)."""
    k = prior.mean_nm_rad if k_ref is None else np.asarray(k_ref, dtype=np.float64)
    scale, _ = whiten_prior(prior)
    qa = np.atleast_2d(np.asarray(q, dtype=np.float64))
    fa = np.broadcast_to(np.asarray(force, dtype=np.float64), (qa.shape[0], 3))
    jac = position_jacobian(model.chain, forward(model.chain, qa))
    s = (linear_sensitivity(jac, np.array(fa), k) * scale).reshape(-1, model.n_joints)
    return np.asarray(s.T @ s / noise_m**2)


def design_tcp(
    model: ComplianceModel,
    settings: TcpDesignSettings,
    prior: StiffnessPrior,
    *,
    given_q: npt.ArrayLike | None = None,
    given_force: npt.ArrayLike | None = None,
    k_ref: npt.ArrayLike | None = None,
) -> StiffnessDesign:
    """The `settings.measurements` most informative (pose, force) pairs, after `given` ones."""
    started = time.perf_counter()
    k_n = settings.measurements
    if k_n < 1:
        raise InfeasibleRequestError("measurements", f"need at least 1, got {k_n}")
    if settings.criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {settings.criterion!r}")
    if not np.any(np.asarray([*settings.force_min_n, *settings.force_max_n])):
        raise InfeasibleRequestError(
            "force bounds", "allow only F = 0: no measurement loads any joint (singular design)"
        )
    k = prior.mean_nm_rad if k_ref is None else np.asarray(k_ref, dtype=np.float64)
    extra = np.zeros((model.n_joints, model.n_joints))
    given = 0
    if given_q is not None:
        if given_force is None:
            raise ValueError("given_q needs given_force")
        extra = given_information(model, prior, given_q, given_force, settings.noise_m, k)
        given = int(np.atleast_2d(np.asarray(given_q)).shape[0])
    problem, f_scale = tcp_problem(model, settings, prior, k, extra, k_n)
    rng = np.random.default_rng(settings.seed)
    n_starts = max(settings.starts, 1)
    if settings.target_m is None:
        starts = [_tcp_start(problem, rng, k_n, model.n_joints) for _ in range(n_starts)]
    else:
        _check_reach(model, settings.target_m)
        # with a target position, random poses are infeasible: start from projected ones
        single, _ = tcp_problem(model, settings, prior, k, extra, 1)
        target = np.asarray(settings.target_m, dtype=np.float64)
        rows, viol, worst = _feasible_rows(model, single, target, rng, k_n * n_starts)
        if not rows:
            names = _constraint_names(model, settings, 1)
            what = names[worst] if 0 <= worst < len(names) else "constraints"
            raise InfeasibleRequestError(
                what,
                f"no pose within the joint limits meets it (closest: violation "
                f"{viol:.3g}): the requested pose is not reachable",
            )
        starts = [
            np.concatenate([rows[(i * k_n + j) % len(rows)] for j in range(k_n)])
            for i in range(n_starts)
        ]
    sol = solve(problem, starts, settings.max_iter, settings.tolerance)
    if sol.feasible_starts == 0:
        names = _constraint_names(model, settings, k_n)
        what = names[sol.worst] if 0 <= sol.worst < len(names) else "constraints"
        raise InfeasibleRequestError(
            what,
            f"no start reached a feasible design (violation {sol.violation:.3g}): the "
            "requested pose is not reachable within the joint limits",
        )
    u = sol.x.reshape(k_n, model.n_joints + 3)
    q = u[:, : model.n_joints]
    # forces end on their bounds; snap the round-off of the scaling (300 * (1 - 2e-16))
    f = np.round(u[:, model.n_joints :] * f_scale, 9) + 0.0  # + 0.0: no -0.0
    info = problem.evaluate(sol.x[None, :])[0]
    bounds = (
        f"force bounds {settings.force_min_n}..{settings.force_max_n} N; a force never twists "
        "a joint whose axis passes through the TCP"
    )
    check_identified(problem, info[0], model.joint_names, bounds)
    cov = problem.covariance(info)[0]
    prior_cov = problem.covariance(np.zeros_like(info))[0]
    pose = forward(model.chain, q)
    return StiffnessDesign(
        method=StiffnessMethod.TCP_DEVIATION,
        criterion=settings.criterion,
        joint_names=model.joint_names,
        q_rad=q,
        force_n=f,
        tcp_m=pose.tcp_pos,
        covariance=cov,
        criterion_value=criterion_value(cov, settings.criterion),
        prior_criterion_value=criterion_value(prior_cov, settings.criterion),
        starts=len(starts),
        feasible_starts=sol.feasible_starts,
        seconds=time.perf_counter() - started,
        given=given,
        extra={
            "noise_m": settings.noise_m,
            "cone_deg": np.degrees(np.arccos(np.clip(_cone_cosine(pose), -1, 1))).tolist(),
            "k_ref_nm_rad": np.asarray(k).tolist(),
        },
    )


def _check_reach(model: ComplianceModel, target: tuple[float, float, float]) -> None:
    """Quick bound: the TCP is never farther from the first joint's axis point than the sum
    of the distances between consecutive body-frame origins and the tool (triangle rule)."""
    chain = model.chain
    reach = float(
        np.sum(np.linalg.norm(chain.geometry.placement_pos[1:], axis=1))
        + np.linalg.norm(chain.tip[:3, 3])
    )
    distance = float(np.linalg.norm(np.asarray(target) - chain.geometry.placement_pos[0]))
    if distance > reach:
        raise InfeasibleRequestError(
            f"target TCP position {tuple(target)} m (h(u) = 0)",
            f"{distance:.3f} m from the first joint, beyond the reach of {reach:.3f} m: "
            "the requested pose is not reachable",
        )


def _feasible_rows(
    model: ComplianceModel,
    problem: Problem,
    target: Array,
    rng: np.random.Generator,
    count: int,
    batches: int = 4,
) -> tuple[list[Array], float, int]:
    """`count` random feasible rows (pose, corner force) of a one-measurement problem whose TCP
    must sit at `target`. Random poses go to the target by damped least squares (all at once,
    clipped to the joint limits); the rows that then meet every constraint are kept. Returns
    the rows, and the smallest violation left and its constraint index when none qualified."""
    n = model.n_joints
    rows: list[Array] = []
    best_violation, worst = math.inf, -1
    for _ in range(batches):
        x = np.stack([_tcp_start(problem, rng, 1, n) for _ in range(256)])
        q = x[:, :n]
        for _ in range(40):
            pose = forward(model.chain, q)
            jac = position_jacobian(model.chain, pose)
            err = target - pose.tcp_pos
            jjt = np.einsum("bin,bjn->bij", jac, jac) + 1e-4 * np.eye(3)
            q = q + np.einsum("bin,bi->bn", jac, np.linalg.solve(jjt, err[..., None])[..., 0])
            q = np.clip(q, problem.lower[:n], problem.upper[:n])
        x[:, :n] = q
        _, ineq, eq = problem.evaluate(x)
        viol = np.concatenate([np.maximum(-ineq, 0.0), np.abs(eq)], axis=1)
        worst_each = viol.max(axis=1) if viol.shape[1] else np.zeros(len(x))
        rows += list(x[worst_each <= 1e-9])
        if len(rows) >= count:
            return rows[:count], 0.0, -1
        i = int(np.argmin(worst_each))
        if worst_each[i] < best_violation:
            best_violation, worst = float(worst_each[i]), int(np.argmax(viol[i]))
    return rows, best_violation, worst


def _tcp_start(problem: Problem, rng: np.random.Generator, k_n: int, n: int) -> Array:
    """Random poses inside the limits, forces at random corners of the box (information
    grows with |F|^2, so the optimum lies on the force bounds)."""
    lo, hi = problem.lower.reshape(k_n, n + 3), problem.upper.reshape(k_n, n + 3)
    x = rng.uniform(lo, hi)
    corner = rng.integers(0, 2, (k_n, 3)).astype(bool)
    x[:, n:] = np.where(corner, hi[:, n:], lo[:, n:])
    return np.asarray(x.ravel())
