"""`jha config check` refuses a cycle whose capture would exceed MAX_CAPTURE_SAMPLES per channel
(agent.capture.bounds), naming the file:line of the joint's backlash_cycle or of the
controller's identification section and the sample count computed from the cycle."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.capture.bounds import MAX_CAPTURE_SAMPLES
from agent.cli.main import main
from agent.errors import EX_CONFIG, EX_OK
from tests.support.paths import ROOT

PLANAR = ROOT / "config" / "robots" / "planar2.yaml"


def backlash_config(load_turns: float) -> str:
    # 10 load turns of 10 motor turns each at 10 motor rev/s: 10 s per load turn at 100 kHz.
    return f"""\
controllers:
  - name: robot
    driver: sim
    joints:
      - name: j1
        index: 1
        gear_ratio: 10
        backlash_cycle:
          motor_speed_rps: 10
          load_turns: {load_turns}
          sample_rate_hz: 100000
"""


def identification_config(periods: int) -> str:
    return f"""\
controllers:
  - name: cell
    driver: sim
    joints:
      - {{name: joint_1, index: 1, gear_ratio: 100, backlash_cycle: {{motor_speed_rps: 100}}}}
      - {{name: joint_2, index: 2, gear_ratio: 100, backlash_cycle: {{motor_speed_rps: 100}}}}
    identification:
      robot: {PLANAR}
      sample_rate_hz: 10000
      trajectory:
        periods: {periods}
        period_s: 20
"""


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "jha.yaml"
    path.write_text(text)
    code = main(["config", "check", str(path)])
    return code, capsys.readouterr().err


def test_a_10m_sample_backlash_cycle_is_refused_at_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(tmp_path, backlash_config(100), capsys)
    assert code == EX_CONFIG == 78
    path = tmp_path / "jha.yaml"
    assert (
        f"{path}:8: controllers[0].joints[0].backlash_cycle: expected a capture of at most " in err
    )
    # 100 load turns x 10 / 10 rev/s = 100 s at 100 kHz, both ends sampled.
    assert "found 10,000,001 (100 load turns x gear_ratio 10 / 10 motor rev/s = 100 s" in err
    assert f"{MAX_CAPTURE_SAMPLES:,} samples per channel" in err


def test_a_backlash_cycle_within_the_bound_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2 s at 100 kHz: 200,001 samples, under the bound and within what the fit holds.
    code, err = check(tmp_path, backlash_config(2), capsys)
    assert code == EX_OK, err
    assert "samples per channel" not in err
    # 19 s (1,900,001) is under the file bound, but the fit would use only its first 2.6 s.
    code, err = check(tmp_path, backlash_config(19), capsys)
    assert code == EX_CONFIG and "expected a capture the fit can use whole" in err


def test_a_long_identification_is_refused_at_its_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = check(tmp_path, identification_config(60), capsys)
    assert code == EX_CONFIG
    path = tmp_path / "jha.yaml"
    assert f"{path}:7: controllers[0].identification: expected a capture of at most " in err
    # 60 periods x 20 s + 2 x 0.5 s hold = 1201 s at 10 kHz.
    assert "found 12,010,001 (60 periods x 20 s + 2 x hold_s 0.5 s = 1201 s at 10000 Hz)" in err


def test_a_short_identification_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = check(tmp_path, identification_config(3), capsys)
    assert code == EX_OK, err
