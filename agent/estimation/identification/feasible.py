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

Each J is written as L L^T with L lower triangular and an exponential on its diagonal (a
log-Cholesky parametrisation, Rucker and Wensing 2022), so every point the solver visits is
consistent; the weighted problem is then solved by scipy.optimize.least_squares (trust-region
reflective, the drive bounds as bounds), with the unconstrained fit's own rows and WLS weights,
started from the unconstrained estimate pushed onto the consistent set. Directions the data
cannot see (standard parameters outside the base) are held near the robot file's links by a
small pull. The problem is convex in pi but not in L: the solver is local, and when it stops
before converging the report says its cost is an upper bound only (seen on the UR5e with
unmodelled friction: ~8 % after 400 evaluations, still falling slowly).

What it reports is the cost: the weighted residual sum of squares above the unconstrained
optimum. Near 0 the unconstrained estimate was (close to) physically consistent; above 1 % it
was not, and `violations` says so and names what it broke that can be read off directly (a
negative drive parameter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.optimize

from agent.estimation.identification.base_params import BaseParameters
from agent.estimation.identification.equations import LsqProblem
from agent.estimation.identification.least_squares import LsqSolution
from agent.estimation.identification.model import Array
from agent.models.robot.description import RobotDescription

# Drive parameters that are >= 0 in every real drive (offsets "off" and springs "ks" are signed).
NON_NEGATIVE = ("Ia", "fc", "fv", "k", "mu")
MAX_ITERATIONS = 400  # residual evaluations of the trust-region solver
PRIOR_PULL = 1e-6  # of the residual's size per unit of x: holds the directions data cannot see
_TRIL = np.tril_indices(4, -1)


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
    evaluations: int
    message: str

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


def standard_from_pseudo(j: Array) -> Array:
    """The inverse of pseudo_inertia."""
    sigma = j[:3, :3]
    inertia = np.trace(sigma) * np.eye(3) - sigma
    return np.array(
        [j[3, 3], *j[:3, 3], inertia[0, 0], inertia[0, 1], inertia[1, 1], inertia[0, 2],
         inertia[1, 2], inertia[2, 2]]
    )  # fmt: skip


def cholesky_numbers(j: Array) -> Array:
    """10 log-Cholesky numbers of a pseudo-inertia (made positive definite by an eigenvalue
    floor first): log of L's diagonal, then L below its diagonal row by row; J = L L^T."""
    w, v = np.linalg.eigh(0.5 * (j + j.T))
    floor = 1e-9 * max(float(w.max()), 1e-12)
    low = np.linalg.cholesky((v * np.maximum(w, floor)) @ v.T)
    return np.concatenate([np.log(np.diag(low)), low[_TRIL]])


def standard_from_numbers(x: Array) -> Array:
    """The inverse of cholesky_numbers, to standard parameters: consistent for every x."""
    low = np.zeros((4, 4))
    low[np.diag_indices(4)] = np.exp(x[:4])
    low[_TRIL] = x[4:]
    return standard_from_pseudo(low @ low.T)


def feasible_estimate(
    problem: LsqProblem,
    sol: LsqSolution,
    names: list[str],
    base: BaseParameters,
    robot: RobotDescription,
) -> FeasibleEstimate:
    """The consistent estimate of the problem the unconstrained `sol` solved (module doc)."""
    n, b = robot.n_joints, base.count
    drive_names = names[b:]
    weights = sol.weights[problem.groups]
    aw = problem.a * weights[:, None]
    yw = problem.y * weights
    n_pi = 10 * n
    bounded = np.array([nm.rstrip("0123456789") in NON_NEGATIVE for nm in drive_names])
    # Start where the data already is: the unconstrained base parameters as standard ones
    # (the robot file's values in the directions the data cannot see), each link's J pushed
    # onto the positive definite cone.
    pi_file = robot.standard_parameters().ravel()
    pi_start = pi_file + base.to_standard(sol.theta[:b] - base.to_base(pi_file))
    x_links0 = np.concatenate(
        [cholesky_numbers(pseudo_inertia(pi_start[10 * i : 10 * i + 10])) for i in range(n)]
    )
    drive0 = np.where(bounded, np.maximum(sol.theta[b:], 1e-12), sol.theta[b:])
    x0 = np.concatenate([x_links0, drive0])
    aw_base = aw[:, :b] @ base.matrix  # weighted rows of the links' standard parameters
    aw_drive = aw[:, b:]
    rss0 = float(np.sum((aw @ sol.theta - yw) ** 2))
    # the pull on the unseen directions: a millionth of the residual per unit of x
    reg = PRIOR_PULL * np.sqrt(max(rss0, 1e-300))

    def links_of(x: Array) -> Array:
        return np.concatenate([standard_from_numbers(x[10 * i : 10 * i + 10]) for i in range(n)])

    def residual(x: Array) -> Array:
        data = aw_base @ links_of(x) + aw_drive @ x[n_pi:] - yw
        return np.concatenate([data, reg * (x[:n_pi] - x_links0)])

    jac_reg = np.hstack([reg * np.eye(n_pi), np.zeros((n_pi, x0.size - n_pi))])

    def jacobian(x: Array) -> Array:
        # Each link's 10 -> 10 map differentiated by central differences (a 4x4 product:
        # exact to ~1e-10 and cheap), then the chain rule.
        d_links = np.zeros((n_pi, n_pi))
        for i in range(n):
            xi = x[10 * i : 10 * i + 10]
            for col in range(10):
                step = np.zeros(10)
                step[col] = 1e-6 * max(1.0, abs(xi[col]))
                diff = standard_from_numbers(xi + step) - standard_from_numbers(xi - step)
                d_links[10 * i : 10 * i + 10, 10 * i + col] = diff / (2.0 * step[col])
        return np.vstack([np.hstack([aw_base @ d_links, aw_drive]), jac_reg])

    lower = np.concatenate([np.full(n_pi, -np.inf), np.where(bounded, 0.0, -np.inf)])
    fit = scipy.optimize.least_squares(
        residual,
        x0,
        jac=jacobian,
        bounds=(lower, np.full(x0.size, np.inf)),
        method="trf",
        x_scale="jac",
        max_nfev=MAX_ITERATIONS,
        ftol=1e-10,
        xtol=1e-10,
    )
    converged, it = bool(fit.success), int(fit.nfev)
    links = links_of(fit.x)
    drive = fit.x[n_pi:]
    theta = np.concatenate([base.to_base(links), drive])
    rss = float(np.sum((aw @ theta - yw) ** 2))
    groups = int(problem.groups.max()) + 1
    res, res0 = problem.a @ theta - problem.y, problem.a @ sol.theta - problem.y
    rms = np.array([np.sqrt(np.mean(res[problem.groups == g] ** 2)) for g in range(groups)])
    rms0 = np.array([np.sqrt(np.mean(res0[problem.groups == g] ** 2)) for g in range(groups)])
    violations = tuple(
        f"{nm} = {val:.4g} < 0 in the unconstrained estimate"
        for nm, val, bnd in zip(drive_names, sol.theta[b:], bounded, strict=True)
        if bnd and val < 0.0
    )
    cost = 100.0 * (rss - rss0) / rss0 if rss0 > 0 else 0.0
    if not converged:
        violations += (
            f"the feasible fit did not converge in {it} iterations: its cost of {cost:.3g} % "
            "is an upper bound, not a verdict on consistency",
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
        evaluations=it,
        message="converged" if converged else f"stopped after {it} iterations",
    )
