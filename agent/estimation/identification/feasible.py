"""A physically consistent estimate beside the unconstrained least squares.

The base parameters fitted by (W)LS are only combinations of the links' standard parameters,
and noise or unmodelled effects can give values no real link has: a negative inertia about an
axis, a negative friction. The feasible estimate solves the same weighted problem over the
links' standard parameters pi (base = M pi, M the regrouping of
agent.estimation.identification.base_params) subject to

* each link's pseudo-inertia J(pi_i) positive semi-definite (Wensing, Kim and Slotine 2018: a
  link is physically consistent iff J is; the LMI of the identification literature): mass >= 0,
  the inertia at the centre of mass positive semi-definite, the triangle inequalities;
* rotor inertias, friction coefficients and stiffnesses >= 0; torque offsets free.

J is linear in pi, so this is a convex problem, a semidefinite program: solved by cvxpy with
Clarabel (an interior-point conic solver), whose status is reported. The least squares is
written through the R factor of the weighted rows (the same optimum, a problem of the
parameters' size, not the rows'). Each J is kept JITTER above semi-definite, so a link on the
boundary still has a positive mass and inertia. Directions the data cannot see (standard
parameters outside the base) are held near the robot file's links by a small pull. (The earlier
local solver over a log-Cholesky parametrisation stopped after 400 evaluations on real 6- and
7-joint logs, "an upper bound, not a verdict".)

What it reports is the cost: the weighted residual sum of squares above the unconstrained
optimum. Near 0 the unconstrained estimate was (close to) physically consistent; above 1 % it
was not, and `violations` says so and names what it broke that can be read off directly (a
negative drive parameter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.errors import EstimationError
from agent.estimation.identification.base_params import BaseParameters
from agent.estimation.identification.equations import LsqProblem
from agent.estimation.identification.least_squares import LsqSolution
from agent.estimation.identification.model import Array
from agent.models.robot.description import RobotDescription

# Drive parameters that are >= 0 in every real drive (offsets "off" and springs "ks" are signed).
NON_NEGATIVE = ("Ia", "fc", "fv", "k", "mu")
PRIOR_PULL = 1e-6  # of the residual's size per unit of pi: holds the directions data cannot see
JITTER = 1e-6  # each pseudo-inertia at least this far inside the cone (kg, kg·m, kg·m²)


@dataclass(frozen=True)
class FeasibleEstimate:
    """The physically consistent estimate: same names as the unconstrained one."""

    names: tuple[str, ...]
    estimate: Array
    links_standard: Array  # (n, 10): m, mx, my, mz, xx, xy, yy, xz, yz, zz about the DH frame
    cost_pct: float  # weighted residual sum of squares above the unconstrained optimum (%)
    rms_nm: Array  # per equation group, unweighted
    rms_unconstrained_nm: Array
    violations: tuple[str, ...]
    evaluations: int  # the solver's iterations
    message: str  # the solver and its status

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameters": [
                {"name": n, "value": float(v)}
                for n, v in zip(self.names, self.estimate, strict=True)
            ],
            "links_standard": self.links_standard.tolist(),
            "cost_pct": self.cost_pct,
            "rms_nm": self.rms_nm.tolist(),
            "rms_unconstrained_nm": self.rms_unconstrained_nm.tolist(),
            "violations": list(self.violations),
            "evaluations": self.evaluations,
            "message": self.message,
        }


def pseudo_inertia(pi: Array) -> Array:
    """The 4x4 pseudo-inertia of a link's 10 standard parameters (about its DH frame)."""
    m, h = pi[0], pi[1:4]
    xx, xy, yy, xz, yz, zz = pi[4:]
    inertia = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    j = np.zeros((4, 4))
    j[:3, :3] = 0.5 * np.trace(inertia) * np.eye(3) - inertia
    j[:3, 3] = j[3, :3] = h
    j[3, 3] = m
    return j


def _pseudo_inertia_expr(cp: Any, pi: Any) -> Any:
    """pseudo_inertia of a cvxpy vector of a link's 10 standard parameters: affine in them."""
    m, hx, hy, hz, xx, xy, yy, xz, yz, zz = (pi[k] for k in range(10))
    half = 0.5 * (xx + yy + zz)
    return cp.bmat(
        [
            [half - xx, -xy, -xz, hx],
            [-xy, half - yy, -yz, hy],
            [-xz, -yz, half - zz, hz],
            [hx, hy, hz, m],
        ]
    )


def feasible_estimate(
    problem: LsqProblem,
    sol: LsqSolution,
    names: list[str],
    base: BaseParameters,
    robot: RobotDescription,
) -> FeasibleEstimate:
    """The consistent estimate of the problem the unconstrained `sol` solved (module doc)."""
    try:
        import cvxpy as cp
    except ImportError:
        raise EstimationError(
            "the feasible estimate needs cvxpy: pip install 'joint-health-agent[feasible]'"
        ) from None
    n, b = robot.n_joints, base.count
    drive_names = names[b:]
    weights = sol.weights[problem.groups]
    aw = problem.a * weights[:, None]
    yw = problem.y * weights
    n_pi = 10 * n
    bounded = np.array([nm.rstrip("0123456789") in NON_NEGATIVE for nm in drive_names])
    pi_file = robot.standard_parameters().ravel()
    pi_start = pi_file + base.to_standard(sol.theta[:b] - base.to_base(pi_file))
    rows = np.hstack([aw[:, :b] @ base.matrix, aw[:, b:]])  # weighted rows of (pi, drive)
    rss0 = float(np.sum((aw @ sol.theta - yw) ** 2))
    # ||rows x - yw||^2 = ||R x - Q^T yw||^2 + what no x can change
    q, r = np.linalg.qr(rows, mode="reduced")
    target = q.T @ yw
    scale = float(np.sqrt(max(rss0, 1e-300)))
    reg = PRIOR_PULL * scale
    pi = cp.Variable(n_pi)
    drive = cp.Variable(len(drive_names))
    x = cp.hstack([pi, drive])
    # scaled by the unconstrained residual so that the solver sees numbers near 1
    objective = cp.sum_squares((r @ x - target) / scale) + cp.sum_squares(
        (pi - pi_start) * (reg / scale)
    )
    constraints = [
        _pseudo_inertia_expr(cp, pi[10 * i : 10 * i + 10]) >> JITTER * np.eye(4) for i in range(n)
    ]
    if bounded.any():
        constraints.append(drive[np.flatnonzero(bounded)] >= 0)
    sdp = cp.Problem(cp.Minimize(objective), constraints)
    try:
        sdp.solve(solver=cp.CLARABEL)
    except cp.error.SolverError as exc:
        raise EstimationError(f"the feasible estimate's solver failed: {exc}") from None
    status = str(sdp.status)
    iterations = int(getattr(sdp.solver_stats, "num_iters", 0) or 0)
    if pi.value is None or drive.value is None:
        raise EstimationError(f"the feasible estimate has no solution (solver status {status})")
    links = np.asarray(pi.value, dtype=np.float64)
    theta = np.concatenate([base.to_base(links), np.asarray(drive.value, dtype=np.float64)])
    rss = float(np.sum((aw @ theta - yw) ** 2))
    groups = int(problem.groups.max()) + 1
    res, res0 = problem.a @ theta - problem.y, problem.a @ sol.theta - problem.y
    rms = np.array([np.sqrt(np.mean(res[problem.groups == g] ** 2)) for g in range(groups)])
    rms0 = np.array([np.sqrt(np.mean(res0[problem.groups == g] ** 2)) for g in range(groups)])
    # negative beyond its noise (2 sd): a share of -2e-5 +- 1e-4 is a 0, not a violation
    violations = tuple(
        f"{nm} = {val:.4g} < 0 in the unconstrained estimate (sd {sd:.2g})"
        for nm, val, sd, bnd in zip(drive_names, sol.theta[b:], sol.std[b:], bounded, strict=True)
        if bnd and val < -2.0 * sd
    )
    cost = 100.0 * (rss - rss0) / rss0 if rss0 > 0 else 0.0
    if status != cp.OPTIMAL:
        violations += (
            f"the feasible fit ended {status} after {iterations} iterations: its cost of "
            f"{cost:.3g} % is an upper bound, not a verdict on consistency",
        )
    elif cost > 1.0:
        violations += (
            f"the link parameters are not physically consistent: the nearest consistent model "
            f"fits {cost:.3g} % worse (weighted residual sum of squares)",
        )
    return FeasibleEstimate(
        names=tuple(names),
        estimate=theta,
        links_standard=links.reshape(n, 10),
        cost_pct=cost,
        rms_nm=rms,
        rms_unconstrained_nm=rms0,
        violations=violations,
        evaluations=iterations,
        message=f"solver Clarabel: {status}",
    )
