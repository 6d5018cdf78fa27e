"""`jha analyze calibration`: a joint's delta = f(A) pairs as the CSV `analyze backlash
--calibration` reads (issue 16: there was no way to get them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.analyze import _read_pairs
from agent.cli.main import main
from agent.config.load import load_config
from agent.errors import EX_CONFIG, EX_OK, EX_USAGE
from agent.kinds.backlash.calibration import cache_path, calibration_from_points
from agent.kinds.backlash.kind import backlash_cycle
from tests.support.service.config_files import VALID_CONFIG


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(VALID_CONFIG.replace("/var/lib/jha", str(tmp_path / "state")))
    return path


def test_configured_points_round_trip_through_analyze_backlash(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["analyze", "calibration", "--config", str(config), "--controller", "robot1"]
    assert main([*argv, "--joint", "axis1"]) == EX_OK
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "amplitude_rad_s,backlash_rad"
    csv = tmp_path / "pairs.csv"
    assert main([*argv, "--joint", "axis1", "-o", str(csv)]) == EX_OK
    assert csv.read_text() == out
    assert _read_pairs(csv) == [(0.1, 0.0), (0.2, 5e-4), (0.3, 1e-3), (0.4, 1.5e-3)]


def test_a_simulation_sweep_is_read_from_the_daemon_s_cache(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = load_config(config)
    ctrl = cfg.controllers[0]
    joint = ctrl.joints[1]
    points = [(0.05, 0.0), (0.21, 6e-4), (0.38, 1.2e-3), (0.52, 1.8e-3)]
    path = cache_path(joint, backlash_cycle(ctrl, joint), tmp_path / "state" / "calibration")
    path.parent.mkdir(parents=True)
    calibration_from_points(points, path)
    argv = ["analyze", "calibration", "--config", str(config), "--controller", "robot1"]
    assert main([*argv, "--joint", "axis2"]) == EX_OK
    csv = tmp_path / "sweep.csv"
    csv.write_text(capsys.readouterr().out)
    assert _read_pairs(csv) == points


def test_no_pairs_and_unknown_names_are_usage_errors(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["analyze", "calibration", "--config", str(config)]
    assert main([*argv, "--controller", "robot1", "--joint", "axis9"]) == EX_USAGE
    assert "no joint 'axis9' (its joints: axis1, axis2)" in capsys.readouterr().err
    assert main([*argv, "--controller", "robot9", "--joint", "axis1"]) == EX_CONFIG
    none = tmp_path / "none.yaml"
    none.write_text(config.read_text().replace("source: points", "source: none"))
    code = main(
        [
            "analyze",
            "calibration",
            "--config",
            str(none),
            "--controller",
            "robot1",
            "--joint",
            "axis1",
        ]
    )
    assert (
        code == EX_USAGE and "no calibration (calibration.source: none)" in capsys.readouterr().err
    )
