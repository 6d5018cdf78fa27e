"""The backlash estimate's intervals put to the test (issue 15, backlash points 1-4): the spread
of A over noise realisations against the Cramer-Rao bound of the fitted model, the fit time with
and without intervals, the calibration on joints that are not its model, 95 % coverage under
realistic mismatch, and motor-revolution disturbances. Run by bench.bench_backlash.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from agent.config.model import ControllerSettings, JointSettings
from agent.estimation.backlash.calibration import Z90, BacklashCalibration
from agent.estimation.backlash.fit import BacklashFitSettings, fit_backlash, fit_backlash_residual
from agent.estimation.backlash.result import BacklashResult
from agent.kinds.backlash.calibration import (
    calibration_from_points,
    fit_settings,
    mismatch_jobs,
    mismatch_point,
    sweep_point,
    tolerance_ends,
)
from agent.kinds.backlash.kind import backlash_cycle
from drivers.base import BacklashCycle
from drivers.sim.backlash import simulate_backlash_capture

TRUE_RAD = 1.2e-3
MISMATCH_TEXT = "stiffness +-20 %, load inertia +-30 %, damping x/2..x2"


def load() -> str:
    """The machine's load while the figures were taken (they are timings too)."""
    return "load average " + " ".join(f"{v:.1f}" for v in os.getloadavg())


# -- Cramer-Rao --------------------------------------------------------------------------------


def _fitted_model(joint: JointSettings, cycle: BacklashCycle) -> tuple[np.ndarray, np.ndarray]:
    """Time base and the fitted model of a simulated capture (signature plus nuisance terms):
    the truth of the Cramer-Rao experiment is the fitted model itself."""
    from agent.capture.model import motor_speed_rad_s

    capture = simulate_backlash_capture(joint, cycle, TRUE_RAD, noise_counts=1.0, seed=5)
    assert capture.meta.commanded_speed_rad_s is not None
    r = motor_speed_rad_s(capture) - capture.meta.commanded_speed_rad_s
    res = fit_backlash_residual(
        capture.time_s,
        r,
        capture.meta.load_turn_period_s,
        BacklashFitSettings(seed=1, max_restarts=4),
    )
    # r = nuisance + signature + e, and the fit's residual is e (nuisance projected out).
    return capture.time_s, r - (res.residual_rad_s - res.fitted_rad_s)


def _crb_run(args: tuple[np.ndarray, np.ndarray, float, float, int]) -> tuple[float, float, float]:
    t, model, tf, sigma, seed = args
    noise = np.random.default_rng(seed).normal(0.0, sigma, t.size)
    res = fit_backlash_residual(t, model + noise, tf, BacklashFitSettings(seed=seed % 1000 + 1))
    lo, hi = res.amplitude_interval_rad_s or (math.nan, math.nan)
    return res.amplitude_rad_s, lo, hi


def bench_cramer_rao(joint: JointSettings, cycle: BacklashCycle, runs: int) -> None:
    t, model = _fitted_model(joint, cycle)
    tf = 2 * math.pi * cycle.gear_ratio / cycle.motor_speed_rad_s
    truth = fit_backlash_residual(t, model, tf, BacklashFitSettings(seed=1)).amplitude_rad_s
    print(
        f"Cramer-Rao: the fitted model of a simulated capture (A = {truth:.4f} rad/s, "
        f"{t.size} samples) plus white Gaussian noise, {runs} realisations per level"
    )
    print(
        f"  {'sigma rad/s':>11s} {'CRB sd':>8s} {'spread sd':>9s} {'ratio':>6s} "
        f"{'mean interval sd':>16s} {'covered':>8s}"
    )
    for share in (0.05, 0.3):
        sigma = share * truth
        # The bound at the truth: sigma |v|, |v| from the white-noise term of a fit of the
        # truth with a whisper of noise (sd_white = noise RMS x |v|).
        whisper = fit_backlash_residual(
            t, model + np.random.default_rng(1).normal(0.0, 1e-4 * sigma, t.size), tf,
            BacklashFitSettings(seed=1),
        ).uncertainty["amplitude"]  # fmt: skip
        crb = sigma * whisper["sd_white_rad_s"] / whisper["noise_rms_rad_s"]
        jobs = [(t, model, tf, sigma, 7000 + k) for k in range(runs)]
        with ProcessPoolExecutor(max_workers=2) as pool:
            out = list(pool.map(_crb_run, jobs))
        amps = np.array([a for a, _, _ in out])
        spread = float(np.std(amps, ddof=1))
        covered = sum(1 for _, lo, hi in out if lo <= truth <= hi)
        mean_sd = statistics.fmean((hi - lo) / (2 * 1.96) for _, lo, hi in out)
        print(
            f"  {sigma:11.4f} {crb:8.4f} {spread:9.4f} {spread / crb:6.2f} {mean_sd:16.4f} "
            f"{covered:4d}/{runs}"
        )
    print("  aim: spread within 1.5x the bound; the intervals' sd near the spread")


# -- fit time ----------------------------------------------------------------------------------


def bench_fit_time(joint: JointSettings, cycle: BacklashCycle, seeds: int) -> None:
    capture = simulate_backlash_capture(joint, cycle, TRUE_RAD, noise_counts=1.0, seed=5)
    settings = fit_settings(joint)
    wall: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for seed in range(1, seeds + 1):  # interleaved: both see the same load
        for intervals in (False, True):
            started = time.process_time()
            r = fit_backlash(capture, replace(settings, seed=seed, intervals=intervals))
            cpu[intervals].append(time.process_time() - started)
            wall[intervals].append(r.fit_seconds)
    med = {k: statistics.median(v) for k, v in wall.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    verdict = "PASS" if med[True] <= 0.5 else "FAIL"
    print(
        f"fit time, {len(capture)}-sample capture, {seeds} seeds each ({load()}): median "
        f"{med[False]:.3f} s plain, {med[True]:.3f} s with intervals "
        f"({med[True] - med[False]:+.3f} s); CPU time {med_cpu[False]:.3f} s and "
        f"{med_cpu[True]:.3f} s; target <= 0.5 s with intervals: {verdict}"
    )


# -- calibration under mismatch ----------------------------------------------------------------


def _sweep(args: tuple[JointSettings, BacklashCycle, float]) -> tuple[float, float]:
    joint, cycle, delta = args
    return sweep_point(joint, cycle, delta, 1.0, 101)


def _mismatch(args: tuple[JointSettings, BacklashCycle, tuple[str | None, float, float]]) -> float:
    joint, cycle, job = args
    return mismatch_point(joint, cycle, job)


def calibrate(joint: JointSettings, cycle: BacklashCycle) -> BacklashCalibration:
    """The nominal joint's calibration with its model-mismatch sweep, as the daemon makes it."""
    started = time.perf_counter()
    jobs = mismatch_jobs(joint)
    with ProcessPoolExecutor(max_workers=2) as pool:
        points = list(
            pool.map(_sweep, [(joint, cycle, d) for d in joint.calibration.sweep_backlash_rad])
        )
        amps = list(pool.map(_mismatch, [(joint, cycle, job) for job in jobs]))
    cal = calibration_from_points(points, None, jobs, amps)
    print(
        f"calibration with its model term: {len(points)} sweep runs + {len(jobs)} mismatch runs "
        f"({MISMATCH_TEXT}) in {time.perf_counter() - started:.1f} s"
    )
    return cal


def _perturbed(args: tuple[JointSettings, BacklashCycle, dict, float, int, str]) -> BacklashResult:  # type: ignore[type-arg]
    joint, cycle, cal_dict, delta, seed, what = args
    cal = BacklashCalibration.from_dict(cal_dict)
    name, _, factor = what.partition("=")
    model = joint.model
    if name:
        model = replace(model, **{name: getattr(model, name) * float(factor)})
    capture = simulate_backlash_capture(
        replace(joint, model=model), cycle, delta, noise_counts=1.0, seed=seed
    )
    return fit_backlash(capture, fit_settings(joint), cal)


def bench_mismatch(
    joint: JointSettings, cycle: BacklashCycle, cal: BacklashCalibration, deltas: tuple[float, ...]
) -> None:
    cases = [""] + [
        f"{name}={f:g}"
        for name, ends in tolerance_ends(joint.calibration.model_tolerance)
        for f in ends
    ]
    jobs = [(joint, cycle, cal.to_dict(), d, 31, c) for d in deltas for c in cases]
    with ProcessPoolExecutor(max_workers=2) as pool:
        out = list(pool.map(_perturbed, jobs))
    print(
        "calibration under mismatch: calibrated on the nominal joint, tested on joints at the "
        "ends of the tolerances (seed 31)"
    )
    print(
        f"  {'joint':28s} {'true mrad':>9s} {'est mrad':>8s} {'err %':>6s} {'95 % interval':>15s}"
    )
    covered = 0
    worst = 0.0
    for (_, _, _, d, _, c), r in zip(jobs, out, strict=True):
        est = r.backlash_rad or 0.0
        lo, hi = r.backlash_interval_rad or (math.nan, math.nan)
        ok = lo <= d <= hi
        covered += ok
        err = 100 * (est - d) / d
        worst = max(worst, abs(err))
        print(
            f"  {c or 'nominal':28s} {d * 1e3:9.3f} {est * 1e3:8.3f} {err:+6.1f} "
            f"{lo * 1e3:7.3f}-{hi * 1e3:.3f} {'covered' if ok else 'NOT covered'}"
        )
    print(f"  worst error {worst:.1f} %; the interval covers the truth in {covered}/{len(jobs)}")


# -- coverage ----------------------------------------------------------------------------------


def _trial(
    args: tuple[JointSettings, BacklashCycle, dict, int, float],  # type: ignore[type-arg]
) -> tuple[float, float, float, float, bool]:
    """One joint drawn from the realistic mismatch: model parameters within their tolerances
    as the calibration reads them (normal, the ends at the 5/95 % quantiles) times `spread`
    (1: as told; 1.5, 2: the tolerances stated too small), any backlash, more encoder noise
    than the calibration saw, an eccentric encoder and cogging."""
    joint, cycle, cal_dict, k, spread = args
    cal = BacklashCalibration.from_dict(cal_dict)
    rng = np.random.default_rng(40_000 + k)
    m = joint.model
    z = spread * rng.standard_normal(3) / Z90  # in units of each tolerance's end
    t = joint.calibration.model_tolerance
    model = replace(
        m,
        stiffness_nm_rad=m.stiffness_nm_rad * max(0.2, 1 + t.stiffness_rel * z[0]),
        load_inertia_kg_m2=m.load_inertia_kg_m2 * max(0.2, 1 + t.load_inertia_rel * z[1]),
        damping_nm_s_rad=m.damping_nm_s_rad * t.damping_factor ** z[2],
        encoder_eccentricity_rad=rng.uniform(0.0, 2e-4),
        cogging_torque_nm=rng.uniform(0.0, 0.05),
    )
    delta = float(rng.uniform(2e-4, 2.1e-3))
    capture = simulate_backlash_capture(
        replace(joint, model=model), cycle, delta,
        noise_counts=float(rng.uniform(1.0, 3.0)), seed=50_000 + k,
    )  # fmt: skip
    r = fit_backlash(capture, replace(fit_settings(joint), seed=k % 97 + 1), cal)
    lo, hi = r.backlash_interval_rad or (math.nan, math.nan)
    return delta, r.backlash_rad or 0.0, lo, hi, r.ambiguous


def bench_coverage(
    joint: JointSettings, cycle: BacklashCycle, cal: BacklashCalibration, trials: int, quick: bool
) -> None:
    for spread in (1.0, 1.5, 2.0):
        _coverage(joint, cycle, cal, trials, quick, spread)


def _coverage(
    joint: JointSettings,
    cycle: BacklashCycle,
    cal: BacklashCalibration,
    trials: int,
    quick: bool,
    spread: float,
) -> None:
    jobs = [(joint, cycle, cal.to_dict(), k, spread) for k in range(trials)]
    with ProcessPoolExecutor(max_workers=2) as pool:
        out = list(pool.map(_trial, jobs))
    hits = [lo <= d <= hi for d, _, lo, hi, _ in out]
    share = 100 * sum(hits) / trials
    goal = (92.0, 98.0) if spread == 1.0 else (90.0, 100.0)
    verdict = "PASS" if goal[0] <= share <= goal[1] else "FAIL"
    if quick:
        verdict += " (quick: too few trials to judge; the acceptance is the full run's 200+)"
    told = "as the calibration states them" if spread == 1.0 else (
        f"{spread:g}x WIDER than the calibration states (open world; goal >= 90 %)"
    )  # fmt: skip
    print(
        f"coverage of the 95 % backlash interval, joints drawn {told} ({MISMATCH_TEXT} as "
        "90 % ranges, backlash 0.2-2.1 mrad, encoder noise 1-3 counts, eccentricity <= 0.2 "
        f"mrad, cogging <= 0.05 N m): {sum(hits)}/{trials} = {share:.1f} %: {verdict}"
    )
    for lo_d, hi_d in ((2e-4, 6e-4), (6e-4, 1.2e-3), (1.2e-3, 2.1e-3)):
        part = [(h, o) for h, o in zip(hits, out, strict=True) if lo_d <= o[0] < hi_d]
        if part:
            width = statistics.median(100 * (o[3] - o[2]) / 2 / o[0] for _, o in part)
            print(
                f"  true {lo_d * 1e3:.1f}-{hi_d * 1e3:.1f} mrad: {sum(h for h, _ in part)}/"
                f"{len(part)} covered, median half-width {width:.0f} % of the truth"
            )
    print(f"  ambiguous fits: {sum(1 for o in out if o[4])}/{trials}")


# -- motor-revolution disturbances -------------------------------------------------------------


def bench_disturbances(joint: JointSettings) -> None:
    """Eccentricity and cogging on a joint of odd gear ratio: its motor harmonics fall on the
    signature's own (odd) load-turn harmonics."""
    odd = replace(joint, gear_ratio=41.0)
    cycle = backlash_cycle(ControllerSettings(name="bench", driver="sim", joints=(odd,)), odd)
    disturbed = replace(
        odd, model=replace(odd.model, encoder_eccentricity_rad=3e-4, cogging_torque_nm=0.1)
    )
    settings = fit_settings(odd)
    rows = []
    for label, j, harmonics in (
        ("no disturbance", odd, 12),
        ("eccentricity + cogging, not removed", disturbed, 0),
        ("eccentricity + cogging, removed", disturbed, 12),
    ):
        capture = simulate_backlash_capture(j, cycle, 3e-4, noise_counts=1.0, seed=5)
        r = fit_backlash(capture, replace(settings, motor_harmonics=harmonics))
        rows.append((label, r))
    print(
        "motor-revolution disturbances (gear ratio 41, 100 rev/s, 500 Hz, backlash 0.3 mrad; "
        "eccentricity 0.3 mrad, cogging 0.1 N m at 6 per revolution):"
    )
    ref = rows[0][1].amplitude_rad_s
    for label, r in rows:
        lo, hi = r.amplitude_interval_rad_s or (math.nan, math.nan)
        print(
            f"  {label:38s} A {r.amplitude_rad_s:.4f} rad/s ({lo:.4f}-{hi:.4f}), "
            f"{100 * (r.amplitude_rad_s / ref - 1):+.1f} %, resonance "
            f"{r.params['resonance_hz']:.1f} Hz"
        )
    print(
        "  what removal leaves is the disturbances' effect on the motion itself (the servo "
        "acts on the eccentric reading, cogging shakes the gear mesh): physics, not a fit error"
    )
