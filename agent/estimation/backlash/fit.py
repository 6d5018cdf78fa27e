"""Backlash virtual sensor (paper 000): fit the signature h(t) to the motor-speed residual.

r(t) = v(t) - v_t (eq. 11) is fitted by h(t) (eqs. 1-7) through CMA-ES in pycma's ask/tell loop.
What the implementation adds to the paper, and why:

- A and the oscillation phase are linear: solved in closed form for every candidate, so CMA-ES
  searches 6 nonlinear dimensions instead of 8 and A has no sign ambiguity.
- The servo loop leaves gravity's once-per-turn ripple on the speed; an offset and the first
  harmonics of the load-turn frequency are projected out of r(t) and of every candidate (they are
  reported as nuisance terms). The signature's own content there is small: it rings at the
  joint resonance, tens of harmonics higher.
- The search starts from a deterministic scan (resonance from the spectrum, start time and decay
  on a grid), then CMA-ES refines and IPOP restarts from random points confirm the optimum.
- A whole population is evaluated as one array operation.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

with warnings.catch_warnings():
    # pycma warns on import when matplotlib is absent; the agent never plots through it, and
    # the warning would land in every daemon log and `make demo` output.
    warnings.filterwarnings("ignore", message="Could not import matplotlib", category=UserWarning)
    import cma
import numpy as np
import numpy.typing as npt

from agent.capture.model import Capture, motor_speed_rad_s
from agent.errors import EstimationError
from agent.estimation.backlash.calibration import BacklashCalibration
from agent.estimation.backlash.period import estimate_period
from agent.estimation.backlash.result import BacklashResult
from agent.estimation.backlash.signature import peak_amplitude, signature_basis, to_paper_params

Array = npt.NDArray[np.float64]

# Unit-cube coordinates searched by CMA-ES.
DIMENSIONS = ("ts", "log_tau", "freq", "duration", "td_ratio", "tf")
_TS, _TAU, _FREQ, _DUR, _TD, _TF = range(6)


@dataclass(frozen=True)
class BacklashFitSettings:
    resonance_hz: tuple[float, float] = (10.0, 200.0)
    decay_per_s: tuple[float, float] = (2.0, 400.0)
    period_tolerance: float = 0.02  # metadata vs signal mismatch that is reported
    # Paper 000 sets Td = Tf / 2; a positive value searches Td / Tf in 0.5 +- this instead
    # (a joint whose load friction shifts the second gap closure).
    half_turn_tolerance: float = 0.0
    harmonics: int = 3  # load-turn harmonics projected out with the offset
    seed: int = 1
    max_restarts: int = 2
    max_evaluations: int = 40_000

    def __post_init__(self) -> None:
        lo, hi = self.resonance_hz
        if not 0 < lo < hi:
            raise ValueError(f"resonance_hz must be 0 < low < high, got {self.resonance_hz}")
        lo, hi = self.decay_per_s
        if not 0 < lo < hi:
            raise ValueError(f"decay_per_s must be 0 < low < high, got {self.decay_per_s}")


@dataclass(frozen=True)
class _Problem:
    """Everything fixed during one fit: data, nuisance basis, bounds of the unit cube."""

    t: Array
    r_proj: Array  # residual with the nuisance subspace removed
    q: Array  # orthonormal nuisance basis (N, p)
    tf_center: float
    tf_band: float
    freq_hz: tuple[float, float]
    log_tau: tuple[float, float]
    duration_s: tuple[float, float]
    td_band: float
    active: tuple[int, ...]  # coordinates CMA-ES searches; the others stay at the centre 0.5

    def full(self, x_active: Array) -> Array:
        x_active = np.atleast_2d(x_active)
        x = np.full((x_active.shape[0], len(DIMENSIONS)), 0.5)
        x[:, self.active] = x_active
        return x

    def decode(self, x: Array) -> tuple[Array, Array, Array, Array, Array, Array]:
        x = np.atleast_2d(x)
        tf = self.tf_center * (1.0 + self.tf_band * (2.0 * x[:, _TF] - 1.0))
        ts = np.mod(x[:, _TS], 1.0) * tf
        tau = np.exp(self.log_tau[0] + x[:, _TAU] * (self.log_tau[1] - self.log_tau[0]))
        freq = self.freq_hz[0] + x[:, _FREQ] * (self.freq_hz[1] - self.freq_hz[0])
        dur = self.duration_s[0] + x[:, _DUR] * (self.duration_s[1] - self.duration_s[0])
        td = tf * (0.5 + self.td_band * (2.0 * x[:, _TD] - 1.0))
        return ts, tau, 2.0 * math.pi * freq, dur, td, tf

    def solve(self, x: Array) -> tuple[Array, Array, Array]:
        """RMSE and the closed-form sine/cosine amplitudes of each candidate row of x."""
        ts, tau, omega, dur, td, tf = self.decode(x)
        s, c = signature_basis(self.t, ts, tau, omega, dur, td, tf)
        s -= (s @ self.q) @ self.q.T
        c -= (c @ self.q) @ self.q.T
        g11 = np.einsum("ij,ij->i", s, s)
        g12 = np.einsum("ij,ij->i", s, c)
        g22 = np.einsum("ij,ij->i", c, c)
        b1 = s @ self.r_proj
        b2 = c @ self.r_proj
        det = g11 * g22 - g12 * g12
        ok = det > 1e-12 * np.maximum(g11 * g22, 1e-300)
        safe = np.where(ok, det, 1.0)
        a_sin = np.where(ok, (g22 * b1 - g12 * b2) / safe, 0.0)
        b_cos = np.where(ok, (g11 * b2 - g12 * b1) / safe, 0.0)
        sse = float(self.r_proj @ self.r_proj) - (a_sin * b1 + b_cos * b2)
        rmse = np.sqrt(np.maximum(sse, 0.0) / self.t.size)
        return rmse, a_sin, b_cos

    def model(self, x: Array, a_sin: float, b_cos: float) -> Array:
        """The fitted signature itself (not projected)."""
        ts, tau, omega, dur, td, tf = self.decode(x)
        s, c = signature_basis(self.t, ts, tau, omega, dur, td, tf)
        return np.asarray(a_sin * s[0] + b_cos * c[0])

    def project(self, y: Array) -> Array:
        """y without its offset and load-turn harmonics, as the fit compares it."""
        rest: Array = y - self.q @ (self.q.T @ y)
        return rest


def residual_from_capture(capture: Capture) -> tuple[Array, float, list[str]]:
    """r(t) = v(t) - v_t (eq. 11); v_t from the metadata, else the median speed (with a warning)."""
    v = motor_speed_rad_s(capture)
    warnings: list[str] = []
    v_t = capture.meta.commanded_speed_rad_s
    if v_t is None:
        v_t = float(np.median(v))
        warnings.append("commanded speed not given: the median measured speed stands in for it")
    return v - v_t, float(v_t), warnings


def fit_backlash(
    capture: Capture,
    settings: BacklashFitSettings | None = None,
    calibration: BacklashCalibration | None = None,
) -> BacklashResult:
    """Fit the backlash signature to a constant-speed capture; raises EstimationError."""
    settings = settings or BacklashFitSettings()
    residual, _, warnings = residual_from_capture(capture)
    return fit_backlash_residual(
        capture.time_s,
        residual,
        capture.meta.load_turn_period_s,
        settings,
        calibration=calibration,
        source=capture.source,
        warnings=warnings,
    )


def fit_backlash_residual(
    time_s: Array,
    residual_rad_s: Array,
    period_metadata_s: float | None,
    settings: BacklashFitSettings,
    *,
    calibration: BacklashCalibration | None = None,
    source: str = "<capture>",
    warnings: list[str] | None = None,
) -> BacklashResult:
    started = time.perf_counter()
    notes = list(warnings or [])
    t = np.asarray(time_s, dtype=np.float64)
    r = np.asarray(residual_rad_s, dtype=np.float64)
    if t.size < 16 or r.shape != t.shape:
        raise EstimationError(f"{source}: need at least 16 samples of time and speed")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(r))):
        raise EstimationError(f"{source}: the capture holds NaN or infinite samples")
    if np.any(np.diff(t) <= 0):
        raise EstimationError(f"{source}: time is not strictly increasing")
    spread = float(np.ptp(r))
    if spread <= 1e-9 * max(1.0, float(np.max(np.abs(r)))):
        raise EstimationError(f"{source}: the speed signal is constant: there is nothing to fit")
    dt = float(np.median(np.diff(t)))
    duration = float(t[-1] - t[0])

    tf_center, tf_est, mismatch, tf_band = _load_turn_period(
        r, dt, duration, period_metadata_s, settings, source, notes
    )
    # The commanded motion defines how many turns were captured; the signal only when it is all
    # there is. The tolerance absorbs rounding of a capture of exactly two turns.
    turns = duration / (period_metadata_s or tf_center)
    if turns < 2.0 - 1e-6:
        raise EstimationError(
            f"{source}: the capture covers {turns:.2f} load turns "
            f"(T_f = {tf_center:.4g} s); at least 2 are needed"
        )
    nyquist = 0.5 / dt
    f_lo, f_hi = settings.resonance_hz
    if f_hi > 0.9 * nyquist:
        f_hi = 0.9 * nyquist
        notes.append(f"resonance band capped at {f_hi:.1f} Hz by the sample rate")
        if f_hi <= f_lo:
            raise EstimationError(
                f"{source}: sample rate {1 / dt:.1f} Hz is too low for the resonance band "
                f"{settings.resonance_hz[0]:g}-{settings.resonance_hz[1]:g} Hz"
            )

    nuisance_basis = _nuisance_basis(t, tf_center, settings.harmonics)
    q, _ = np.linalg.qr(nuisance_basis)
    r_proj = r - q @ (q.T @ r)
    problem = _Problem(
        t=t,
        r_proj=r_proj,
        q=q,
        tf_center=tf_center,
        tf_band=tf_band,
        freq_hz=(f_lo, f_hi),
        log_tau=(math.log(settings.decay_per_s[0]), math.log(settings.decay_per_s[1])),
        duration_s=(
            min(2.0 / f_hi, 0.2 * tf_center),
            0.5 * tf_center * (1 - settings.half_turn_tolerance),
        ),
        td_band=settings.half_turn_tolerance,
        active=tuple(
            i
            for i in range(len(DIMENSIONS))
            if not ((i == _TD and settings.half_turn_tolerance == 0) or (i == _TF and tf_band == 0))
        ),
    )
    search = _search(problem, settings)
    rmse_arr, a_arr, b_arr = problem.solve(search.x[None, :])
    a_sin, b_cos = float(a_arr[0]), float(b_arr[0])
    signature = problem.model(search.x, a_sin, b_cos)
    # The offset and harmonics of the joint least-squares fit (signature and nuisance together).
    nuisance_coef, *_ = np.linalg.lstsq(nuisance_basis, r - signature, rcond=None)
    ts, tau, omega, dur, td, tf = (float(v[0]) for v in problem.decode(search.x))
    # (ts, phase, Td) and (ts + Td, phase + pi, Tf - Td) are the same curve: report the one
    # whose first oscillation starts earlier in the turn, so equal fits print equal numbers.
    if ts + td >= tf and (ts + td) % tf < ts:
        ts, td, a_sin, b_cos = (ts + td) % tf, tf - td, -a_sin, -b_cos
    paper = to_paper_params(a_sin, b_cos, ts, tau, omega, dur, td, tf, float(t[0]), float(t[-1]))
    amplitude = peak_amplitude(a_sin, b_cos, tau, omega, dur)
    params = paper.to_dict()
    params["resonance_hz"] = omega / (2.0 * math.pi)
    params["offset_rad_s"] = float(nuisance_coef[0])
    for k in range(settings.harmonics):
        params[f"harmonic{k + 1}_rad_s"] = float(
            math.hypot(nuisance_coef[1 + 2 * k], nuisance_coef[2 + 2 * k])
        )
    fitted = problem.project(signature)
    backlash = None
    if calibration is not None:
        backlash = calibration.backlash_rad(amplitude)
        if not calibration.covers(amplitude):
            notes.append(
                f"amplitude {amplitude:.4g} rad/s lies outside the calibrated range "
                f"{calibration.amplitude_range_rad_s[0]:.4g}-{calibration.amplitude_range_rad_s[1]:.4g}"
            )
    for name, (lo, hi), value in (
        ("resonance", problem.freq_hz, omega / (2 * math.pi)),
        ("decay rate", settings.decay_per_s, tau),
    ):
        if min(value - lo, hi - value) < 1e-3 * (hi - lo):
            notes.append(f"{name} {value:.4g} sits on its search bound [{lo:g}, {hi:g}]")
    return BacklashResult(
        amplitude_rad_s=amplitude,
        backlash_rad=backlash,
        rmse_rad_s=float(rmse_arr[0]),
        residual_rms_rad_s=float(np.sqrt(np.mean(r_proj**2))),
        params=params,
        evaluations=search.evaluations,
        restarts=search.restarts,
        converged=search.converged,
        stop_reason=search.stop_reason,
        fit_seconds=time.perf_counter() - started,
        seed=settings.seed,
        period_metadata_s=period_metadata_s,
        period_estimated_s=tf_est,
        period_mismatch=mismatch,
        warnings=tuple(notes),
        time_s=t,
        residual_rad_s=r_proj,
        fitted_rad_s=fitted,
    )


def _load_turn_period(
    r: Array,
    dt: float,
    duration: float,
    meta_s: float | None,
    settings: BacklashFitSettings,
    source: str,
    notes: list[str],
) -> tuple[float, float | None, float | None, float]:
    """Centre and relative half-width of the T_f search band, plus what the signal says."""
    if meta_s is not None and meta_s > 0:
        est = None
        if duration >= 1.6 * meta_s:
            est = estimate_period(r, dt, 0.5 * meta_s, min(1.5 * meta_s, 0.8 * duration))
        if est is None:
            return meta_s, None, None, 0.0
        mismatch = (est - meta_s) / meta_s
        # Over fewer than 3 turns the autocorrelation peak is too weak to overrule the
        # commanded motion: the mismatch is reported, the metadata kept.
        if abs(mismatch) > settings.period_tolerance and duration < 3.0 * meta_s:
            notes.append(
                f"load-turn period from speed and gear ratio is {meta_s:.4g} s but the signal "
                f"seems to repeat every {est:.4g} s ({100 * mismatch:+.1f} %); too few turns to "
                "tell, the commanded period is kept"
            )
            return meta_s, est, mismatch, 0.0
        if abs(mismatch) > settings.period_tolerance:
            notes.append(
                f"load-turn period from speed and gear ratio is {meta_s:.4g} s but the signal "
                f"repeats every {est:.4g} s ({100 * mismatch:+.1f} %): the signal's period is used"
            )
            return est, est, mismatch, 0.005
        # Commanded speed and gear ratio fix T_f exactly; the signal only checks them.
        return meta_s, est, mismatch, 0.0
    est = estimate_period(r, dt)
    if est is None:
        raise EstimationError(
            f"{source}: cannot find the load-turn period in the signal; "
            "give the commanded speed and the gear ratio"
        )
    notes.append(f"load-turn period not given: {est:.4g} s estimated from the signal")
    return est, est, None, 0.005


def _nuisance_basis(t: Array, tf: float, harmonics: int) -> Array:
    """Offset and the first load-turn harmonics: what the servo loop leaves of gravity."""
    cols = [np.ones_like(t)]
    w = 2.0 * math.pi / tf
    for k in range(1, harmonics + 1):
        cols += [np.cos(k * w * t), np.sin(k * w * t)]
    return np.column_stack(cols)


@dataclass
class _SearchOutcome:
    x: Array
    rmse: float
    evaluations: int = 0
    restarts: int = 0
    converged: bool = False
    stop_reason: str = ""
    history: list[float] = field(default_factory=list)


def _initial_point(problem: _Problem) -> Array:
    """Deterministic start: resonance from the spectrum, then a grid over start time and decay."""
    r = problem.r_proj
    dt = float(np.median(np.diff(problem.t)))
    spec = np.abs(np.fft.rfft(r * np.hanning(r.size)))
    freqs = np.fft.rfftfreq(r.size, dt)
    band = (freqs >= problem.freq_hz[0]) & (freqs <= problem.freq_hz[1])
    f_peak = float(freqs[band][np.argmax(spec[band])]) if np.any(band) else problem.freq_hz[0]
    x_freq = (f_peak - problem.freq_hz[0]) / (problem.freq_hz[1] - problem.freq_hz[0])
    n_ts, taus = 64, np.linspace(0.2, 0.8, 4)
    grid = np.full((n_ts * taus.size, len(DIMENSIONS)), 0.5)
    grid[:, _TS] = np.repeat(np.arange(n_ts) / n_ts, taus.size)
    grid[:, _TAU] = np.tile(taus, n_ts)
    grid[:, _FREQ] = x_freq
    grid[:, _DUR] = 0.8
    best_rows = []
    for chunk in np.array_split(grid, 4):
        rmse, _, _ = problem.solve(chunk)
        best_rows.append((float(rmse.min()), chunk[int(np.argmin(rmse))]))
    return np.array(min(best_rows, key=lambda p: p[0])[1])


# Initial standard deviations per coordinate (unit cube): a grid cell in start time, a fair
# share of the decay and duration ranges, a few spectral bins in frequency.
_STDS = np.array([1.0 / 64, 0.15, 0.05, 0.3, 0.3, 0.3])
# CMA-ES stops when the RMSE changes by less than this share of the residual's RMS, or the
# search distribution shrinks below this size in the unit cube.
_TOLS = (1e-5, 1e-6)
_CONVERGED_REASONS = {"tolfun", "tolfunhist", "tolx", "tolstagnation", "tolflatfitness"}


def _run_cma(
    problem: _Problem, x0: Array, stds: Array, popsize: int, seed: int, budget: int
) -> tuple[Array, float, int, str]:
    """One CMA-ES run in pycma's ask/tell loop over the active coordinates."""
    active = list(problem.active)
    lower = [-np.inf if i == _TS else 0.0 for i in active]  # start time is periodic
    upper = [np.inf if i == _TS else 1.0 for i in active]
    scale = float(np.sqrt(np.mean(problem.r_proj**2))) or 1.0
    opts = {
        "bounds": [lower, upper],
        "seed": seed,
        "popsize": popsize,
        "CMA_stds": list(stds[active]),
        "maxfevals": budget,
        "tolfun": _TOLS[0] * scale,
        "tolfunhist": 0.1 * _TOLS[0] * scale,
        "tolx": _TOLS[1],
        "verbose": -9,
        "verb_log": 0,
        "verb_disp": 0,
    }
    es = cma.CMAEvolutionStrategy(list(x0[active]), 1.0, opts)
    while not es.stop():
        xs = es.ask()
        rmse, _, _ = problem.solve(problem.full(np.asarray(xs)))
        es.tell(xs, rmse.tolist())
    best = problem.full(np.asarray(es.result.xbest, dtype=np.float64))[0]
    reason = ",".join(sorted(es.stop()))
    return best, float(es.result.fbest), int(es.result.evaluations), reason


def _search(problem: _Problem, settings: BacklashFitSettings) -> _SearchOutcome:
    """Scan, CMA-ES, then IPOP restarts (doubled population, wide spread from the best point)
    until one lands on the same optimum (RMSE within 0.1 %), keeping the best seen."""
    rng = np.random.default_rng(settings.seed)
    base_pop = 4 + int(3 * math.log(len(problem.active)))
    budget = settings.max_evaluations
    x, f, evals, reason = _run_cma(
        problem, _initial_point(problem), _STDS, base_pop, int(rng.integers(1, 2**31)), budget
    )
    out = _SearchOutcome(x=x, rmse=f, evaluations=evals, stop_reason=reason)
    out.converged = bool(set(reason.split(",")) & _CONVERGED_REASONS)
    out.history.append(f)
    popsize = base_pop
    agreed = settings.max_restarts == 0
    for _ in range(settings.max_restarts):
        if out.evaluations >= budget:
            break
        popsize *= 2
        x, f, evals, reason = _run_cma(
            problem,
            out.x,
            np.minimum(_STDS * 8.0, 0.3),
            popsize,
            int(rng.integers(1, 2**31)),
            budget - out.evaluations,
        )
        out.evaluations += evals
        out.restarts += 1
        out.history.append(f)
        same = abs(f - out.rmse) <= 1e-3 * out.rmse
        if f < out.rmse:
            out.x, out.rmse, out.stop_reason = x, f, reason
            out.converged = bool(set(reason.split(",")) & _CONVERGED_REASONS)
        if same:
            agreed = True
            break
    if not agreed:
        out.stop_reason += ";restarts did not confirm the optimum"
    return out
