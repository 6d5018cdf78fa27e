"""The agent's config file: a valid one loads into typed values, a minimal one takes the
defaults."""

from __future__ import annotations

from pathlib import Path

from agent.config.load import config_issues, load_config
from agent.config.model import PAPER_SWEEP_BACKLASH_RAD, CalibrationPoint, Config
from drivers.sim.settings import SimJointSettings, SimSettings
from tests.support.service.config_files import MINIMAL, VALID_CONFIG, write

# --- valid files -----------------------------------------------------------------------------


def test_valid_config_round_trips_into_typed_values(tmp_path: Path) -> None:
    path = write(tmp_path, VALID_CONFIG)
    cfg = load_config(path)
    assert config_issues(path) == []
    assert isinstance(cfg, Config)
    assert cfg.source == str(path)
    assert cfg.agent.state_dir == "/var/lib/jha" and cfg.agent.log_level == "debug"
    (ctrl,) = cfg.controllers
    assert (ctrl.name, ctrl.driver) == ("robot1", "sim")
    assert ctrl.interlocks.pose_tolerance_rad == 0.02
    assert ctrl.interlocks.require_full_override is False
    assert ctrl.interlocks.require_permission is True
    assert ctrl.settings == SimSettings(
        seed=7,
        production_runs_s=5.0,
        stop_length_s=600.0,
        alarms=("E-STOP-TEST",),
        joints={
            "axis1": SimJointSettings(backlash_rad=5e-4, pose_rad=0.2),
            "axis2": SimJointSettings(backlash_rad=1e-3),
        },
    )
    a1, a2 = ctrl.joints
    assert (a1.name, a1.index, a1.gear_ratio, a1.encoder_bits) == ("axis1", 1, 120.0, 19)
    assert type(a1.gear_ratio) is float and type(a1.index) is int
    assert a1.backlash_cycle.motor_speed_rps == 20.0
    assert a1.backlash_cycle.sample_rate_hz == 1000.0
    assert a1.backlash_cycle.load_turns == 12.0  # default
    assert a1.thresholds.backlash_alert_rad == 2e-3
    assert a1.thresholds.amplitude_alert_rad_s is None
    assert a1.calibration.source == "points"
    assert a1.calibration.points[1] == CalibrationPoint(amplitude_rad_s=0.2, backlash_rad=5e-4)
    assert isinstance(a1.calibration.points, tuple)
    assert a2.calibration.sweep_backlash_rad == PAPER_SWEEP_BACKLASH_RAD
    assert a2.encoder_bits == 17 and a2.gear_ratio == 80.5
    assert a2.model.stiffness_nm_rad == 8000.0 and a2.model.load_mass_kg == 5.0
    assert a2.estimator.resonance_hz == (5.0, 150.0) and a2.estimator.seed == 3


def test_minimal_config_takes_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL))
    assert cfg.agent.log_level == "info"
    assert cfg.controllers[0].settings == SimSettings()  # no `settings:`: the driver's defaults
    assert cfg.controllers[0].joints[0].calibration.source == "none"
