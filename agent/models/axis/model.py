"""CNC axis with gear backlash (Farouki & Swett 2022, sections 3-4): parameters, P-controller closed
form.

Dead-zone model of section 3: while the gear is engaged the axis position x obeys eq. 8,
b x'' + c x' + x = X (P controller; eq. 7 for PI/PID, see `agent.models.axis.pid`). When the
motor speed omega_m (= N x'/r while engaged) changes sign at t_i the gearbox output stops (the
axis holds x_i = x(t_i), eq. 14) and the motor alone turns through the gap, driven by the position
error (eq. 16): omega_m' + beta omega_m = C (X - x_i), omega_m(t_i) = 0. The interval ends when
the motor has turned through the backlash, int omega_m dt = sigma * dtheta_m (eq. 15); the axis
then restarts from x_i at rest (eq. 14) and eq. 8 holds again.

For a harmonic command X = a sin(Omega t) (section 4: the osculating circle at a turning point)
everything is closed form: eq. 19 for the engaged motion, eqs. 21-22 for the backlash interval,
with the Newton iterations of section 4.1 for the reversal instants and the interval lengths.
Every Newton iteration here is safeguarded by a bracket found by scanning (the paper's starting
values can overshoot: its estimate of Delta t_i assumes X(t_i) - x_i is not small, but in the
steady state it is ~3e-5 m, and the estimate is then twice the answer).

The axis parameters are agent.models.axis.params' (AxisParams).

Slightly over 400 lines on purpose: the closed form of the P-controlled axis is one derivation
(constants, engaged motion, gap, reversal, run) that reads best in one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.models.axis.params import AxisParams

Array = npt.NDArray[np.float64]
FloatOrArray = float | Array


# --------------------------------------------------------------------------------------------
# Closed form for a harmonic command X(t) = a sin(Omega t) under P control (section 4)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HarmonicConstants:
    """Derived constants of section 4 for one axis and one harmonic command."""

    amplitude_m: float
    omega_rad_s: float
    gamma_1_s: float
    lambda_1_s: float
    discriminant_s2: float
    p: float
    q: float
    phi_rad: float
    motor_gain_rad_m_s2: float
    beta_1_s: float

    @property
    def steady_gain(self) -> float:
        """|x| / |X| of the engaged steady state x = -g(t)."""
        return math.hypot(self.p, self.q)

    @property
    def steady_lag_s(self) -> float:
        """Time lag of the engaged steady state x = -g(t) behind X (phase atan2(q, -p) / Omega)."""
        return math.atan2(self.q, -self.p) / self.omega_rad_s

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "steady_gain": self.steady_gain, "steady_lag_s": self.steady_lag_s}


def harmonic_constants(
    params: AxisParams, amplitude_m: float, omega_rad_s: float
) -> HarmonicConstants:
    """gamma, lambda, p, q (eq. 20) and phi (section 4.1) for X = a sin(Omega t)."""
    if not (amplitude_m > 0 and omega_rad_s > 0):
        raise ValueError(
            f"harmonic command: amplitude_m and omega_rad_s must be > 0, got "
            f"{amplitude_m!r}, {omega_rad_s!r}"
        )
    b, c, w = params.b_s2, params.c_s, omega_rad_s
    re, im = b * w * w - 1.0, c * w
    den = re * re + im * im
    beta = params.beta_1_s
    return HarmonicConstants(
        amplitude_m=amplitude_m,
        omega_rad_s=w,
        gamma_1_s=params.gamma_1_s,
        lambda_1_s=params.lambda_1_s,
        discriminant_s2=params.discriminant_s2,
        p=re / den,
        q=im / den,
        phi_rad=math.atan2(beta, w),
        motor_gain_rad_m_s2=params.motor_gain_rad_m_s2,
        beta_1_s=beta,
    )


def _is_critical(params: AxisParams) -> bool:
    return abs(params.discriminant_s2) <= 1e-12 * max(params.c_s**2, 4.0 * params.b_s2)


def engaged_harmonic_motion(
    params: AxisParams,
    hc: HarmonicConstants,
    start_s: float,
    position_m: float,
    velocity_m_s: float,
    t: FloatOrArray,
) -> tuple[Array, Array, Array]:
    """Eq. 19 (and its derivatives) from any state (x, x') at t_s; returns x, x', x'' at t.

    The paper gives c1, c2 for x'(t_s) = 0; here u = x + g solves the homogeneous equation, so
    c1, c2 follow from u(t_s), u'(t_s) for any initial velocity (needed at t = 0, x' = a Omega).
    Delta = 0 (critical damping) uses u = e^{-gamma s}(c1 + c2 s).
    """
    a, w, p, q = hc.amplitude_m, hc.omega_rad_s, hc.p, hc.q
    tt = np.asarray(t, dtype=float)

    def g(time: FloatOrArray) -> tuple[Any, Any, Any]:
        s, co = np.sin(w * time), np.cos(w * time)
        return (a * (p * s + q * co), a * w * (p * co - q * s), -a * w * w * (p * s + q * co))

    g0, g1, _ = g(start_s)
    u0, du0 = position_m + g0, velocity_m_s + g1
    gam, lam = params.gamma_1_s, params.lambda_1_s
    s = tt - start_s
    decay = np.exp(-gam * s)
    if _is_critical(params):
        c1, c2 = u0, du0 + gam * u0
        u = decay * (c1 + c2 * s)
        du = decay * (c2 - gam * (c1 + c2 * s))
        ddu = decay * (gam * gam * (c1 + c2 * s) - 2.0 * gam * c2)
    elif params.discriminant_s2 < 0:
        c1, c2 = (du0 + gam * u0) / lam, u0
        sn, cs = np.sin(lam * s), np.cos(lam * s)
        u = decay * (c1 * sn + c2 * cs)
        du = decay * ((lam * c1 - gam * c2) * cs - (gam * c1 + lam * c2) * sn)
        k = gam * gam - lam * lam
        ddu = decay * ((k * c2 - 2 * lam * gam * c1) * cs + (k * c1 + 2 * lam * gam * c2) * sn)
    else:
        c1 = ((lam + gam) * u0 + du0) / (2.0 * lam)
        c2 = ((lam - gam) * u0 - du0) / (2.0 * lam)
        e1, e2 = np.exp((lam - gam) * s), np.exp(-(lam + gam) * s)
        u = c1 * e1 + c2 * e2
        du = (lam - gam) * c1 * e1 - (lam + gam) * c2 * e2
        ddu = (lam - gam) ** 2 * c1 * e1 + (lam + gam) ** 2 * c2 * e2
    gx, gv, ga = g(tt)
    return np.asarray(u - gx), np.asarray(du - gv), np.asarray(ddu - ga)


def motor_angle_in_gap(
    hc: HarmonicConstants, start_s: float, position_m: float, elapsed_s: FloatOrArray
) -> tuple[Array, Array]:
    """int_{t_i}^{t_i+dt} omega_m and omega_m(t_i + dt) in closed form (section 4.1, eq. 22).

    f(0) - f(dt) of eq. 22 written out; the paper's term x_i (t_i + dt) / beta is used as
    x_i dt / beta (the constant x_i t_i / beta cancels in the difference), and differences of
    sines/exponentials are taken in product form so that 1e5-sized terms do not cancel badly.
    """
    a, w, cc, beta, phi = (
        hc.amplitude_m,
        hc.omega_rad_s,
        hc.motor_gain_rad_m_s2,
        hc.beta_1_s,
        hc.phi_rad,
    )
    dt = np.asarray(elapsed_s, dtype=float)
    rad = math.hypot(beta, w)
    one_minus = -np.expm1(-beta * dt)
    phase0 = w * start_s + phi
    sin_diff = 2.0 * np.cos(phase0 + 0.5 * w * dt) * np.sin(0.5 * w * dt)
    angle = cc * (
        a * math.cos(phase0) * one_minus / (beta * rad)
        - a * sin_diff / (w * rad)
        - position_m / beta * (dt - one_minus / beta)
    )
    speed = cc * (
        a * math.cos(phase0) * (1.0 - one_minus) / rad
        - a * np.cos(phase0 + w * dt) / rad
        - position_m / beta * one_minus
    )
    return np.asarray(angle), np.asarray(speed)


def _rtsafe(
    fun: Callable[[float], tuple[float, float]],
    lo: float,
    hi: float,
    start: float,
    tol: float,
    max_iter: int = 100,
) -> tuple[float, int]:
    """Newton iterations kept inside a sign-change bracket [lo, hi] (bisect when a step leaves it).

    Returns (root, iterations). fun returns (value, derivative); fun(lo) and fun(hi) differ in sign.
    """
    x = min(max(start, lo), hi)
    f_lo = fun(lo)[0] if x != lo else None
    for it in range(1, max_iter + 1):
        fx, dfx = fun(x)
        if fx == 0.0:
            return x, it
        if f_lo is None:
            f_lo = fx
        if (fx < 0) == (f_lo < 0):
            lo, f_lo = x, fx
        else:
            hi = x
        if dfx != 0.0:
            x_new = x - fx / dfx
            if abs(x_new - x) <= tol:
                return min(max(x_new, lo), hi), it
        if dfx == 0.0 or not (lo < x_new < hi):
            x_new = 0.5 * (lo + hi)
        if hi - lo <= tol:
            return x_new, it
        x = x_new
    return x, max_iter


def _first_crossing(
    values: Callable[[Array], Array],
    t0: float,
    step: float,
    limit: float,
    chunk: int = 512,
) -> tuple[float, float] | None:
    """First sample interval [t_j, t_j + step] in (t0, limit] where values goes from >= 0 to < 0."""
    start = t0
    while start < limit:
        grid = start + step * np.arange(chunk + 1, dtype=float)
        v = values(grid)
        idx = np.nonzero((v[:-1] >= 0) & (v[1:] < 0))[0]
        if idx.size:
            j = int(idx[0])
            return float(grid[j]), float(grid[j + 1])
        start = float(grid[-1])
    return None


@dataclass(frozen=True)
class HarmonicReversal:
    """One axis reversal of the closed-form run: instant, held position, backlash interval."""

    time_s: float
    position_m: float
    direction: int  # motor direction after the reversal: +1 (negative to positive) or -1
    backlash_s: float
    lag_s: float  # time_s minus the commanded reversal instant (pi/2 + k pi) / Omega
    reversal_iterations: int
    backlash_iterations: int
    backlash_initial_estimate_s: float | None  # the paper's Delta t^(0), None when undefined

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HarmonicRun:
    """The closed-form motion of section 4: alternating engaged and backlash phases."""

    params: AxisParams
    constants: HarmonicConstants
    start_s: float
    end_s: float
    initial_position_m: float
    initial_velocity_m_s: float
    reversals: tuple[HarmonicReversal, ...]

    def position_m(self, t: FloatOrArray) -> Array:
        """x(t), vectorised: eq. 19 in engaged phases, x_i while the gap is taken up."""
        tt = np.atleast_1d(np.asarray(t, dtype=float))
        out = np.empty_like(tt)
        seg_start, x_s, v_s = self.start_s, self.initial_position_m, self.initial_velocity_m_s
        bounds = [(r.time_s, r.time_s + r.backlash_s, r.position_m) for r in self.reversals]
        out[:] = np.nan
        for t_rev, t_end_gap, x_i in [*bounds, (math.inf, math.inf, math.nan)]:
            m = (tt >= seg_start) & (tt < t_rev)
            if m.any():
                out[m] = engaged_harmonic_motion(
                    self.params, self.constants, seg_start, x_s, v_s, tt[m]
                )[0]
            m = (tt >= t_rev) & (tt < t_end_gap)
            out[m] = x_i
            seg_start, x_s, v_s = t_end_gap, x_i, 0.0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params.to_dict(),
            "constants": self.constants.to_dict(),
            "start_s": self.start_s,
            "end_s": self.end_s,
            "reversals": [r.to_dict() for r in self.reversals],
        }


def harmonic_backlash_interval(
    params: AxisParams,
    hc: HarmonicConstants,
    start_s: float,
    position_m: float,
    direction: int,
) -> tuple[float, int, float | None]:
    """Delta t_i solving eq. 21 (Newton from the paper's estimate, kept inside a bracket).

    Returns (interval, iterations, paper's initial estimate or None). The bracket is the first
    sample interval where sigma * int omega_m reaches dtheta_m; a motor that turns back before
    (possible only for odd commands, never for the harmonic one near its extremum) is an error.
    """
    dtheta = params.backlash_motor_rad
    if dtheta == 0.0:
        return 0.0, 0, 0.0
    a, w = hc.amplitude_m, hc.omega_rad_s
    drive = hc.motor_gain_rad_m_s2 * (a * math.sin(w * start_s) - position_m)
    radicand = 2.0 * direction * dtheta / drive if drive != 0 else -1.0
    estimate = math.sqrt(radicand) if radicand > 0 else None

    def short(dt: Array) -> Array:
        return dtheta - direction * motor_angle_in_gap(hc, start_s, position_m, dt)[0]

    # Scale of the scan: the fastest of the command, motor and (cubic) take-up time scales.
    scale = min(math.pi / w, params.motor_time_constant_s, estimate or math.inf, 1.0)
    horizon = 2.0 * math.pi / w + 10.0 * params.motor_time_constant_s
    bracket = _first_crossing(short, 0.0, scale / 32.0, horizon)
    if bracket is None:
        raise ValueError(
            f"backlash at t={start_s:.6g} s is never taken up: the motor does not "
            f"turn through {dtheta} rad within {horizon:.3g} s"
        )

    def q_fun(dt: float) -> tuple[float, float]:
        ang, spd = motor_angle_in_gap(hc, start_s, position_m, dt)
        return float(direction * ang - dtheta), float(direction * spd)

    root, iters = _rtsafe(
        q_fun, bracket[0], bracket[1], estimate if estimate is not None else bracket[1], tol=1e-12
    )
    return root, iters, estimate


def simulate_harmonic_p(
    params: AxisParams,
    amplitude_m: float,
    omega_rad_s: float,
    end_s: float,
    *,
    start_s: float = 0.0,
    initial_position_m: float = 0.0,
    initial_velocity_m_s: float | None = None,
) -> HarmonicRun:
    """Closed-form backlash motion for X = a sin(Omega t) under P control (sections 4, 4.1).

    Default start as in section 4.2: x = 0, x' = a Omega at t = 0. Each reversal t_i is the least
    t after the previous take-up with x'(t) = 0 (paper: Newton on x'/x'', here started at the
    left end of the first sign-change bracket of a scan, which avoids the paper's fixed
    t_{i-1} + 0.9 T guess that fails for the first reversal); then Delta t_i from eq. 21.
    """
    if params.controller != "P":
        raise ValueError(
            f"simulate_harmonic_p: the closed form holds for a P controller only, "
            f"this axis has {params.controller} (use agent.models.axis.pid)"
        )
    hc = harmonic_constants(params, amplitude_m, omega_rad_s)
    v0 = amplitude_m * omega_rad_s if initial_velocity_m_s is None else initial_velocity_m_s
    t_s, x_s, v_s = start_s, initial_position_m, v0
    if v_s != 0.0:
        sigma = 1 if v_s > 0 else -1
    else:
        acc0 = engaged_harmonic_motion(params, hc, t_s, x_s, 0.0, t_s)[2]
        sigma = 1 if float(acc0) >= 0 else -1
    osc = 2.0 * math.pi / max(params.lambda_1_s, params.gamma_1_s, 1e-12)
    scan_step = min(math.pi / omega_rad_s, osc) / 64.0
    reversals: list[HarmonicReversal] = []
    while t_s < end_s:

        def moving(
            t: Array, t_s: float = t_s, x_s: float = x_s, v_s: float = v_s, sigma: int = sigma
        ) -> Array:
            return sigma * engaged_harmonic_motion(params, hc, t_s, x_s, v_s, t)[1]

        bracket = _first_crossing(moving, t_s, scan_step, end_s)
        if bracket is None:
            break

        def vel_acc(
            t: float, t_s: float = t_s, x_s: float = x_s, v_s: float = v_s
        ) -> tuple[float, float]:
            _, v, acc = engaged_harmonic_motion(params, hc, t_s, x_s, v_s, t)
            return float(v), float(acc)

        t_i, rev_iters = _rtsafe(
            vel_acc, bracket[0], bracket[1], bracket[0], tol=1e-13 * max(1.0, abs(bracket[0]))
        )
        if t_i > end_s:
            break
        x_i = float(engaged_harmonic_motion(params, hc, t_s, x_s, v_s, t_i)[0])
        new_dir = -sigma
        dt_i, bl_iters, est = harmonic_backlash_interval(params, hc, t_i, x_i, new_dir)
        k = round((omega_rad_s * t_i - 0.5 * math.pi) / math.pi)
        lag = t_i - (0.5 * math.pi + k * math.pi) / omega_rad_s
        reversals.append(HarmonicReversal(t_i, x_i, new_dir, dt_i, lag, rev_iters, bl_iters, est))
        t_s, x_s, v_s, sigma = t_i + dt_i, x_i, 0.0, new_dir
    return HarmonicRun(params, hc, start_s, end_s, initial_position_m, v0, tuple(reversals))
