"""delta = f(A) from a simulation sweep of the configured joint (Giovannitti et al. 2022,
figs. 11-12, eq. 10).

The joint's model is simulated through the same test cycle at each backlash of the sweep, the
signature is fitted exactly as on a real capture, and the monotone cubic is fitted to the pairs.
Results are cached on disk by a hash of everything that shapes them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from agent.atomic import atomic_write_text
from agent.config.model import JointSettings
from agent.estimation.backlash.calibration import BacklashCalibration, fit_calibration
from agent.estimation.backlash.fit import BacklashFitSettings, fit_backlash
from drivers.base import BacklashCycle
from drivers.sim.backlash import simulate_backlash_capture

CACHE_VERSION = 1


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


def cache_key(joint: JointSettings, cycle: BacklashCycle, noise_counts: float) -> str:
    shaping = {
        "v": CACHE_VERSION,
        "model": asdict(joint.model),
        "estimator": asdict(joint.estimator),
        "sweep": list(joint.calibration.sweep_backlash_rad),
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
    points: list[tuple[float, float]], path: Path | None
) -> BacklashCalibration:
    calibration = fit_calibration(points, source="simulation")
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
    return calibration_from_points(sweep_points(joint, cycle, noise_counts=noise_counts), path)
