"""Excitation trajectories: finite Fourier series whose regressor condition number is minimised
under joint position, speed and acceleration limits (Madsen et al. 2020, section 4.4 and its
outlook; Swevers et al.'s periodic excitation), solved with scipy's SLSQP.

Joint j follows (Swevers' form, fundamental w = 2 pi / period, harmonics l = 1..L)

    q_j(t) = q0_j + sum_l a_jl / (w l) sin(w l t) - b_jl / (w l) cos(w l t)

so q'_j = sum_l a_jl cos(w l t) + b_jl sin(w l t). The trajectory starts and ends every period
at rest: sum_l a_jl = 0 (speed) and sum_l l b_jl = 0 (acceleration); a_j1 and b_j1 are solved
from those, so the free variables are q0_j and the higher harmonics. Positions, speeds and
accelerations are linear in them: every limit is a linear inequality at the sample points.

The objective is log10 cond(W) of the base regressor (rigid-body base parameters plus Coulomb
and viscous friction) stacked over one period, columns in SI units as the identification sees
them. Its gradient comes from one batched regressor call over all forward-difference
perturbations at once. Torque limits are not constrained here (Madsen et al. 2020 list them among
the possible constraints); the identification refuses a capture whose drive saturated.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from agent.errors import EstimationError
from agent.estimation.identification.base_params import BaseParameters, base_parameters
from agent.estimation.identification.least_squares import single_thread_blas
from agent.models.robot.description import RobotDescription
from agent.models.robot.regressor import chain_geometry, regressor

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class FourierTrajectory:
    """q0 (n,), a and b (n, L): see the module docstring."""

    period_s: float
    q0_rad: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[tuple[float, ...], ...]

    @property
    def n_joints(self) -> int:
        return len(self.q0_rad)

    @property
    def harmonics(self) -> int:
        return len(self.a[0])

    @property
    def bandwidth_hz(self) -> float:
        """Highest harmonic: the frequency of the robot dynamics this trajectory excites."""
        return self.harmonics / self.period_s

    def start_rad(self) -> tuple[float, ...]:
        """q(0) per joint: where the robot stands before and after every period."""
        w = 2.0 * math.pi / self.period_s
        wl = w * np.arange(1, self.harmonics + 1)
        q = np.asarray(self.q0_rad) - np.asarray(self.b) @ (1.0 / wl)
        return tuple(float(v) for v in q)

    def evaluate(self, time_s: npt.ArrayLike) -> tuple[Array, Array, Array]:
        """q, q', q'' at the given times, (N, n) each."""
        t = np.atleast_1d(np.asarray(time_s, dtype=np.float64))
        w = 2.0 * math.pi / self.period_s
        wl = w * np.arange(1, self.harmonics + 1)
        s, c = np.sin(np.outer(t, wl)), np.cos(np.outer(t, wl))
        a, b = np.asarray(self.a), np.asarray(self.b)
        q = np.asarray(self.q0_rad) + s @ (a / wl).T - c @ (b / wl).T
        return q, c @ a.T + s @ b.T, (c * wl) @ b.T - (s * wl) @ a.T

    def sample(
        self, sample_rate_hz: float, periods: int = 1, hold_s: float = 0.5
    ) -> tuple[Array, Array, Array, Array]:
        """(t, q, q', q''): hold_s at rest, `periods` periods, hold_s at rest again."""
        n_move = round(periods * self.period_s * sample_rate_hz)
        n_hold = round(hold_s * sample_rate_hz)
        t = np.arange(2 * n_hold + n_move + 1) / sample_rate_hz
        tau = np.clip(t - n_hold / sample_rate_hz, 0.0, n_move / sample_rate_hz)
        q, qd, qdd = self.evaluate(tau)
        moving = (t >= n_hold / sample_rate_hz) & (t <= (n_hold + n_move) / sample_rate_hz)
        return t, q, qd * moving[:, None], qdd * moving[:, None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "period_s": self.period_s,
            "q0_rad": list(self.q0_rad),
            "a": [list(r) for r in self.a],
            "b": [list(r) for r in self.b],
        }


@dataclass(frozen=True)
class ExcitationSettings:
    """What the optimiser may use. Limits are the robot file's, times the fractions."""

    period_s: float = 10.0
    harmonics: int = 5
    samples_per_period: int = 100  # where limits and the condition number are evaluated
    position_center_rad: tuple[float, ...] | None = None  # None: middle of the joint range
    position_halfrange_rad: float = 1.5  # cap on the excursion around the centre
    speed_fraction: float = 1.0
    accel_fraction: float = 1.0
    margin: float = 0.98  # of every limit, so a sampled trajectory stays inside between samples
    rotor: bool = True  # rotor inertias among the parameters to excite (excitation_base)
    maxiter: int = 60
    seed: int = 0


@dataclass(frozen=True)
class ExcitationResult:
    trajectory: FourierTrajectory
    condition_number: float
    initial_condition_number: float
    iterations: int
    success: bool
    message: str
    seconds: float
    peak_use: dict[str, float]  # largest |value| / limit over position, speed, acceleration

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectory": self.trajectory.to_dict(),
            "condition_number": self.condition_number,
            "initial_condition_number": self.initial_condition_number,
            "iterations": self.iterations,
            "success": self.success,
            "message": self.message,
            "seconds": self.seconds,
            "peak_use": dict(self.peak_use),
        }


@functools.lru_cache(maxsize=16)
def excitation_base(robot: RobotDescription, rotor: bool = True) -> BaseParameters:
    """Base parameters the excitation must make identifiable: rigid body, friction and (by
    default) rotor inertia. Where a gear's twist is too small to see, a rotor inertia and the
    inertia of its link about the same axis part only through the motion of the other joints;
    an excitation blind to that leaves them collinear."""
    return base_parameters(robot, rotor=rotor, friction=True)


def condition_number(
    robot: RobotDescription, q: Array, qd: Array, qdd: Array, rotor: bool = True
) -> float:
    """cond of the base regressor (rigid body, rotor inertia if `rotor`, Coulomb and viscous
    friction) stacked over the samples, columns in SI units: what the excitation minimises.
    (The identification checks the same without rotor columns: Ia is known or has its own
    equation there.)"""
    b = excitation_base(robot, rotor)
    y = regressor(robot, q, qd, qdd, rotor=rotor, friction=True)
    w = b.reduce(y).reshape(-1, b.count)
    with single_thread_blas():
        sv = np.linalg.svd(w, compute_uv=False)
    return float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf


class _Design:
    """Linear maps from the free variables x to q, q', q'' at the sample points."""

    def __init__(self, robot: RobotDescription, s: ExcitationSettings) -> None:
        n, n_h = robot.n_joints, s.harmonics
        if n_h < 2:
            raise EstimationError("the excitation needs at least 2 harmonics")
        self.n, self.n_h = n, n_h
        self.per_joint = 1 + 2 * (n_h - 1)
        self.t = np.arange(s.samples_per_period) * s.period_s / s.samples_per_period
        w = 2.0 * math.pi / s.period_s
        wl = w * np.arange(1, n_h + 1)
        sn, cs = np.sin(np.outer(self.t, wl)), np.cos(np.outer(self.t, wl))
        # coefficient maps (per joint): a = Ta @ x_a, b = Tb @ x_b with the rest constraints
        l_idx = np.arange(1, n_h + 1, dtype=np.float64)
        ta = np.vstack([-np.ones(n_h - 1), np.eye(n_h - 1)])
        tb = np.vstack([-l_idx[1:], np.eye(n_h - 1)])
        # q = q0 + (sn/wl) a - (cs/wl) b ;  q' = cs a + sn b ;  q'' = (cs wl) b - (sn wl) a
        self.pos = np.hstack([np.ones((self.t.size, 1)), (sn / wl) @ ta, -(cs / wl) @ tb])
        self.vel = np.hstack([np.zeros((self.t.size, 1)), cs @ ta, sn @ tb])
        self.acc = np.hstack([np.zeros((self.t.size, 1)), -(sn * wl) @ ta, (cs * wl) @ tb])
        self.ta, self.tb = ta, tb

    def kinematics(self, x: Array) -> tuple[Array, Array, Array]:
        """x (..., n * per_joint) -> q, q', q'' (..., S, n)."""
        xj = x.reshape(*x.shape[:-1], self.n, self.per_joint)
        q, qd, qdd = (np.einsum("sk,...jk->...sj", m, xj) for m in (self.pos, self.vel, self.acc))
        return q, qd, qdd

    def trajectory(self, x: Array, period_s: float) -> FourierTrajectory:
        xj = x.reshape(self.n, self.per_joint)
        a = xj[:, 1 : self.n_h] @ self.ta.T
        b = xj[:, self.n_h :] @ self.tb.T
        return FourierTrajectory(
            period_s,
            tuple(float(v) for v in xj[:, 0]),
            tuple(tuple(float(v) for v in row) for row in a),
            tuple(tuple(float(v) for v in row) for row in b),
        )


def _limits(robot: RobotDescription, s: ExcitationSettings) -> tuple[Array, Array, Array, Array]:
    lim = robot.position_limits_rad()
    center = (
        np.asarray(s.position_center_rad, dtype=np.float64)
        if s.position_center_rad is not None
        else lim.mean(axis=1)
    )
    if center.shape != (robot.n_joints,):
        raise EstimationError(f"position_center_rad needs {robot.n_joints} values")
    half = np.minimum(np.minimum(center - lim[:, 0], lim[:, 1] - center), s.position_halfrange_rad)
    if np.any(half <= 0.0):
        raise EstimationError("the excitation centre lies outside the joint limits")
    speed = np.array([j.speed_max_rad_s for j in robot.joints]) * s.speed_fraction
    accel = np.array([j.accel_max_rad_s2 for j in robot.joints]) * s.accel_fraction
    return center, half * s.margin, speed * s.margin, accel * s.margin


def random_excitation(
    robot: RobotDescription, settings: ExcitationSettings, seed: int | None = None
) -> FourierTrajectory:
    """A feasible random Fourier trajectory (harmonic amplitudes falling as 1/l), scaled to the
    tightest of the limits: the optimiser's start, and validation trajectories."""
    rng = np.random.default_rng(settings.seed if seed is None else seed)
    design = _Design(robot, settings)
    center, half, speed, accel = _limits(robot, settings)
    x = np.zeros((robot.n_joints, design.per_joint))
    decay = 1.0 / np.arange(2, settings.harmonics + 1)
    x[:, 1 : design.n_h] = rng.standard_normal((robot.n_joints, design.n_h - 1)) * decay
    x[:, design.n_h :] = rng.standard_normal((robot.n_joints, design.n_h - 1)) * decay
    q, qd, qdd = design.kinematics(x.ravel())
    scale = np.min(
        np.stack(
            [half / np.abs(q).max(axis=0), speed / np.abs(qd).max(axis=0),
             accel / np.abs(qdd).max(axis=0)]
        ),
        axis=0,
    )  # fmt: skip
    x *= scale[:, None]
    x[:, 0] = center
    return design.trajectory(x.ravel(), settings.period_s)


def design_excitation(
    robot: RobotDescription, settings: ExcitationSettings | None = None
) -> ExcitationResult:
    """Minimise log10 cond of the base regressor over one period under the limits (SLSQP)."""
    s = settings or ExcitationSettings()
    started = time.perf_counter()
    design = _Design(robot, s)
    center, half, speed, accel = _limits(robot, s)
    base = excitation_base(robot, s.rotor)
    geo = chain_geometry(robot)
    n, per = robot.n_joints, design.per_joint
    n_x = n * per

    # linear inequalities g(x) = h - G x >= 0 for |q - c| <= half, |q'| <= speed, |q''| <= accel
    rows, bounds = [], []
    for m, lim, off in ((design.pos, half, center), (design.vel, speed, 0.0 * center),
                        (design.acc, accel, 0.0 * center)):  # fmt: skip
        for j in range(n):
            block = np.zeros((m.shape[0], n_x))
            block[:, j * per : (j + 1) * per] = m
            rows += [block, -block]
            bounds += [np.full(m.shape[0], lim[j] + off[j]), np.full(m.shape[0], lim[j] - off[j])]
    g_mat = np.vstack(rows)
    h_vec = np.concatenate(bounds)

    def conds(xs: Array) -> Array:
        q, qd, qdd = design.kinematics(xs)
        k = xs.shape[0]
        y = regressor(
            robot, q.reshape(-1, n), qd.reshape(-1, n), qdd.reshape(-1, n),
            rotor=s.rotor, friction=True, geometry=geo,
        )  # fmt: skip
        w = base.reduce(y).reshape(k, -1, base.count)
        sv = np.linalg.svd(w, compute_uv=False)
        return np.log10(sv[:, 0] / np.maximum(sv[:, -1], 1e-300))

    step = 1e-6
    cache: dict[bytes, tuple[float, Array]] = {}

    def evaluate(x: Array) -> tuple[float, Array]:
        key = x.tobytes()
        if key not in cache:
            xs = np.vstack([x, x + step * np.eye(n_x)])
            c = conds(xs)
            cache.clear()
            cache[key] = (float(c[0]), (c[1:] - c[0]) / step)
        return cache[key]

    start = random_excitation(robot, s)
    x0 = np.concatenate(
        [np.concatenate([[start.q0_rad[j]], start.a[j][1:], start.b[j][1:]]) for j in range(n)]
    )
    with single_thread_blas():
        c0 = evaluate(x0)[0]
        res = minimize(
            lambda x: evaluate(x)[0],
            x0,
            jac=lambda x: evaluate(x)[1],
            method="SLSQP",
            constraints=[
                {"type": "ineq", "fun": lambda x: h_vec - g_mat @ x, "jac": lambda x: -g_mat}
            ],
            options={"maxiter": s.maxiter, "ftol": 1e-6},
        )
    x_best = res.x if np.all(h_vec - g_mat @ res.x >= -1e-9) else x0
    c_best = evaluate(x_best)[0]
    if c_best > c0:
        x_best, c_best = x0, c0
    q, qd, qdd = design.kinematics(x_best)
    use = {
        "position": float(np.max(np.abs(q - center) / (half / s.margin))),
        "speed": float(np.max(np.abs(qd) / (speed / s.margin))),
        "acceleration": float(np.max(np.abs(qdd) / (accel / s.margin))),
    }
    return ExcitationResult(
        design.trajectory(x_best, s.period_s),
        float(10.0**c_best),
        float(10.0**c0),
        int(res.nit),
        bool(res.success),
        str(res.message),
        time.perf_counter() - started,
        use,
    )
