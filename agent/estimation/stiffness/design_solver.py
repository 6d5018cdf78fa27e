"""The optimisation under every stiffness design: criteria, the design it returns, and a
multi-start SLSQP on batched evaluations (Prod. Eng. 2023, eqs. 16-18).

A design method (agent.estimation.stiffness.design for the paper's TCP force and laser,
agent.estimation.stiffness.design_dual for the dual encoder) states its Problem: bounds, one
batched evaluation of the new experiments' information and of the constraints, and the prior;
solve() finds the best feasible point from several starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from agent.errors import EstimationError
from agent.estimation.identification.least_squares import single_thread_blas
from agent.estimation.stiffness.inference import StiffnessMethod, StiffnessPrior
from agent.estimation.stiffness.posterior import unidentified_joints
from agent.models.robot.compliance import InfeasibleRequestError

Array = npt.NDArray[np.float64]
Criterion = Literal["A", "D", "E"]
CRITERIA: tuple[Criterion, ...] = ("A", "D", "E")
FD_STEP = 1e-6  # rad, and force / force scale


def criterion_value(cov: Array, criterion: Criterion) -> float:
    """Psi_A, Psi_D or Psi_E of eq. 16."""
    if criterion == "A":
        return float(np.trace(cov))
    if criterion == "D":
        return float(np.linalg.det(cov))
    if criterion == "E":
        return float(np.linalg.eigvalsh(cov)[-1])
    raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")


@dataclass(frozen=True)
class StiffnessDesign:
    """The designed experiments and the posterior they are expected to give."""

    method: StiffnessMethod
    criterion: Criterion
    joint_names: tuple[str, ...]
    q_rad: Array  # (K, n)
    force_n: Array | None  # (K, 3); None for the dual encoder
    tcp_m: Array  # (K, 3)
    covariance: Array  # expected posterior covariance of k (eq. 17)
    criterion_value: float
    prior_criterion_value: float
    starts: int
    feasible_starts: int
    seconds: float
    given: int = 0
    warnings: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def std_nm_rad(self) -> Array:
        return np.sqrt(np.diag(self.covariance))

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "criterion": self.criterion,
            "joint_names": list(self.joint_names),
            "q_rad": self.q_rad.tolist(),
            "force_n": None if self.force_n is None else self.force_n.tolist(),
            "tcp_m": self.tcp_m.tolist(),
            "covariance": self.covariance.tolist(),
            "std_nm_rad": self.std_nm_rad.tolist(),
            "trace": float(np.trace(self.covariance)),
            "criterion_value": self.criterion_value,
            "prior_criterion_value": self.prior_criterion_value,
            "starts": self.starts,
            "feasible_starts": self.feasible_starts,
            "seconds": self.seconds,
            "given": self.given,
            "warnings": list(self.warnings),
            **self.extra,
        }


# -- the generic multi-start SLSQP on batched evaluations ---------------------------------------


@dataclass
class Problem:
    """dim variables; evaluate(X (B, dim)) -> (whitened information (B, p, p) of the new
    experiments, inequalities >= 0 (B, m_i), equalities = 0 (B, m_e))."""

    lower: Array
    upper: Array
    evaluate: Callable[[Array], tuple[Array, Array, Array]]
    scale: Array  # (p,) prior sd of each parameter: whitened -> physical
    base_info: Array  # (p, p) whitened information of the prior plus the given experiments
    n_k: int
    criterion: Criterion

    def covariance(self, info_w: Array) -> Array:
        """Physical covariance of the k block, (B, n_k, n_k)."""
        c_w = np.linalg.inv(info_w + self.base_info)[:, : self.n_k, : self.n_k]
        s = self.scale[: self.n_k]
        return np.asarray(c_w * s[:, None] * s[None, :])

    def log_criterion(self, cov: Array) -> Array:
        if self.criterion == "A":
            return np.asarray(np.log(np.trace(cov, axis1=1, axis2=2)))
        if self.criterion == "D":
            return np.asarray(np.linalg.slogdet(cov)[1])
        return np.asarray(np.log(np.linalg.eigvalsh(cov)[:, -1]))


class _Evaluator:
    """Objective, constraints and their forward-difference Jacobians from one batched call,
    cached for the last x (SLSQP asks for them one after another)."""

    def __init__(
        self, problem: Problem, free: npt.NDArray[np.bool_], template: Array, ref: float
    ) -> None:
        self.p, self.free, self.template, self.ref = problem, free, template, ref
        self.x: Array | None = None

    def full(self, xf: Array) -> Array:
        x = self.template.copy()
        x[self.free] = xf
        return x

    def _run(self, xf: Array) -> None:
        if self.x is not None and np.array_equal(xf, self.x):
            return
        n = xf.size
        batch = np.repeat(xf[None, :], n + 1, axis=0)
        batch[1:] += FD_STEP * np.eye(n)
        full = np.repeat(self.template[None, :], n + 1, axis=0)
        full[:, self.free] = batch
        info, ineq, eq = self.p.evaluate(full)
        obj = self.p.log_criterion(self.p.covariance(info)) - self.ref
        self.x = xf.copy()
        self.f, self.g = float(obj[0]), (obj[1:] - obj[0]) / FD_STEP
        self.ci, self.ci_j = ineq[0], ((ineq[1:] - ineq[0]) / FD_STEP).T
        self.ce, self.ce_j = eq[0], ((eq[1:] - eq[0]) / FD_STEP).T

    def fun(self, xf: Array) -> float:
        self._run(xf)
        return self.f

    def jac(self, xf: Array) -> Array:
        self._run(xf)
        return np.asarray(self.g)

    def constraints(self) -> list[dict[str, Any]]:
        _, ineq, eq = self.p.evaluate(self.template[None, :])
        out: list[dict[str, Any]] = []
        for kind, size, value, jac in (("ineq", ineq, "ci", "ci_j"), ("eq", eq, "ce", "ce_j")):
            if size.shape[1]:
                out.append({"type": kind, "fun": self._getter(value), "jac": self._getter(jac)})
        return out

    def _getter(self, name: str) -> Callable[[Array], Array]:
        def get(xf: Array) -> Array:
            self._run(xf)
            return np.asarray(getattr(self, name))

        return get


@dataclass(frozen=True)
class _Solution:
    x: Array
    log_value: float
    violation: float
    worst: int  # index of the worst constraint (inequalities first), -1 if none
    feasible_starts: int


def _violation(problem: Problem, x: Array) -> tuple[float, int]:
    _, ineq, eq = problem.evaluate(x[None, :])
    v = np.concatenate([np.maximum(-ineq[0], 0.0), np.abs(eq[0])])
    if v.size == 0:
        return 0.0, -1
    return float(v.max()), int(np.argmax(v))


def solve(problem: Problem, starts: list[Array], max_iter: int, tolerance: float) -> _Solution:
    # SLSQP's small dense solves go through BLAS; a threaded BLAS on a busy 2-core machine
    # stalls each of them for milliseconds (a 5-measurement design: 9 s instead of 0.7 s).
    with single_thread_blas():
        return _solve_starts(problem, starts, max_iter, tolerance)


def _solve_starts(
    problem: Problem, starts: list[Array], max_iter: int, tolerance: float
) -> _Solution:
    free = problem.upper > problem.lower
    template = np.where(free, 0.0, problem.lower)
    no_data = np.zeros((1, *problem.base_info.shape))
    ref = float(problem.log_criterion(problem.covariance(no_data))[0])
    bounds = list(zip(problem.lower[free], problem.upper[free], strict=True))
    best: tuple[float, Array] | None = None
    closest: tuple[float, Array] | None = None
    feasible = 0
    for x0 in starts:
        ev = _Evaluator(problem, free, template, ref)
        xf = np.clip(x0[free], problem.lower[free], problem.upper[free])
        cons = ev.constraints()
        res = minimize(
            ev.fun,
            xf,
            jac=ev.jac,
            method="SLSQP",
            bounds=bounds,
            constraints=cons,
            options={"maxiter": max_iter, "ftol": 1e-9},
        )
        x = ev.full(np.clip(res.x, problem.lower[free], problem.upper[free]))
        viol, _ = _violation(problem, x)
        value = ev.fun(x[free])
        if viol <= tolerance:
            feasible += 1
            if best is None or value < best[0]:
                best = (value, x)
        elif closest is None or viol < closest[0]:
            closest = (viol, x)
    if best is not None:
        return _Solution(best[1], best[0], 0.0, -1, feasible)
    if closest is None:
        raise EstimationError("the design has no starting point to optimise from")
    viol, worst = _violation(problem, closest[1])
    return _Solution(closest[1], math.inf, viol, worst, 0)


def check_identified(problem: Problem, info_w: Array, names: tuple[str, ...], why: str) -> None:
    """Raise naming the joints whose stiffness the design leaves at its prior."""
    cov = problem.covariance(info_w[None, :, :])[0]
    bad = unidentified_joints(cov, np.diag(problem.scale[: problem.n_k] ** -2.0), names)
    if bad:
        joints = ", ".join(bad)
        raise InfeasibleRequestError(
            f"joint {joints}" if len(bad) == 1 else f"joints {joints}",
            f"no feasible measurement loads {'it' if len(bad) == 1 else 'them'} ({why}); "
            "the design would leave the stiffness at its prior",
        )


def whiten_prior(prior: StiffnessPrior) -> tuple[Array, Array]:
    scale = prior.std_nm_rad / math.sqrt(prior.gamma)
    return scale, np.eye(scale.size)
