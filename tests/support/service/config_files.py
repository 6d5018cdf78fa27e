"""Config texts the config-loading tests start from (a complete valid one, the smallest valid
one), and writing one to load or to list its issues as printed."""

from __future__ import annotations

from pathlib import Path

from agent.config.load import config_issues

# A complete valid config: one simulated controller with two joints.
VALID_CONFIG = """\
agent:
  state_dir: /var/lib/jha
  log_level: debug
controllers:
  - name: robot1
    driver: sim
    settings:
      seed: 7
      production_runs_s: 5
      stop_length_s: 600
      alarms: [E-STOP-TEST]
      joints:
        axis1: {backlash_rad: 5.0e-4, pose_rad: 0.2}
        axis2:
          backlash_rad: 1e-3
    interlocks:
      pose_tolerance_rad: 0.02
      require_full_override: false
    joints:
      - name: axis1
        index: 1
        gear_ratio: 120
        backlash_cycle:
          motor_speed_rps: 20
          sample_rate_hz: 1000
        test_pose_rad: 0.2
        thresholds:
          backlash_watch_rad: 1.0e-3
          backlash_alert_rad: 2.0e-3
        calibration:
          source: points
          points:
            - {amplitude_rad_s: 0.1, backlash_rad: 0.0}
            - {amplitude_rad_s: 0.2, backlash_rad: 5.0e-4}
            - {amplitude_rad_s: 0.3, backlash_rad: 1.0e-3}
            - {amplitude_rad_s: 0.4, backlash_rad: 1.5e-3}
      - name: axis2
        index: 2
        gear_ratio: 80.5
        encoder_bits: 17
        backlash_cycle: {motor_speed_rps: 15, load_turns: 4}
        thresholds: {amplitude_watch_rad_s: 0.5, amplitude_alert_rad_s: 1.0}
        calibration: {source: simulation}
        model: {stiffness_nm_rad: 8000, damping_nm_s_rad: 2}
        estimator:
          resonance_hz: [5, 150]
          decay_per_s: [1, 300]
          seed: 3
"""

# The smallest valid config; tests add one mistake to it.
MINIMAL = """\
controllers:
  - name: r1
    driver: sim
    joints:
      - name: j1
        index: 1
        gear_ratio: 100
        backlash_cycle:
          motor_speed_rps: 10
"""


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    """Every issue as printed, with the file name shortened to 'c.yaml'."""
    path = write(tmp_path, text)
    return [str(i).replace(str(path), "c.yaml", 1) for i in config_issues(path)]
