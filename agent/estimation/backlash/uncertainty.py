"""How well a backlash fit pins its amplitude: the standard uncertainty of the peak amplitude A
(Laplace / Gauss-Newton at the optimum), and the check of that number against the optima of the
search's restarts.

At the optimum the fit is linearised in every parameter it estimates: the nonlinear ones of the
signature (start time, decay, frequency, and T_d / T_f when they are searched) and the two linear
ones (sine and cosine amplitude); the offset and harmonics are already projected out of data and
model, which gives the same covariance as carrying them as parameters (variable projection).
With J the Jacobian of the projected model and g the gradient of A, A moves by v'e for a small
change e of the data, where v = J (J'J)^+ g is A's influence on each sample. Var(A) is then
sum_k gamma_k R_v(k): the noise autocovariance gamma against v's own autocorrelation, with a
Bartlett lag window. For white noise it is sigma^2 |v|^2, the Cramer-Rao bound of the fitted
model; a coloured residual (encoder noise is differentiated into speed, which makes it blue)
weighs in at the frequencies v lives at, the resonance, instead of on average.

Only the random part of the residual is noise here. What repeats every load turn (the signature
model is not the joint's exact response) is the same in every capture of that joint: it biases A
rather than spreading it, and belongs to the calibration's model term (calibration.py), not to
this interval. The random part is the residual less its turn-synchronous average.

Two optima of the restarts that the noise cannot tell apart but whose amplitudes differ by more
than the interval's half-width make the fit ambiguous: the interval then spans both, and the
result says so. "Cannot tell apart": the other optimum lies inside the best one's 95 % joint
likelihood region, its SSE within the chi-square quantile of p degrees of freedom (p the
parameters fitted) times the noise variance of the minimum. Its amplitude is then inside that
region's projection on A, a 95 % interval for A that holds whatever the other parameters are.
One degree of freedom would be the profile likelihood's criterion, but another optimum is one
point of A's profile, not its minimum: it would call optima 0.2 % apart in RMSE and 30 % apart
in A (harsh noise, 0.3 mrad) distinguishable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.stats import chi2

from agent.estimation.backlash.search import TD, TF, SignatureProblem
from agent.estimation.backlash.signature import peak_amplitude

Array = npt.NDArray[np.float64]

Z95 = 1.959963984540054  # two-sided 95 % quantile of the normal distribution


@dataclass(frozen=True)
class Optimum:
    """The optimum of one CMA-ES run of the search (the scan's run or a restart)."""

    rmse_rad_s: float
    amplitude_rad_s: float

    def to_dict(self) -> dict[str, float]:
        return {"rmse_rad_s": self.rmse_rad_s, "amplitude_rad_s": self.amplitude_rad_s}


@dataclass(frozen=True)
class AmplitudeUncertainty:
    """A's standard uncertainty from the random part of the residual and its interval."""

    sd_rad_s: float  # with the residual's autocorrelation
    sd_white_rad_s: float  # what white noise of the same variance would give
    noise_rms_rad_s: float  # RMS of the random part of the residual
    lags: int  # Bartlett lag window used for the autocorrelation
    low_rad_s: float
    high_rad_s: float
    confidence: float
    ambiguous: bool
    optima: tuple[Optimum, ...]
    tied_rad_s: tuple[float, ...] = ()  # amplitudes of the fit and the optima tied with it
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "sd_rad_s": self.sd_rad_s,
            "sd_white_rad_s": self.sd_white_rad_s,
            "noise_rms_rad_s": self.noise_rms_rad_s,
            "lags": self.lags,
            "low_rad_s": self.low_rad_s,
            "high_rad_s": self.high_rad_s,
            "confidence": self.confidence,
            "ambiguous": self.ambiguous,
            "optima": [o.to_dict() for o in self.optima],
        }


def _columns(
    t: Array, ts: float, tau: float, omega: float, td: float, tf: float, frozen: list[Array]
) -> tuple[Array, Array]:
    """Sine and cosine columns of the periodic signature in float64, with the turn each sample
    belongs to and whether it lies inside its window frozen at the optimum (`frozen`): the
    derivatives are those of the smooth ringing, not of a window edge crossing a sample."""
    s = np.zeros_like(t)
    c = np.zeros_like(t)
    for shift, sign in ((0.0, 1.0), (1.0, -1.0)):
        turn, inside = frozen[2 * int(shift)], frozen[2 * int(shift) + 1]
        u = (t - ts - shift * td - turn * tf)[inside > 0]
        env = np.exp(-tau * u)
        s[inside > 0] += sign * env * np.sin(omega * u)
        c[inside > 0] += sign * env * np.cos(omega * u)
    return s, c


def _windows(t: Array, ts: float, dur: float, td: float, tf: float) -> list[Array]:
    """Per oscillation (first, second): each sample's turn index and whether it is inside."""
    out: list[Array] = []
    for shift in (0.0, 1.0):
        x = t - ts - shift * td
        turn = np.floor(x / tf)
        out += [turn, (x - turn * tf <= dur).astype(np.float64)]
    return out


def influence(problem: SignatureProblem, x: Array, a_sin: float, b_cos: float) -> Array:
    """v: how much A moves per unit change of each (projected) sample, to first order."""
    ts, tau, omega, dur, td, tf = (float(v[0]) for v in problem.decode(x))
    t = problem.t
    frozen = _windows(t, ts, dur, td, tf)
    # Nonlinear parameters with their finite-difference steps (float64: tiny steps are exact
    # enough). The window end T2 only decides where the ringing is cut off, which no smooth
    # derivative sees; it moves A only if the cut came before the peak.
    names = ["ts", "tau", "omega"] + (["td"] if TD in problem.active else [])
    names += ["tf"] if TF in problem.active else []
    centre = {"ts": ts, "tau": tau, "omega": omega, "td": td, "tf": tf}
    steps = {"ts": 1e-7, "tau": 1e-6 * tau, "omega": 1e-7 * omega, "td": 1e-7, "tf": 1e-7}

    ratio = td / tf

    def projected(p: dict[str, float], a: float, b: float) -> Array:
        # Without its own coordinate T_d stays the searched share of T_f (half a turn).
        td_ = p["td"] if "td" in names else ratio * p["tf"]
        s, c = _columns(t, p["ts"], p["tau"], p["omega"], td_, p["tf"], frozen)
        return problem.project(a * s + b * c)

    cols = []
    for name in names:
        hi, lo = dict(centre), dict(centre)
        hi[name] += steps[name]
        lo[name] -= steps[name]
        cols.append((projected(hi, a_sin, b_cos) - projected(lo, a_sin, b_cos)) / (2 * steps[name]))
    s0, c0 = _columns(t, ts, tau, omega, td, tf, frozen)
    cols += [problem.project(s0), problem.project(c0)]
    jac = np.column_stack(cols)

    # Gradient of the peak amplitude in the same parameters (only a, b, tau, omega enter it).
    def amp(a: float, b: float, tau_: float, omega_: float) -> float:
        return peak_amplitude(a, b, tau_, omega_, dur)

    base = (a_sin, b_cos, tau, omega)
    rel = max(abs(a_sin), abs(b_cos), 1e-12)
    amp_steps = (1e-6 * rel, 1e-6 * rel, 1e-6 * tau, 1e-7 * omega)
    grad_amp = []
    for k, h in enumerate(amp_steps):
        up, down = list(base), list(base)
        up[k] += h
        down[k] -= h
        grad_amp.append((amp(*up) - amp(*down)) / (2 * h))
    d_a, d_b, d_tau, d_omega = grad_amp
    grad = np.zeros(jac.shape[1])
    grad[names.index("tau")] = d_tau
    grad[names.index("omega")] = d_omega
    grad[-2], grad[-1] = d_a, d_b

    # (J'J)^+ with the columns scaled to unit norm first, so the threshold that drops the
    # directions the data do not determine (start time against the phase, for one) is relative.
    norms = np.linalg.norm(jac, axis=0)
    norms[norms == 0] = 1.0
    scaled = jac / norms
    w, vecs = np.linalg.eigh(scaled.T @ scaled)
    keep = w > 1e-10 * max(float(w.max()), 1e-300)
    inv = (vecs[:, keep] / w[keep]) @ vecs[:, keep].T
    coef = inv @ (grad / norms)
    v: Array = scaled @ coef
    return v


def random_part(residual: Array, dt_s: float, tf_s: float) -> tuple[Array, float]:
    """The residual less its turn-synchronous average, and the factor (1 - 1/turns) by which
    removing that average shrank the noise's variance. Needs about an integer number of samples
    per turn (the configured test cycles have one); otherwise the residual as it is, factor 1
    (the interval is then conservative: what repeats counts as noise)."""
    per_turn = tf_s / dt_s
    m = round(per_turn)
    turns = residual.size // max(m, 1)
    if m < 4 or turns < 2 or abs(per_turn - m) * turns > 0.25:
        return residual - float(np.mean(residual)), 1.0
    used = residual[: turns * m].reshape(turns, m)
    rest = (used - used.mean(axis=0)).ravel()
    return rest, 1.0 - 1.0 / turns


def coloured_variance(v: Array, noise: Array, shrink: float, lags: int) -> tuple[float, float]:
    """(Var(v'e) with the noise's autocovariance and a Bartlett window, the white-noise
    variance sigma^2 |v|^2) from a sample of the noise."""
    n = noise.size
    gamma = np.array([float(noise[: n - k] @ noise[k:]) / n for k in range(lags + 1)]) / shrink
    r_v = np.array([float(v[: v.size - k] @ v[k:]) for k in range(lags + 1)])
    weights = 1.0 - np.arange(lags + 1) / (lags + 1)
    coloured = gamma[0] * r_v[0] + 2.0 * float(np.sum((weights * gamma * r_v)[1:]))
    white = gamma[0] * r_v[0]
    return max(coloured, 0.0), white


def amplitude_uncertainty(
    problem: SignatureProblem,
    x: Array,
    a_sin: float,
    b_cos: float,
    amplitude_rad_s: float,
    residual: Array,
    optima: Sequence[tuple[float, float]],
    confidence: float = 0.95,
) -> AmplitudeUncertainty:
    """A's uncertainty at the optimum x; `residual` the projected fit residual, `optima` the
    (rmse, amplitude) of each run of the search."""
    if confidence != 0.95:
        raise ValueError("only 95 % intervals are implemented")
    dt = float(np.median(np.diff(problem.t)))
    tf = float(problem.decode(x)[5][0])
    noise, shrink = random_part(residual, dt, tf)
    # Lags up to half a turn: the turn-synchronous average leaves a correlation of -1/turns at
    # whole turns, which is not the noise's own.
    lags = int(max(1, min(round(0.5 * tf / dt), noise.size // 8)))
    v = influence(problem, x, a_sin, b_cos)
    var, var_white = coloured_variance(v, noise, shrink, lags)
    sd, sd_white = math.sqrt(var), math.sqrt(var_white)
    noise_var = float(noise @ noise) / noise.size / shrink
    half = Z95 * sd
    found = tuple(Optimum(float(r), float(a)) for r, a in optima)
    n = problem.t.size
    best = min((o.rmse_rad_s for o in found), default=0.0)
    inflation = max(1.0, var / var_white) if var_white > 0 else 1.0
    # The best fit's 95 % joint likelihood region, in SSE above its minimum: p = the searched
    # coordinates and the two linear amplitudes.
    n_params = len(problem.active) + 2
    tie = float(chi2.ppf(confidence, n_params)) * noise_var * inflation
    equal = [o for o in found if n * (o.rmse_rad_s**2 - best**2) <= tie]
    amps = [o.amplitude_rad_s for o in equal] + [amplitude_rad_s]
    lo, hi = min(amps), max(amps)
    # (Optima a hair apart in A are one optimum to the search's precision, noise or none.)
    ambiguous = hi - lo > max(half, 1e-6 * hi)
    if not ambiguous:  # the optima agree within the noise: the interval is the fit's own
        lo = hi = amplitude_rad_s
    note = ""
    if ambiguous:
        note = (
            f"ambiguous fit: {len(equal)} optima of the restarts fit equally well within the noise "
            f"(RMSE {min(o.rmse_rad_s for o in equal):.5g}-{max(o.rmse_rad_s for o in equal):.5g}"
            f" rad/s) with amplitudes {lo:.4g}-{hi:.4g} rad/s, further apart than the "
            f"+-{half:.2g} rad/s the noise allows: the interval spans them all"
        )
    return AmplitudeUncertainty(
        sd_rad_s=sd,
        sd_white_rad_s=sd_white,
        noise_rms_rad_s=math.sqrt(noise_var),
        lags=lags,
        low_rad_s=max(0.0, lo - half),
        high_rad_s=hi + half,
        confidence=confidence,
        ambiguous=ambiguous,
        optima=found,
        tied_rad_s=tuple(amps) if ambiguous else (amplitude_rad_s,),
        note=note,
    )
