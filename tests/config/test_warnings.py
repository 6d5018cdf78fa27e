"""`jha config check` names every interlock rule that is off (docs/safety.md, G9): a valid
config still exits 0, with one warning per rule and controller on stderr, at the rule's line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.load import load_config
from agent.config.warnings import interlock_warnings
from agent.errors import EX_OK
from tests.support.paths import ROOT

JOINT = """\
      - name: j1
        index: 1
        gear_ratio: 40
        backlash_cycle: {motor_speed_rps: 100, load_turns: 2, sample_rate_hz: 500}
        calibration: {source: none}
"""
CONFIG = f"""\
controllers:
  - name: cell_a
    driver: sim
    interlocks:
      require_permission: false
      require_no_alarm: false
    joints:
{JOINT}  - name: cell_b
    driver: sim
    interlocks:
      require_operator_absent: true
    joints:
{JOINT}"""


@pytest.mark.security("config check warns about every interlock rule that is off")
def test_config_check_warns_about_every_interlock_rule_that_is_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(CONFIG)
    assert main(["config", "check", str(path)]) == EX_OK
    out = capsys.readouterr()
    assert out.out.strip() == f"{path}: OK"
    lines = out.err.strip().splitlines()
    assert lines[-1] == f"{path}: 3 warning(s)"
    warned = {line.split(": ")[1]: line for line in lines[:-1]}
    # Two rules switched off at their lines, and the one that is off by default, at the
    # interlocks section of the controller that leaves it so; cell_b has every rule on.
    assert set(warned) == {
        "controllers[0].interlocks.require_permission",
        "controllers[0].interlocks.require_no_alarm",
        "controllers[0].interlocks.require_operator_absent",
    }
    assert warned["controllers[0].interlocks.require_permission"].startswith(f"{path}:5: ")
    assert warned["controllers[0].interlocks.require_no_alarm"].startswith(f"{path}:6: ")
    assert warned["controllers[0].interlocks.require_operator_absent"].startswith(f"{path}:4: ")
    assert (
        "switched off (cell_a): a cycle may start without the controller's permission"
        in (warned["controllers[0].interlocks.require_permission"])
    )
    assert "off by default (cell_a)" in warned["controllers[0].interlocks.require_operator_absent"]
    # Every rule the config can switch off is covered by the check.
    off = load_config(path).controllers[0].interlocks
    every = [n for n in vars(off) if n.startswith("require_")]
    everything_off = path.with_name("all_off.yaml")
    everything_off.write_text(
        CONFIG.replace(
            "      require_permission: false\n",
            "".join(f"      {n}: false\n" for n in every if n != "require_no_alarm"),
        )
    )
    found = interlock_warnings(load_config(everything_off))
    assert sorted(w.path for w in found if "cell_a" in w.message) == sorted(
        f"controllers[0].interlocks.{n}" for n in every
    )
    assert len(found) == len(every)


def test_the_demo_config_check_warns_about_operator_presence_only() -> None:
    demo = ROOT / "config" / "demo.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "config", "check", str(demo)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"{demo}: OK"
    assert "interlocks.require_operator_absent: warning: interlock rule off by default" in (
        done.stderr
    )
    assert done.stderr.count("warning:") == 1
