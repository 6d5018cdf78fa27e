"""Exact propagation of the two linear modes of agent.models.axis.pid's backlash axis.

For each mode (engaged, gap) under the P, PI or PID law: the continuous state space, and its
step over dt with the command taken as the cubic Hermite through its position and velocity at
both ends (closed form in the eigenbasis, or one matrix exponential of the augmented chain when
the mode matrix is defective); uniform_steps() runs many steps at once, one first-order
recursion per eigenvalue. The switching between the modes is agent.models.axis.pid's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy.linalg import expm
from scipy.signal import lfilter

from agent.models.axis.params import AxisParams

Array = npt.NDArray[np.float64]


class AxisMode(StrEnum):
    """The two modes of the hybrid axis: gear engaged, or the motor alone turning in the gap."""

    ENGAGED = "engaged"
    GAP = "gap"


@dataclass(frozen=True, eq=False)
class Mode:
    step: float
    phi: Array
    hold: Array  # (n, 4): response to the Hermite input terms U0..U3 over one step
    eig: Array | None  # modal data when the step matrix is diagonalisable and well conditioned
    vec: Array | None
    vec_inv: Array | None


def continuous_matrices(params: AxisParams, kind: AxisMode) -> tuple[Array, Array]:
    """Continuous A, B; inputs u = (X, X') engaged, (X - x_i, X') in the gap."""
    b, c, td = params.b_s2, params.c_s, params.derivative_time_s
    cc, beta = params.motor_gain_rad_m_s2, params.beta_1_s
    ti = params.integral_time_s
    if kind == AxisMode.ENGAGED:
        if ti is None:  # state x, v
            return (
                np.array([[0.0, 1.0], [-1.0 / b, -(c + td) / b]]),
                np.array([[0.0, 0.0], [1.0 / b, td / b]]),
            )
        return (
            np.array(
                [[0.0, 1.0, 0.0], [-1.0 / b, -(c + td) / b, 1.0 / (ti * b)], [-1.0, 0.0, 0.0]]
            ),  # state x, v, z
            np.array([[0.0, 0.0], [1.0 / b, td / b], [1.0, 0.0]]),
        )
    if ti is None:  # state w, g
        return (np.array([[-beta, 0.0], [1.0, 0.0]]), np.array([[cc, cc * td], [0.0, 0.0]]))
    return (
        np.array([[0.0, 0.0, 0.0], [cc / ti, -beta, 0.0], [0.0, 1.0, 0.0]]),  # z, w, g
        np.array([[1.0, 0.0], [cc, cc * td], [0.0, 0.0]]),
    )


def _phis(z: npt.NDArray[np.complex128]) -> list[npt.NDArray[np.complex128]]:
    """phi_0..phi_4, phi_k(z) = sum_m z^m / (m + k)!  (phi_0 = e^z, phi_1 = (e^z - 1) / z, ...).

    Series below |z| = 1 (30 terms), the recurrence phi_{k+1} = (phi_k - 1/k!) / z above it,
    where it no longer cancels badly.
    """
    small = np.abs(z) < 1.0
    zs = np.where(small, 2.0, z)
    out = [np.exp(z)]
    rec = np.exp(zs)
    for k in range(4):
        rec = (rec - 1.0 / math.factorial(k)) / zs
        ser = sum(z**m / math.factorial(m + k + 1) for m in range(30))
        out.append(np.where(small, ser, rec))
    return out


def _hold_expm(a: Array, b: Array, dt: float) -> tuple[Array, Array]:
    """phi and the hold matrix from one matrix exponential of the chain U0' = U1, ..., U3' = 0."""
    n = a.shape[0]
    big = np.zeros((n + 4, n + 4))
    big[:n, :n] = a
    big[:n, n] = b[:, 0]
    big[:n, n + 1] = b[:, 1]
    for j in range(3):
        big[n + j, n + j + 1] = 1.0
    e = expm(big * dt)
    return e[:n, :n], e[:n, n:]


@lru_cache(maxsize=64)
def _eigen(params: AxisParams, kind: AxisMode) -> tuple[Array, Array, Array, Array] | None:
    """Eigen-decomposition of the continuous A (None when defective or ill-conditioned)."""
    a, b = continuous_matrices(params, kind)
    mu, vec = np.linalg.eig(a)
    if not np.all(np.isfinite(vec)) or np.linalg.cond(vec) > 1e8:
        return None
    vinv = np.linalg.inv(vec)
    return mu, vec, vinv, vinv @ b


def step_matrices(params: AxisParams, kind: AxisMode, dt: float) -> tuple[Array, Array]:
    """x(t + dt) = phi x(t) + hold @ (U0, U1, U2, U3) for the cubic input of `hermite_terms`.

    With X(t + s) = sum_j U_j s^j / j! feeding B = (b_X, b_V) as (X, X'), the term U_j enters as
    dt^(j+1) phi_{j+1}(A dt) b_X + dt^j phi_j(A dt) b_V (the second for j >= 1). Closed form in
    the eigenbasis (a matrix exponential costs ~ms on this machine, this ~30 us); one expm of
    the augmented chain when A is defective (the PI gap mode).
    """
    eig = _eigen(params, kind)
    if eig is None:
        a, b = continuous_matrices(params, kind)
        return _hold_expm(a, b, dt)
    mu, vec, vinv, vinv_b = eig
    ph = _phis((mu * dt).astype(complex))
    cols = []
    for j in range(4):
        term = (vec * (dt ** (j + 1) * ph[j + 1])) @ vinv_b[:, 0]
        if j >= 1:
            term = term + (vec * (dt**j * ph[j])) @ vinv_b[:, 1]
        cols.append(term)
    phi = (vec * ph[0]) @ vinv
    return phi.real, np.stack(cols, axis=1).real


def hermite_terms(u: Array, dt: float) -> Array:
    """Per step, the cubic through (X, X') at both ends as (U0..U3), U_j its j-th derivative at
    the step start. Exact for cubic commands; error ~ dt^4 X'''' / 384 otherwise."""
    x0, x1, v0, v1 = u[:-1, 0], u[1:, 0], u[:-1, 1], u[1:, 1]
    a2 = (3.0 * (x1 - x0) / dt - 2.0 * v0 - v1) / dt
    a3 = (2.0 * (x0 - x1) / dt + v0 + v1) / (dt * dt)
    return np.stack([x0, v0, 2.0 * a2, 6.0 * a3], axis=1)


@lru_cache(maxsize=64)
def mode(params: AxisParams, kind: AxisMode, step: float) -> Mode:
    phi, hold = step_matrices(params, kind, step)
    eig, vec = np.linalg.eig(phi)
    ok = np.all(np.isfinite(vec)) and np.linalg.cond(vec) < 1e8
    return Mode(
        step,
        phi,
        hold,
        eig if ok else None,
        vec if ok else None,
        np.linalg.inv(vec) if ok else None,
    )


def uniform_steps(mode: Mode, s0: Array, u: Array) -> Array:
    """States at K uniform steps (rows 1..K) from s0 with inputs u (K+1 rows); row 0 is s0."""
    k = u.shape[0] - 1
    out = np.empty((k + 1, s0.size))
    out[0] = s0
    if k == 0:
        return out
    drive = hermite_terms(u, mode.step) @ mode.hold.T
    if mode.eig is not None and mode.vec is not None and mode.vec_inv is not None:
        q0 = mode.vec_inv @ s0
        r = drive.astype(complex) @ mode.vec_inv.T
        qs = np.empty((k, s0.size), dtype=complex)
        for j, lam in enumerate(mode.eig):
            qs[:, j] = lfilter([1.0], [1.0, -lam], r[:, j], zi=[lam * q0[j]])[0]
        out[1:] = (qs @ mode.vec.T).real
        return out
    phi = mode.phi
    s = s0.copy()
    for i in range(k):
        s = phi @ s + drive[i]
        out[i + 1] = s
    return out
