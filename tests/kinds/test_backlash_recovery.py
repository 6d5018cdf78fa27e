"""End to end on simulated captures: calibrate on one set of runs, recover delta on others."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agent.config.model import (
    BacklashCycleSettings,
    CalibrationSettings,
    ControllerSettings,
    JointSettings,
    ModelToleranceSettings,
)
from agent.estimation.backlash.calibration import fit_calibration
from agent.estimation.backlash.fit import fit_backlash
from agent.kinds.backlash.calibration import fit_settings, simulated_calibration, sweep_points
from agent.kinds.backlash.kind import backlash_cycle
from drivers.sim.backlash import simulate_backlash_capture

SWEEP = (0.0, 3e-4, 7e-4, 1.1e-3, 1.5e-3, 2.1e-3)


def joint_and_cycle():  # type: ignore[no-untyped-def]
    joint = JointSettings(
        name="axis4",
        index=4,
        gear_ratio=40.0,
        backlash_cycle=BacklashCycleSettings(motor_speed_rps=100.0, load_turns=8),
        calibration=CalibrationSettings(source="simulation", sweep_backlash_rad=SWEEP),
    )
    return joint, backlash_cycle(ControllerSettings(name="r", driver="sim", joints=(joint,)), joint)


def test_delta_recovered_within_10_percent_on_independent_runs() -> None:
    joint, cycle = joint_and_cycle()
    cal = fit_calibration(sweep_points(joint, cycle, noise_counts=1.0, seed=101))
    for delta, seed in ((5e-4, 301), (1.2e-3, 302), (1.9e-3, 303)):
        # Other seeds and more encoder noise than the calibration saw, plus speed noise.
        capture = simulate_backlash_capture(joint, cycle, delta, noise_counts=2.0, seed=seed)
        result = fit_backlash(capture, fit_settings(joint), cal)
        assert result.backlash_rad == pytest.approx(delta, rel=0.10), (delta, result.backlash_rad)


def test_healthy_joint_reads_near_zero_and_calibration_is_cached(tmp_path) -> None:  # type: ignore[no-untyped-def]
    joint, cycle = joint_and_cycle()
    # No model-mismatch sweep here, to keep the test short (the daemon's test runs one).
    tolerance = ModelToleranceSettings(stiffness_rel=0.0, load_inertia_rel=0.0, damping_factor=1)
    joint = replace(joint, calibration=replace(joint.calibration, model_tolerance=tolerance))
    cal = simulated_calibration(joint, cycle, tmp_path)
    assert cal.sensitivity == ()
    assert len(list(tmp_path.glob("backlash-*.json"))) == 1
    again = simulated_calibration(joint, cycle, tmp_path)  # from the cache: identical
    assert again == cal
    capture = simulate_backlash_capture(joint, cycle, 0.0, noise_counts=1.0, seed=7)
    result = fit_backlash(capture, fit_settings(joint), cal)
    assert result.backlash_rad is not None and result.backlash_rad < 1e-4
    # Calibration points are monotone: more backlash, larger signature.
    amps = [a for a, _ in cal.points]
    assert np.all(np.diff(amps) > 0)
