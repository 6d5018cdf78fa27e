"""Feedrate profiles about a turning point (Farouki & Swett 2022, section 5; the composite of
section 7).

BernsteinFeedrate: V(tau) = sum V_k B_k^n(tau) on t in [-t*, t*], tau = (t + t*) / 2t* (eqs.
24-26), the nominal feed V_c outside. Its arc length is the Bernstein integral S(tau) of eq. 28
(coefficients S_k = sum_{j<k} V_j / (n+1); the paper's basis factor (1-tau)^{n-k} there is a
typo for (1-tau)^{n+1-k}), so s(t) = -s* + 2 t* S(tau) with s* from eq. 27. With V_0 = V_1 = V_c
= V_{n-1} = V_n the speed joins V_c with continuous acceleration (the paper's requirement); in
general, when the first and last r coefficients equal V_c, V - V_c vanishes to order r at both
junctions and the speed is C^(r-1) there (r = n/2 for the paper's profile: C^4 for n = 10).
A middle coefficient below -(2^n / C(n, n/2) - 1) V_c makes V(1/2) < 0: retrograde motion.

CompositeFeedrate (section 7, left as future work there): deceleration to rest, dwell, and
acceleration back, each transition a Bernstein polynomial of degree 2k+1 with coefficients
(V_c x (k+1), 0 x (k+1)): V - V_c vanishes to order k+1 at the outer junctions and V to order
k+1 at the inner ones, so the speed is C^k at all four junctions (position C^(k+1)); default
k = 4 matches the paper's n = 10 profile. Each transition covers V_c T / 2 of path.

The choice of t* for a turning point is agent.feedrate.filter.window_length. All evaluation is
vectorised over arrays of times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from agent.feedrate.bernstein import bernstein_derivative, bernstein_eval, bernstein_integral

Array = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
ArrayLike = float | Array | list[float]


def middle_factor(ratio: float, degree: int = 10) -> float:
    """f with V_{n/2} = f V_c giving V(1/2) = ratio * V_c (section 6: (256 r - 193)/63 at n=10)."""
    _check_degree(degree)
    weight = math.comb(degree, degree // 2) / 2.0**degree
    return 1.0 + (ratio - 1.0) / weight


def middle_ratio(factor: float, degree: int = 10) -> float:
    """V(1/2) / V_c for V_{n/2} = f V_c ((5 + 3f)/8 at n = 4, (193 + 63f)/256 at n = 10)."""
    _check_degree(degree)
    weight = math.comb(degree, degree // 2) / 2.0**degree
    return 1.0 + (factor - 1.0) * weight


def _check_degree(degree: int) -> None:
    if not (isinstance(degree, int) and degree >= 4 and degree % 2 == 0):
        raise ValueError(f"feedrate degree: expected an even integer >= 4 (eq. 26), got {degree!r}")


def check_positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")


class FeedrateProfile(Protocol):
    """What the simulation and the streaming filter need of a modulated feedrate."""

    @property
    def nominal_m_s(self) -> float: ...
    @property
    def window_start_s(self) -> float: ...
    @property
    def window_end_s(self) -> float: ...
    @property
    def arc_start_m(self) -> float: ...
    @property
    def arc_end_m(self) -> float: ...
    def speed_m_s(self, t: ArrayLike) -> Array: ...
    def arc_length_m(self, t: ArrayLike) -> Array: ...
    def to_dict(self) -> dict[str, Any]: ...


# ------------------------------------------------------------------------ the paper's profile


@dataclass(frozen=True)
class BernsteinFeedrate:
    """Eq. 26 on [-t*, t*], V_c outside; s = 0 at the middle of the window's arc."""

    coefficients_m_s: tuple[float, ...]
    half_window_s: float

    def __post_init__(self) -> None:
        c = self.coefficients_m_s
        _check_degree(len(c) - 1)
        check_positive("BernsteinFeedrate.half_window_s", self.half_window_s)
        if not all(math.isfinite(v) for v in c):
            raise ValueError(f"BernsteinFeedrate.coefficients_m_s: not all finite: {c!r}")
        check_positive("BernsteinFeedrate.coefficients_m_s[0] (nominal feed V_c)", c[0])
        vc = c[0]
        if not (c[1] == vc and c[-2] == vc and c[-1] == vc):
            raise ValueError(
                f"BernsteinFeedrate.coefficients_m_s: V_0 = V_1 = V_(n-1) = V_n = "
                f"V_c is required for continuous speed and acceleration (section "
                f"5.1), got {c!r}"
            )
        if sum(c) <= 0:
            raise ValueError(
                "BernsteinFeedrate.coefficients_m_s: the window must advance along "
                f"the path (sum of coefficients > 0), got {c!r}"
            )

    # -- shape
    @property
    def degree(self) -> int:
        return len(self.coefficients_m_s) - 1

    @property
    def nominal_m_s(self) -> float:
        return self.coefficients_m_s[0]

    @cached_property
    def integral_coefficients_m_s(self) -> tuple[float, ...]:
        """S_k of eq. 28 (S(tau) in m/s: arc length over the window is 2 t* S(tau))."""
        return tuple(float(v) for v in bernstein_integral(self.coefficients_m_s))

    @property
    def half_arc_m(self) -> float:
        """s* of eq. 27."""
        return sum(self.coefficients_m_s) * self.half_window_s / (self.degree + 1)

    @property
    def window_start_s(self) -> float:
        return -self.half_window_s

    @property
    def window_end_s(self) -> float:
        return self.half_window_s

    @property
    def arc_start_m(self) -> float:
        return -self.half_arc_m

    @property
    def arc_end_m(self) -> float:
        return self.half_arc_m

    @cached_property
    def continuity_order(self) -> int:
        """k such that the speed is C^k at both junctions with V_c (position C^(k+1))."""
        c = self.coefficients_m_s
        vc = c[0]
        lead = next((i for i, v in enumerate(c) if v != vc), len(c))
        trail = next((i for i, v in enumerate(reversed(c)) if v != vc), len(c))
        return min(lead, trail) - 1 if min(lead, trail) < len(c) else 10**9

    @cached_property
    def min_speed_m_s(self) -> float:
        """Least speed in the window (V(1/2) for the paper's symmetric profile)."""
        return float(np.min(self.speed_m_s(self._dense_times())))

    @property
    def is_retrograde(self) -> bool:
        return self.min_speed_m_s < 0.0

    @cached_property
    def excursion_m(self) -> float:
        """max |s(t)| over the window: s* or, with retrograde motion, the overshoot past s = 0."""
        s = self.arc_length_m(self._dense_times())
        roots = self.stop_times_s
        if roots:
            s = np.concatenate([s, self.arc_length_m(np.array(roots))])
        return float(np.max(np.abs(s)))

    @cached_property
    def stop_times_s(self) -> tuple[float, ...]:
        """Instants where the feed passes through zero (retrograde motion starts or ends)."""
        coef = np.asarray(self.coefficients_m_s)
        n = self.degree
        # Power basis of V(tau): sum_k V_k C(n,k) tau^k (1 - tau)^(n-k).
        poly = np.zeros(n + 1)
        for k, vk in enumerate(coef):
            term = np.polynomial.polynomial.polypow([1.0, -1.0], n - k)
            poly[k : k + term.size] += vk * math.comb(n, k) * term
        roots = np.polynomial.polynomial.polyroots(poly)
        taus = sorted(
            float(r.real) for r in roots if abs(r.imag) < 1e-9 and 1e-12 < r.real < 1 - 1e-12
        )
        return tuple(self.half_window_s * (2.0 * tau - 1.0) for tau in taus)

    @property
    def time_penalty_s(self) -> float:
        """Extra time over the window's arc versus the nominal feed: 2t* - 2s*/V_c."""
        return 2.0 * self.half_window_s - 2.0 * self.half_arc_m / self.nominal_m_s

    def _dense_times(self) -> Array:
        return np.linspace(-self.half_window_s, self.half_window_s, 64 * self.degree + 1)

    # -- evaluation (vectorised)
    def tau(self, t: ArrayLike) -> Array:
        """Eq. 24, clipped to [0, 1]."""
        return np.clip(
            (np.asarray(t, dtype=float) + self.half_window_s) / (2.0 * self.half_window_s), 0.0, 1.0
        )

    def speed_m_s(self, t: ArrayLike) -> Array:
        """V(t): eq. 26 inside the window, V_c outside."""
        return bernstein_eval(self.coefficients_m_s, self.tau(t))

    def derivative(self, t: ArrayLike, order: int) -> Array:
        """d^order V / dt^order (eq. 25: each d/dt is d/dtau / 2t*); zero outside the window."""
        if order == 0:
            return self.speed_m_s(t)
        tt = np.asarray(t, dtype=float)
        coef = bernstein_derivative(self.coefficients_m_s, order)
        val = bernstein_eval(coef, self.tau(tt)) / (2.0 * self.half_window_s) ** order
        inside = np.abs(tt) <= self.half_window_s
        return np.where(inside, val, 0.0)

    def acceleration_m_s2(self, t: ArrayLike) -> Array:
        return self.derivative(t, 1)

    def arc_length_m(self, t: ArrayLike) -> Array:
        """s(t) = -s* + 2 t* S(tau) (eqs. 28-29), continued at V_c outside the window."""
        tt = np.asarray(t, dtype=float)
        ts, ss, vc = self.half_window_s, self.half_arc_m, self.nominal_m_s
        inside = -ss + 2.0 * ts * bernstein_eval(self.integral_coefficients_m_s, self.tau(tt))
        return np.where(
            tt < -ts, -ss + vc * (tt + ts), np.where(tt > ts, ss + vc * (tt - ts), inside)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "bernstein",
            "degree": self.degree,
            "coefficients_m_s": list(self.coefficients_m_s),
            "half_window_s": self.half_window_s,
            "half_arc_m": self.half_arc_m,
            "nominal_m_s": self.nominal_m_s,
            "min_speed_m_s": self.min_speed_m_s,
            "retrograde": self.is_retrograde,
            "excursion_m": self.excursion_m,
            "continuity_order": self.continuity_order,
            "time_penalty_s": self.time_penalty_s,
        }


def symmetric_feedrate(
    nominal_m_s: float,
    half_window_s: float,
    *,
    ratio: float | None = None,
    factor: float | None = None,
    degree: int = 10,
    allow_retrograde: bool = False,
) -> BernsteinFeedrate:
    """The paper's profile: all coefficients V_c except V_{n/2} = f V_c (give ratio or factor).

    ratio = V(1/2) / V_c. A negative ratio (retrograde motion, section 6) must be allowed
    explicitly: the path is then travelled back and forth about the turning point.
    """
    _check_degree(degree)
    check_positive("symmetric_feedrate.nominal_m_s", nominal_m_s)
    if (ratio is None) == (factor is None):
        raise ValueError("symmetric_feedrate: give exactly one of ratio (V(1/2)/V_c) or factor")
    f = middle_factor(ratio, degree) if ratio is not None else float(factor)  # type: ignore[arg-type]
    if not math.isfinite(f):
        raise ValueError(f"symmetric_feedrate: middle factor must be finite, got {f!r}")
    if middle_ratio(f, degree) < 0 and not allow_retrograde:
        raise ValueError(
            f"symmetric_feedrate: V(1/2)/V_c = {middle_ratio(f, degree):.4g} < 0 "
            "means retrograde motion; pass allow_retrograde=True to accept it"
        )
    coef = [nominal_m_s] * (degree + 1)
    coef[degree // 2] = f * nominal_m_s
    return BernsteinFeedrate(tuple(coef), half_window_s)


# ------------------------------------------------------------------------ composite profile


@dataclass(frozen=True)
class CompositeFeedrate:
    """Decelerate - dwell - accelerate (section 7); the dwell is centred on t = 0 at s = 0."""

    nominal_m_s: float
    decel_s: float
    dwell_s: float
    accel_s: float
    continuity: int = 4

    def __post_init__(self) -> None:
        check_positive("CompositeFeedrate.nominal_m_s", self.nominal_m_s)
        check_positive("CompositeFeedrate.decel_s", self.decel_s)
        check_positive("CompositeFeedrate.accel_s", self.accel_s)
        if not (math.isfinite(self.dwell_s) and self.dwell_s >= 0):
            raise ValueError(
                f"CompositeFeedrate.dwell_s: expected a finite number >= 0, got {self.dwell_s!r}"
            )
        if not (isinstance(self.continuity, int) and 1 <= self.continuity <= 20):
            raise ValueError(
                f"CompositeFeedrate.continuity: expected an integer in 1..20, got "
                f"{self.continuity!r}"
            )

    @property
    def transition_coefficients(self) -> tuple[float, ...]:
        """Bernstein coefficients (in units of V_c) of the deceleration, degree 2k+1."""
        k = self.continuity
        return (1.0,) * (k + 1) + (0.0,) * (k + 1)

    @cached_property
    def continuity_order(self) -> int:
        return self.continuity

    @property
    def window_start_s(self) -> float:
        return -0.5 * self.dwell_s - self.decel_s

    @property
    def window_end_s(self) -> float:
        return 0.5 * self.dwell_s + self.accel_s

    @property
    def arc_start_m(self) -> float:
        return -0.5 * self.nominal_m_s * self.decel_s

    @property
    def arc_end_m(self) -> float:
        return 0.5 * self.nominal_m_s * self.accel_s

    @cached_property
    def excursion_m(self) -> float:
        return max(-self.arc_start_m, self.arc_end_m)

    @property
    def time_penalty_s(self) -> float:
        """Window duration minus the time of its arc at V_c: dwell + (decel + accel) / 2."""
        return self.dwell_s + 0.5 * (self.decel_s + self.accel_s)

    def _phases(self, t: Array) -> tuple[Array, Array, BoolArray, BoolArray]:
        half = 0.5 * self.dwell_s
        u_dec = (t - self.window_start_s) / self.decel_s
        u_acc = (t - half) / self.accel_s
        in_dec = (t >= self.window_start_s) & (t < -half)
        in_acc = (t > half) & (t <= self.window_end_s)
        return np.clip(u_dec, 0, 1), np.clip(u_acc, 0, 1), in_dec, in_acc

    def derivative(self, t: ArrayLike, order: int) -> Array:
        """d^order V / dt^order, vectorised (order 0: the speed)."""
        tt = np.asarray(t, dtype=float)
        u_dec, u_acc, in_dec, in_acc = self._phases(tt)
        dec = np.asarray(self.transition_coefficients) * self.nominal_m_s
        acc = dec[::-1]
        d_dec = bernstein_eval(bernstein_derivative(dec, order), u_dec) / self.decel_s**order
        d_acc = bernstein_eval(bernstein_derivative(acc, order), u_acc) / self.accel_s**order
        outside = (tt < self.window_start_s) | (tt > self.window_end_s)
        base = np.where(outside, self.nominal_m_s if order == 0 else 0.0, 0.0)
        return np.where(in_dec, d_dec, np.where(in_acc, d_acc, base))

    def speed_m_s(self, t: ArrayLike) -> Array:
        return self.derivative(t, 0)

    def arc_length_m(self, t: ArrayLike) -> Array:
        """s(t): 0 through the dwell, -V_c T_dec / 2 at the window start, linear outside."""
        tt = np.asarray(t, dtype=float)
        u_dec, u_acc, in_dec, in_acc = self._phases(tt)
        dec = np.asarray(self.transition_coefficients) * self.nominal_m_s
        s_dec = self.arc_start_m + self.decel_s * bernstein_eval(bernstein_integral(dec), u_dec)
        s_acc = self.accel_s * bernstein_eval(bernstein_integral(dec[::-1]), u_acc)
        vc = self.nominal_m_s
        before = self.arc_start_m + vc * (tt - self.window_start_s)
        after = self.arc_end_m + vc * (tt - self.window_end_s)
        return np.where(
            tt < self.window_start_s,
            before,
            np.where(
                tt > self.window_end_s, after, np.where(in_dec, s_dec, np.where(in_acc, s_acc, 0.0))
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "composite",
            "nominal_m_s": self.nominal_m_s,
            "decel_s": self.decel_s,
            "dwell_s": self.dwell_s,
            "accel_s": self.accel_s,
            "continuity_order": self.continuity,
            "transition_degree": 2 * self.continuity + 1,
            "excursion_m": self.excursion_m,
            "time_penalty_s": self.time_penalty_s,
        }
