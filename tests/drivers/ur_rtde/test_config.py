"""Universal Robots driver: its settings (file:line errors) and the status mapping, no robot.

The parts of the UR driver that need no controller: settings validated by agent.schema.validate,
with the heartbeat rule (agent_timeout_s at least 3 x heartbeat_interval_s), the capture-rate check
at start-up, and how one status read maps to the interlocks' modes. The emulator tests are in
tests/drivers/ur_rtde/test_driver.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.config.load import config_issues
from agent.errors import ConfigError
from drivers.base import ControllerMode, load_driver_class
from drivers.ur_rtde.driver import UrRtdeDriver
from drivers.ur_rtde.settings import UrRtdeSettings
from drivers.ur_rtde.status import controller_status
from tests.peers.ur_controller.harness import config_text, setup


def test_settings_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    text = config_text("10.0.0.5", frequency_hz=600, permission_input=20)
    text = text.replace("      host: 10.0.0.5\n", "")
    path.write_text(text)
    lines = text.splitlines()

    def line_of(key: str) -> int:
        return next(i for i, line in enumerate(lines, 1) if line.strip().startswith(key + ":"))

    issues = {i.path: i for i in config_issues(path)}
    freq = issues["controllers[0].settings.frequency_hz"]
    assert freq.line == line_of("frequency_hz") and "<= 500" in freq.message
    assert freq.file == str(path)
    assert issues["controllers[0].settings.permission_input"].line == line_of("permission_input")
    assert "controllers[0].settings.host" in issues  # required, with its doc line
    assert load_driver_class("ur_rtde") is UrRtdeDriver


def test_heartbeat_settings_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "beat.yaml"
    text = config_text("10.0.0.5", heartbeat_interval_s=0.2, agent_timeout_s=0.5)
    path.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "agent_timeout_s:" in t)
    (issue,) = config_issues(path)
    assert (issue.file, issue.line) == (str(path), line)
    assert issue.path == "controllers[0].settings.agent_timeout_s"
    assert issue.message == "expected at least 3 x heartbeat_interval_s (0.6 s), found 0.5"
    path.write_text(config_text("10.0.0.5", heartbeat_interval_s=0.0))
    (issue,) = config_issues(path)
    assert issue.path.endswith("heartbeat_interval_s") and "> 0" in issue.message
    defaults = UrRtdeSettings(host="10.0.0.5")
    assert (defaults.heartbeat_interval_s, defaults.agent_timeout_s) == (0.1, 0.5)
    assert defaults.check() == []


def test_driver_refuses_a_capture_rate_rtde_does_not_stream(tmp_path: Path) -> None:
    _, _, ctrl, _ = setup(tmp_path, frequency_hz=125)
    with pytest.raises(ConfigError, match=r"sample_rate_hz is 500 Hz but RTDE streams at .* 125"):
        UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)


RAW = {
    "robot_mode": "RUNNING",
    "safety": "NORMAL",
    "program_state": "STOPPED",
    "program": "production.urp",
    "remote": True,
    "timestamp": 12.5,
    "q": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
    "rtde_robot_mode": 7,
    "safety_bits": 1,
    "runtime_state": 1,
    "speed_fraction": 1.0,
    "digital_inputs": 0b100,
}


@pytest.mark.parametrize(
    ("change", "cycle_active", "mode", "alarm"),
    [
        ({}, False, ControllerMode.STOPPED, None),
        ({"program_state": "PLAYING"}, False, ControllerMode.PRODUCTION, None),
        ({"program_state": "PAUSED"}, False, ControllerMode.PRODUCTION, None),
        ({"program_state": "PLAYING"}, True, ControllerMode.TEST_CYCLE, None),
        (
            {"safety": "PROTECTIVE_STOP", "safety_bits": 0x404},
            False,
            ControllerMode.FAULT,
            "PROTECTIVE_STOP",
        ),
        ({"safety_bits": 0x4}, True, ControllerMode.FAULT, "bits 0x4"),
        ({"robot_mode": "POWER_OFF"}, False, ControllerMode.FAULT, "POWER_OFF"),
        ({"robot_mode": "BACKDRIVE"}, False, ControllerMode.MANUAL, "BACKDRIVE"),
        ({"remote": False}, False, ControllerMode.MANUAL, None),
    ],
)
def test_status_mapping(
    tmp_path: Path,
    change: dict[str, Any],
    cycle_active: bool,
    mode: ControllerMode,
    alarm: str | None,
) -> None:
    _, _, ctrl, _ = setup(tmp_path, permission_input=2)
    status = controller_status({**RAW, **change}, ctrl.joints, ctrl.settings, cycle_active)
    assert status.mode is mode
    assert (alarm is None) == (not status.alarms)
    if alarm:
        assert alarm in status.alarms[0]
    assert status.joint_positions_rad == {"wrist1": 0.4}
    assert status.permission is True  # digital input 2 is on
    no_permission = controller_status(
        {**RAW, "digital_inputs": 0}, ctrl.joints, ctrl.settings, False
    )
    assert no_permission.permission is False
