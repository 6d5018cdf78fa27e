"""delta = f(A) from a simulation sweep of the configured joint (Giovannitti et al. 2022,
figs. 11-12, eq. 10).

The joint's model is simulated through the same test cycle at each backlash of the sweep, the
signature is fitted exactly as on a real capture, and the monotone cubic is fitted to the pairs.
Results are cached on disk by a hash of everything that shapes them.

The model term of the backlash interval comes from the same simulation: a real joint is not
exactly its configured model, so joints at the two ends of each tolerance of
`calibration.model_tolerance` (stiffness, load inertia, damping) are simulated at the smallest,
the middle and the largest backlash of the sweep, and what f(A) reads on them, against the
nominal joint at the same backlash, is kept with the calibration (ModelSensitivity). Those runs
are differences of two fits on captures of equal length, so they use MISMATCH_TURNS load turns
only: what a parameter does to A repeats every turn, and fewer turns cost less.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, replace
from pathlib import Path

from agent.atomic import atomic_write_text
from agent.config.model import JointSettings, ModelToleranceSettings
from agent.estimation.backlash.calibration import (
    BacklashCalibration,
    ModelSensitivity,
    fit_calibration,
)
from agent.estimation.backlash.fit import BacklashFitSettings, fit_backlash
from drivers.base import BacklashCycle
from drivers.sim.backlash import simulate_backlash_capture

CACHE_VERSION = 2  # 2: with the model-mismatch sensitivity
MISMATCH_TURNS = 4.0
# One run of the mismatch sweep: (model parameter or None for the nominal joint, factor on it,
# backlash in rad).
MismatchJob = tuple[str | None, float, float]


def fit_settings(joint: JointSettings) -> BacklashFitSettings:
    e = joint.estimator
    return BacklashFitSettings(
        resonance_hz=e.resonance_hz,
        decay_per_s=e.decay_per_s,
        period_tolerance=e.period_tolerance,
        seed=e.seed,
    )


def sweep_point(
    joint: JointSettings, cycle: BacklashCycle, delta_rad: float, noise_counts: float, seed: int
) -> tuple[float, float]:
    """(A, delta) of one simulated cycle: one unit of work for a process pool."""
    capture = simulate_backlash_capture(
        joint, cycle, delta_rad, noise_counts=noise_counts, seed=seed, machine="calibration"
    )
    return fit_backlash(capture, fit_settings(joint)).amplitude_rad_s, float(delta_rad)


def sweep_points(
    joint: JointSettings, cycle: BacklashCycle, *, noise_counts: float = 1.0, seed: int = 101
) -> list[tuple[float, float]]:
    """(A, delta) for every backlash of the joint's sweep, one after the other."""
    return [
        sweep_point(joint, cycle, delta, noise_counts, seed)
        for delta in joint.calibration.sweep_backlash_rad
    ]


def tolerance_ends(t: ModelToleranceSettings) -> list[tuple[str, tuple[float, float]]]:
    """The model parameters a calibration is checked against, with the factors at the two ends
    of their tolerance."""
    ends = []
    if t.stiffness_rel > 0:
        ends.append(("stiffness_nm_rad", (1.0 - t.stiffness_rel, 1.0 + t.stiffness_rel)))
    if t.load_inertia_rel > 0:
        ends.append(("load_inertia_kg_m2", (1.0 - t.load_inertia_rel, 1.0 + t.load_inertia_rel)))
    if t.damping_factor > 1:
        ends.append(("damping_nm_s_rad", (1.0 / t.damping_factor, t.damping_factor)))
    return ends


def mismatch_jobs(joint: JointSettings) -> list[MismatchJob]:
    """The runs of the mismatch sweep: at the smallest, the middle and the largest backlash of the
    sweep, the nominal joint and each tolerance's two ends (none without a tolerance)."""
    ends = tolerance_ends(joint.calibration.model_tolerance)
    sweep = sorted(d for d in joint.calibration.sweep_backlash_rad if d > 0)
    if not ends or not sweep:
        return []
    jobs: list[MismatchJob] = []
    # Three levels: what a parameter does to f(A) is not proportional to the backlash (a few
    # per cent of it more at the middle of the sweep than at its ends).
    for delta in sorted({sweep[0], sweep[len(sweep) // 2], sweep[-1]}):
        jobs.append((None, 1.0, delta))
        for name, (lo, hi) in ends:
            jobs += [(name, lo, delta), (name, hi, delta)]
    return jobs


def mismatch_point(
    joint: JointSettings,
    cycle: BacklashCycle,
    job: MismatchJob,
    noise_counts: float = 1.0,
    seed: int = 103,
) -> float:
    """A of one run of the mismatch sweep: one unit of work for a process pool."""
    name, factor, delta = job
    model = joint.model
    if name is not None:
        model = replace(model, **{name: getattr(model, name) * factor})
    turn_s = 2.0 * math.pi * cycle.gear_ratio / abs(cycle.motor_speed_rad_s)
    short = replace(cycle, duration_s=min(cycle.duration_s, MISMATCH_TURNS * turn_s))
    capture = simulate_backlash_capture(
        replace(joint, model=model),
        short,
        delta,
        noise_counts=noise_counts,
        seed=seed,
        machine="calibration",
    )
    return fit_backlash(capture, fit_settings(joint)).amplitude_rad_s


def sensitivities(
    calibration: BacklashCalibration, jobs: list[MismatchJob], amplitudes: list[float]
) -> tuple[ModelSensitivity, ...]:
    """What the calibration reads on the tolerance ends, against the nominal joint."""
    found = dict(zip(jobs, amplitudes, strict=True))
    out = []
    for name, factor, delta in jobs:
        if name is None:
            continue
        lo, hi = sorted(f for n, f, d in jobs if n == name and d == delta)
        if factor != lo:
            continue
        nominal = calibration.backlash_rad(found[(None, 1.0, delta)])
        out.append(
            ModelSensitivity(
                parameter=name,
                ends=(lo, hi),
                backlash_rad=delta,
                error_low_rad=calibration.backlash_rad(found[(name, lo, delta)]) - nominal,
                error_high_rad=calibration.backlash_rad(found[(name, hi, delta)]) - nominal,
            )
        )
    return tuple(out)


def cache_key(joint: JointSettings, cycle: BacklashCycle, noise_counts: float) -> str:
    shaping = {
        "v": CACHE_VERSION,
        "model": asdict(joint.model),
        "estimator": asdict(joint.estimator),
        "sweep": list(joint.calibration.sweep_backlash_rad),
        "tolerance": asdict(joint.calibration.model_tolerance),
        "gear_ratio": joint.gear_ratio,
        "encoder_bits": joint.encoder_bits,
        "cycle": {
            k: v
            for k, v in asdict(cycle).items()
            if k not in ("controller", "joint", "joint_index")
        },
        "noise_counts": noise_counts,
    }
    blob = json.dumps(shaping, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cache_path(
    joint: JointSettings, cycle: BacklashCycle, cache_dir: Path, noise_counts: float = 1.0
) -> Path:
    return Path(cache_dir) / f"backlash-{cache_key(joint, cycle, noise_counts)}.json"


def load_cached(path: Path) -> BacklashCalibration | None:
    if not path.exists():
        return None
    try:
        return BacklashCalibration.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError, IndexError):
        return None  # a damaged cache entry is recomputed and overwritten


def calibration_from_points(
    points: list[tuple[float, float]],
    path: Path | None,
    jobs: list[MismatchJob] | None = None,
    amplitudes: list[float] | None = None,
) -> BacklashCalibration:
    """delta = f(A) through the sweep's points, with the mismatch sweep's sensitivities (jobs
    and their amplitudes) when there is one; cached at `path`."""
    calibration = fit_calibration(points, source="simulation")
    if jobs and amplitudes is not None:
        calibration = replace(calibration, sensitivity=sensitivities(calibration, jobs, amplitudes))
    if path is not None:
        atomic_write_text(path, json.dumps(calibration.to_dict(), indent=1))
    return calibration


def simulated_calibration(
    joint: JointSettings, cycle: BacklashCycle, cache_dir: Path | None, noise_counts: float = 1.0
) -> BacklashCalibration:
    """The joint's calibration from cache, or from a fresh sweep (then cached)."""
    path = None if cache_dir is None else cache_path(joint, cycle, cache_dir, noise_counts)
    cached = None if path is None else load_cached(path)
    if cached is not None:
        return cached
    jobs = mismatch_jobs(joint)
    amplitudes = [mismatch_point(joint, cycle, job, noise_counts) for job in jobs]
    return calibration_from_points(
        sweep_points(joint, cycle, noise_counts=noise_counts), path, jobs, amplitudes
    )
