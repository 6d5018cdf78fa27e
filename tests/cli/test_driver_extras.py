"""Driver dependencies are package extras (issue 16): a configured driver whose extra is not
installed is a config error naming the extra, found by `jha config check` before anything runs.

The missing package is simulated in a child interpreter (sys.modules[name] = None makes Python
treat it as not installed), the config check itself is the real command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UR_CONFIG = """\
controllers:
  - name: arm
    driver: ur_rtde
    robot: {robot}
    settings: {{host: 127.0.0.1}}
    joints:
      - name: wrist1
        index: 4
        gear_ratio: 101
        backlash_cycle: {{motor_speed_rps: 10, load_turns: 2}}
"""
CAN_CONFIG = """\
controllers:
  - name: axis
    driver: can
    joints:
      - name: j1
        index: 1
        gear_ratio: 40
        backlash_cycle: {{motor_speed_rps: 10}}
"""


def _jha_without(modules: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    """`jha ARGV` in a child interpreter where `modules` count as not installed."""
    code = (
        "import sys\n"
        + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
        + "from agent.cli.main import main\n"
        + f"sys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("text", "missing", "extra", "line"),
    [
        (UR_CONFIG, ["rtde_control"], "ur", 3),
        (CAN_CONFIG, ["can"], "can", 3),
    ],
)
def test_a_driver_without_its_extra_is_a_config_error_naming_it(
    tmp_path: Path, text: str, missing: list[str], extra: str, line: int
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(text.format(robot=ROOT / "config" / "robots" / "ur5e.yaml"))
    done = _jha_without(missing, "config", "check", str(config))
    assert done.returncode == 78, done.stderr
    assert f"{config}:{line}: controllers[0].driver: driver" in done.stderr
    hint = f"pip install 'joint-health-agent[{extra}]'"
    assert f"needs the Python module {missing[0]!r}, not installed: {hint}" in done.stderr
    # with the extra installed (this venv: make test installs .[dev,all]) the driver loads
    done = _jha_without([], "config", "check", str(config))
    assert "needs the Python module" not in done.stderr
    # (the CAN config lacks its DBC file: a different mistake, at its own line)
    assert done.returncode == 0 or "settings.dbc: required key" in done.stderr, done.stderr


def test_jha_drivers_names_the_missing_extra() -> None:
    done = _jha_without(["rtde_receive"], "drivers")
    assert done.returncode == 0, done.stderr
    (ur,) = [line for line in done.stdout.splitlines() if line.startswith("ur_rtde ")]
    hint = "pip install 'joint-health-agent[ur]'"
    assert ur.endswith(f"needs the Python module 'rtde_receive', not installed: {hint}")
    (sim,) = [line for line in done.stdout.splitlines() if line.startswith("sim ")]
    assert "cycles" in sim
