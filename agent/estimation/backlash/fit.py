"""Backlash virtual sensor (Giovannitti et al. 2022): fit the signature h(t) to the motor-speed
residual.

r(t) = v(t) - v_t (eq. 11) is fitted by h(t) (eqs. 1-7) through CMA-ES in pycma's ask/tell loop.
What the implementation adds to the paper, and why:

- A and the oscillation phase are linear: solved in closed form for every candidate, so CMA-ES
  searches 6 nonlinear dimensions instead of 8 and A has no sign ambiguity.
- The servo loop leaves gravity's once-per-turn ripple on the speed; an offset and the first
  harmonics of the load-turn frequency are projected out of r(t) and of every candidate (they are
  reported as nuisance terms). The signature's own content there is small: it rings at the
  joint resonance, tens of harmonics higher.
- Encoder eccentricity and cogging repeat every motor revolution: at 100 rev/s sampled at
  500 Hz their harmonics alias onto 100 and 200 Hz, inside the resonance search band. With the
  motor speed known they are projected out the same way (the first `motor_harmonics` harmonics,
  at the frequencies they alias to, each frequency once).
- Every estimate comes with a 95 % interval (agent.estimation.backlash.uncertainty for A,
  BacklashCalibration.interval for the backlash), and a fit whose restarts found equally good
  optima with different amplitudes is flagged ambiguous instead of printing one of them.
- The search starts from a deterministic scan (resonance from the spectrum, start time and decay
  on a grid), then CMA-ES refines and IPOP restarts from random points confirm the optimum.
- A whole population is evaluated as one array operation.
- A capture longer than the fit may hold in memory is cut to its first samples, and the
  result says so (agent.estimation.backlash.samples).
The search itself (the unit cube, the scan, CMA-ES and its restarts) is
agent.estimation.backlash.search's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.capture.model import Capture, motor_speed_rad_s
from agent.errors import EstimationError
from agent.estimation.backlash import samples as fit_samples
from agent.estimation.backlash.calibration import BacklashCalibration
from agent.estimation.backlash.period import estimate_period
from agent.estimation.backlash.result import BacklashResult
from agent.estimation.backlash.samples import FIT_MAX_SAMPLES, plan_fit_samples, reduce_to_plan
from agent.estimation.backlash.search import DIMENSIONS, TD, TF, SignatureProblem, search
from agent.estimation.backlash.signature import peak_amplitude, to_paper_params
from agent.estimation.backlash.uncertainty import amplitude_uncertainty

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BacklashFitSettings:
    resonance_hz: tuple[float, float] = (10.0, 200.0)
    decay_per_s: tuple[float, float] = (2.0, 400.0)
    period_tolerance: float = 0.02  # metadata vs signal mismatch that is reported
    # Giovannitti et al. 2022 set Td = Tf / 2; a positive value searches Td / Tf in 0.5 +- this
    # instead (a joint whose load friction shifts the second gap closure).
    half_turn_tolerance: float = 0.0
    harmonics: int = 3  # load-turn harmonics projected out with the offset
    # Motor-revolution harmonics projected out when the motor speed is known (eccentricity is
    # 1-2 per revolution, cogging a few more; 0 turns it off).
    motor_harmonics: int = 12
    intervals: bool = True  # the 95 % intervals (the plain fit without them, for benchmarks)
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
    captured = len(capture)
    if captured > fit_samples.FIT_MAX_SAMPLES:
        # Only what is fitted becomes a speed: the full-length temporaries of a long capture's
        # speed were most of its peak memory.
        n = fit_samples.FIT_MAX_SAMPLES
        capture = Capture(
            capture.time_s[:n],
            {name: values[:n] for name, values in capture.channels.items()},
            capture.meta,
            capture.source,
        )
    residual, speed_rad_s, warnings = residual_from_capture(capture)
    return fit_backlash_residual(
        capture.time_s,
        residual,
        capture.meta.load_turn_period_s,
        settings,
        calibration=calibration,
        source=capture.source,
        warnings=warnings,
        # Eccentricity and cogging follow the motor's actual turning: the commanded speed, or
        # the measured one standing in for it.
        motor_turn_period_s=2.0 * math.pi / abs(speed_rad_s) if speed_rad_s else None,
        captured_samples=captured,
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
    motor_turn_period_s: float | None = None,
    captured_samples: int | None = None,
) -> BacklashResult:
    """`captured_samples`: how long the capture was, when the caller passes only its first
    samples (fit_backlash does, past the fit's budget)."""
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
    # A long capture is cut to what the fit may hold in memory.
    plan = plan_fit_samples(max(t.size, captured_samples or 0), 1.0 / dt)
    t, r = reduce_to_plan(t, r, plan)
    duration = float(t[-1] - t[0])

    tf_center, tf_est, mismatch, tf_band = _load_turn_period(
        r, dt, duration, period_metadata_s, settings, source, notes
    )
    notes.extend(plan.notes(period_metadata_s or tf_center))
    # The commanded motion defines how many turns were captured; the signal only when it is all
    # there is. The tolerance absorbs rounding of a capture of exactly two turns.
    turns = duration / (period_metadata_s or tf_center)
    if turns < 2.0 - 1e-6:
        covered = "the fitted part of the capture" if plan.cut else "the capture"
        raise EstimationError(
            f"{source}: {covered} covers {turns:.2f} load turns "
            f"(T_f = {tf_center:.4g} s); at least 2 are needed"
            + (f" (the fit holds at most {FIT_MAX_SAMPLES:,} samples)" if plan.cut else "")
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

    nuisance_basis, n_motor = _nuisance_basis(
        t, tf_center, settings.harmonics, motor_turn_period_s, settings.motor_harmonics
    )
    # Aliased harmonics can coincide: an orthonormal basis of what the columns span.
    u_svd, sv, _ = np.linalg.svd(nuisance_basis, full_matrices=False)
    q = u_svd[:, sv > 1e-9 * sv[0]]
    del u_svd  # the mask copied what q needs; on a long fit this is tens of MB
    r_proj = r - q @ (q.T @ r)
    problem = SignatureProblem(
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
            if not ((i == TD and settings.half_turn_tolerance == 0) or (i == TF and tf_band == 0))
        ),
    )
    found = search(
        problem,
        seed=settings.seed,
        max_restarts=settings.max_restarts,
        max_evaluations=settings.max_evaluations,
    )
    rmse_arr, a_arr, b_arr = problem.solve(found.x[None, :])
    a_sin, b_cos = float(a_arr[0]), float(b_arr[0])
    signature = problem.model(found.x, a_sin, b_cos)
    # The offset and harmonics of the joint least-squares fit (signature and nuisance together).
    nuisance_coef, *_ = np.linalg.lstsq(nuisance_basis, r - signature, rcond=None)
    ts, tau, omega, dur, td, tf = (float(v[0]) for v in problem.decode(found.x))
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
    if n_motor:
        motor = nuisance_basis[:, -n_motor:] @ nuisance_coef[-n_motor:]
        params["motor_harmonics_rms_rad_s"] = float(np.sqrt(np.mean(motor**2)))
    fitted = problem.project(signature)
    backlash = None
    intervals: dict[str, Any] = {}
    if settings.intervals:
        intervals = _intervals(problem, found.runs, found.x, a_sin, b_cos, amplitude,
                               r_proj - fitted, calibration, notes)  # fmt: skip
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
        evaluations=found.evaluations,
        restarts=found.restarts,
        converged=found.converged,
        stop_reason=found.stop_reason,
        fit_seconds=time.perf_counter() - started,
        seed=settings.seed,
        period_metadata_s=period_metadata_s,
        period_estimated_s=tf_est,
        period_mismatch=mismatch,
        warnings=tuple(notes),
        **intervals,
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


def _intervals(
    problem: SignatureProblem,
    runs: list[tuple[Array, float]],
    x: Array,
    a_sin: float,
    b_cos: float,
    amplitude: float,
    residual: Array,
    calibration: BacklashCalibration | None,
    notes: list[str],
) -> dict[str, Any]:
    """The interval fields of the result (see BacklashResult)."""
    optima = []
    for x_run, rmse_run in runs:
        _, a_run, b_run = problem.solve(x_run[None, :])
        _, tau_run, om_run, dur_run, _, _ = (float(v[0]) for v in problem.decode(x_run))
        optima.append(
            (rmse_run, peak_amplitude(float(a_run[0]), float(b_run[0]), tau_run, om_run, dur_run))
        )
    unc = amplitude_uncertainty(problem, x, a_sin, b_cos, amplitude, residual, optima)
    if unc.note:
        notes.append(unc.note)
    fields: dict[str, Any] = {
        "amplitude_sd_rad_s": unc.sd_rad_s,
        "amplitude_low_rad_s": unc.low_rad_s,
        "amplitude_high_rad_s": unc.high_rad_s,
        "ambiguous": unc.ambiguous,
        "interval_confidence": unc.confidence,
    }
    details: dict[str, Any] = {"amplitude": unc.to_dict()}
    if calibration is not None:
        # An ambiguous fit's backlash is any of its equally good optima's.
        amps = unc.tied_rad_s if unc.ambiguous else (amplitude,)
        band = calibration.interval(amps, unc.sd_rad_s, unc.confidence)
        fields["backlash_low_rad"] = band.low_rad
        fields["backlash_high_rad"] = band.high_rad
        details["backlash"] = band.to_dict()
        if band.model_half_width_rad is None:
            notes.append(
                "backlash interval without a model-mismatch term: the calibration "
                f"({calibration.source}) says nothing of how far the joint may be from it"
            )
    fields["uncertainty"] = details
    return fields


def _nuisance_basis(
    t: Array, tf: float, harmonics: int, motor_period_s: float | None, motor_harmonics: int
) -> tuple[Array, int]:
    """Offset and the first load-turn harmonics (what the servo loop leaves of gravity), then
    the motor-revolution harmonics at the frequencies they alias to; with the number of the
    latter columns (they come last)."""
    cols = [np.ones_like(t)]
    w = 2.0 * math.pi / tf
    for k in range(1, harmonics + 1):
        cols += [np.cos(k * w * t), np.sin(k * w * t)]
    n_motor = 0
    if motor_period_s is not None and motor_period_s > 0 and motor_harmonics > 0:
        fs = 1.0 / float(np.median(np.diff(t)))
        # Two frequencies closer than a quarter of the capture's resolution are one column.
        tol = 0.25 / max(float(t[-1] - t[0]), 1e-12)
        taken = [0.0] + [k / tf for k in range(1, harmonics + 1)]
        for k in range(1, motor_harmonics + 1):
            alias = (k / motor_period_s) % fs
            alias = min(alias, fs - alias)
            if any(abs(alias - f) < tol for f in taken):
                continue
            taken.append(alias)
            cols += [np.cos(2 * math.pi * alias * t), np.sin(2 * math.pi * alias * t)]
            n_motor += 2
    return np.column_stack(cols), n_motor
