"""Bernstein polynomials on [0, 1]: evaluation, derivative and integral in the Bernstein basis
(the algebra under the feedrate profiles of agent.feedrate.profile, Farouki & Swett 2022,
eqs. 24-28).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
ArrayLike = float | Array | list[float]


@lru_cache(maxsize=64)
def _binomials(n: int) -> Array:
    return np.array([math.comb(n, k) for k in range(n + 1)], dtype=float)


def bernstein_eval(coefficients: npt.ArrayLike, tau: ArrayLike) -> Array:
    """sum c_k B_k^n(tau), vectorised over tau.

    Horner in r = tau / (1 - tau) <= 1 times (1 - tau)^n for tau <= 1/2, and the mirrored form
    in (1 - tau) / tau above: n + 2 array operations instead of de Casteljau's n^2 / 2, with
    the same stability on [0, 1] (no power of a ratio above 1 is ever formed).
    """
    c = np.asarray(coefficients, dtype=float)
    t = np.asarray(tau, dtype=float)
    if c.size == 0:
        return np.zeros_like(t)
    n = c.size - 1
    w = c * _binomials(n)
    out = np.empty(t.shape)
    lo = t <= 0.5
    for mask, weights, near, far in ((lo, w, t, 1.0 - t), (~lo, w[::-1], 1.0 - t, t)):
        if not mask.any():
            continue
        r = near[mask] / far[mask]
        acc = np.full(r.shape, weights[n])
        for k in range(n - 1, -1, -1):
            acc = acc * r + weights[k]
        out[mask] = acc * far[mask] ** n
    return out


def bernstein_derivative(coefficients: npt.ArrayLike, order: int = 1) -> Array:
    """Bernstein coefficients of d^order/dtau^order (degree n - order): n Delta c_k, repeated."""
    c = np.asarray(coefficients, dtype=float)
    for _ in range(order):
        n = c.size - 1
        if n <= 0:
            return np.zeros(1)
        c = n * np.diff(c)
    return c


def bernstein_integral(coefficients: npt.ArrayLike) -> Array:
    """Coefficients of S(tau) = int_0^tau, degree n+1: S_0 = 0, S_k = sum_{j<k} c_j / (n+1)."""
    c = np.asarray(coefficients, dtype=float)
    return np.concatenate([[0.0], np.cumsum(c) / c.size])
