"""The backlash signature h(t) of Giovannitti et al. 2022, eqs. 1-7, in the paper's form and in the
fit's form.

Paper form: d_b(s) = A exp(-(s - T1) tau) sin(omega s) for T1 <= s <= T2 (s = t - t0), f(t) =
d_b(t - t0) - d_b(t - t0 - Td), and h = sum of n replicas of f shifted by Tf.

Fit form: t0 and T1 enter only through the start time ts = t0 + T1 and the phase omega*T1, so
the oscillation is written a*e*sin + b*e*cos with u = t - ts; a and b (hence A and the phase)
are then linear and solved in closed form, and the sign ambiguity of A disappears. The mapping
back to (A, t0, T1) is exact: A = hypot(a, b), T1 = phase / omega (mod one oscillation period).
Replicas are taken periodic in Tf over the whole capture, so an oscillation that began before
the first sample is modelled too (eq. 7 with t0 allowed before the capture starts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SignatureParams:
    """Paper parameters of eq. 7 (times in s, rates in 1/s and rad/s)."""

    A: float
    t0: float
    tau: float
    omega: float
    T1: float
    T2: float
    Td: float
    Tf: float
    n: int

    def to_dict(self) -> dict[str, float]:
        return {
            "A_rad_s": self.A,
            "t0_s": self.t0,
            "tau_per_s": self.tau,
            "omega_rad_s": self.omega,
            "T1_s": self.T1,
            "T2_s": self.T2,
            "Td_s": self.Td,
            "Tf_s": self.Tf,
            "n": float(self.n),
        }


def paper_signature(t: Array, p: SignatureParams) -> Array:
    """h(t) exactly as eqs. 5-7 write it (n replicas from t0), for tests and synthetic data."""
    t = np.asarray(t, dtype=np.float64)
    h = np.zeros_like(t)
    for i in range(p.n):
        base = p.t0 + i * p.Tf
        for shift, sign in ((0.0, 1.0), (p.Td, -1.0)):
            s = t - (base + shift)
            win = (s >= p.T1) & (s <= p.T2)
            h[win] += sign * p.A * np.exp(-(s[win] - p.T1) * p.tau) * np.sin(p.omega * s[win])
    return h


def signature_basis(
    t: Array, ts: Array, tau: Array, omega: Array, duration: Array, td: Array, tf: Array
) -> tuple[Array, Array]:
    """Sine and cosine columns of the periodic signature for a population of candidates.

    Every argument but t has shape (m,); the result is two (m, len(t)) arrays. Row k is
    sum over replicas of e^{-tau u} [sin, cos](omega u) on 0 <= u <= duration, minus the same
    at u - Td: the closed-form amplitude solve then needs only these two columns.
    """
    tt = t[None, :]
    col = (slice(None), None)
    tfc = tf[col]
    inv_tf = 1.0 / tfc
    neg_tau = (-tau[col]).astype(np.float32)
    om = omega[col].astype(np.float32)
    s_sum = np.zeros((ts.size, t.size))
    c_sum = np.zeros((ts.size, t.size))
    for shift, sign in ((0.0, 1.0), (1.0, -1.0)):
        x = tt - ts[col] - shift * td[col]
        u64 = x - np.floor(x * inv_tf) * tfc  # mod Tf, in float64 (t can be long)
        inside = u64 <= duration[col]
        # The oscillation itself in float32: SIMD exp/sin/cos are ~10x faster than float64,
        # and 1e-7 relative error is far below what the fit resolves.
        u = u64.astype(np.float32)
        env = np.exp(neg_tau * u)
        env[~inside] = 0.0
        ph = om * u
        if sign > 0:
            s_sum += env * np.sin(ph)
            c_sum += env * np.cos(ph)
        else:
            s_sum -= env * np.sin(ph)
            c_sum -= env * np.cos(ph)
    return s_sum, c_sum


def peak_amplitude(a_sin: float, b_cos: float, tau: float, omega: float, duration: float) -> float:
    """Largest |d_b| of one fitted oscillation: the amplitude the calibration is made against.

    Eq. 1's factor A is the envelope at the window start T1; where the oscillation starts near a
    zero of the sine, T1 can slide along the decaying envelope at almost no cost in RMSE while A
    changes as e^{tau dT1}. The peak of the fitted curve is pinned by the data (Giovannitti et al.
    2022 build fig. 12 from the maximum amplitude of the signals in the same way).
    """
    period = 2.0 * math.pi / omega
    u = np.linspace(0.0, min(duration, 1.5 * period + 3.0 / max(tau, 1e-9)), 4001)
    curve = np.exp(-tau * u) * (a_sin * np.sin(omega * u) + b_cos * np.cos(omega * u))
    return float(np.max(np.abs(curve)))


def to_paper_params(
    a_sin: float,
    b_cos: float,
    ts: float,
    tau: float,
    omega: float,
    duration: float,
    td: float,
    tf: float,
    t_first: float,
    t_last: float,
) -> SignatureParams:
    """Map the fit form back onto eq. 7's parameters (exact, see module docstring)."""
    amplitude = math.hypot(a_sin, b_cos)
    phase = math.atan2(b_cos, a_sin)  # a sin(wu) + b cos(wu) = A sin(wu + phase)
    period = 2.0 * math.pi / omega
    t1 = (phase / omega) % period
    # First oscillation of the periodic model that can touch the capture.
    start = t_first + ((ts - t_first) % tf) - tf
    t0 = start - t1
    n = math.ceil((t_last - start) / tf) + 1
    return SignatureParams(
        A=amplitude, t0=t0, tau=tau, omega=omega, T1=t1, T2=t1 + duration, Td=td, Tf=tf, n=n
    )
