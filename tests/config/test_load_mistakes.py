"""The agent's config file: every YAML, schema and driver-settings mistake reported with
file:line, several at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config.load import load_config
from agent.errors import EX_CONFIG, ConfigError
from agent.schema.yaml_lines import issues_of
from tests.support.service.config_files import MINIMAL, problems, write

# --- YAML-level mistakes ---------------------------------------------------------------------


def test_syntax_error(tmp_path: Path) -> None:
    text = MINIMAL.replace("gear_ratio: 100", "gear_ratio: [100")
    (msg,) = problems(tmp_path, text)
    assert msg.startswith("c.yaml:8: YAML syntax error: expected ',' or ']', but got ':'")


def test_duplicate_key_names_both_lines(tmp_path: Path) -> None:
    text = MINIMAL.replace("        index: 1\n", "        index: 1\n        index: 2\n")
    assert problems(tmp_path, text) == [
        "c.yaml:7: controllers[0].joints[0].index: duplicate key (first defined at line 6)"
    ]


def test_empty_file(tmp_path: Path) -> None:
    assert problems(tmp_path, "\n# nothing yet\n") == [
        "c.yaml:1: the file is empty: expected a YAML document (it holds only comments or blanks)"
    ]


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value) == f"{path}: cannot read: No such file or directory"
    assert exc.value.exit_code == EX_CONFIG


# --- schema mistakes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "gear_ratio: 100",
            "gear_raito: 100",
            [
                "c.yaml:5: controllers[0].joints[0].gear_ratio: required key is missing: "
                "expected a number >= 1 (motor turns per load turn)",
                "c.yaml:7: controllers[0].joints[0].gear_raito: unknown key "
                "(did you mean 'gear_ratio'?)",
            ],
        ),
        (
            "gear_ratio: 100",
            "gear_ratio: -40",
            ["c.yaml:7: controllers[0].joints[0].gear_ratio: expected a number >= 1, found -40"],
        ),
        (
            "gear_ratio: 100",
            "gear_ratio: fast",
            ["c.yaml:7: controllers[0].joints[0].gear_ratio: expected a number >= 1, found 'fast'"],
        ),
        (
            "index: 1",
            "index: true",
            [
                "c.yaml:6: controllers[0].joints[0].index: expected an integer >= 1 and <= 64, "
                "found true"
            ],
        ),
        (
            "index: 1",
            "index: 1.5",
            [
                "c.yaml:6: controllers[0].joints[0].index: expected an integer >= 1 and <= 64, "
                "found 1.5"
            ],
        ),
        (
            "index: 1",
            "index: 65",
            [
                "c.yaml:6: controllers[0].joints[0].index: expected an integer >= 1 and <= 64, "
                "found 65"
            ],
        ),
        (
            "motor_speed_rps: 10",
            "motor_speed_rps: .nan",
            [
                "c.yaml:9: controllers[0].joints[0].backlash_cycle.motor_speed_rps: expected a "
                "number > 0 and <= 500, found .nan (not a finite number)"
            ],
        ),
        (
            "motor_speed_rps: 10",
            "motor_speed_rps: .inf",
            [
                "c.yaml:9: controllers[0].joints[0].backlash_cycle.motor_speed_rps: expected a "
                "number > 0 and <= 500, found .inf (not a finite number)"
            ],
        ),
        (
            "        backlash_cycle:\n          motor_speed_rps: 10\n",
            "        backlash_cycle:\n          - motor_speed_rps: 10\n",
            [
                "c.yaml:9: controllers[0].joints[0].backlash_cycle: expected a mapping, "
                "found a list of 1 item"
            ],
        ),
        (
            "motor_speed_rps: 10",
            "motor_speed_rps: 10\n        calibration: {source: point}",
            [
                "c.yaml:10: controllers[0].joints[0].calibration.source: expected one of "
                "'none', 'simulation', 'points', found 'point' (did you mean 'points'?)"
            ],
        ),
        (
            "    driver: sim\n",
            "    driver: sim\n    interlocks: {require_permission: 1}\n",
            [
                "c.yaml:4: controllers[0].interlocks.require_permission: expected true or false, "
                "found 1"
            ],
        ),
        (
            "  - name: r1",
            "  - name: 1",
            ["c.yaml:2: controllers[0].name: expected a string, found 1"],
        ),
        (
            "controllers:",
            "agent: {log_level: verbose}\ncontrollers:",
            [
                "c.yaml:1: agent.log_level: expected one of 'debug', 'info', 'warning', 'error', "
                "found 'verbose'"
            ],
        ),
        (
            "controllers:",
            "source: here\ncontrollers:",
            ["c.yaml:1: source: unknown key; expected one of: controllers, agent, publish"],
        ),
    ],
)
def test_each_kind_of_mistake(tmp_path: Path, old: str, new: str, expected: list[str]) -> None:
    assert old in MINIMAL
    assert problems(tmp_path, MINIMAL.replace(old, new, 1)) == expected


def test_no_controllers(tmp_path: Path) -> None:
    assert problems(tmp_path, "agent: {}\ncontrollers: []\n") == [
        "c.yaml:2: controllers: expected a list of mappings with at least 1 item, "
        "found an empty list"
    ]
    assert problems(tmp_path, "agent: {}\n") == [
        "c.yaml:1: controllers: required key is missing: expected a list of mappings with at "
        "least 1 item"
    ]


def test_several_mistakes_are_reported_together(tmp_path: Path) -> None:
    text = """\
controllers:
  - name: r1
    driver: sim
    settings: {sed: 1}
    joints:
      - name: j1
        index: 0
        gear_ratio: 100
        encoder_bits: 40
        backlash_cycle: {motor_speed_rps: 10, settle: 1}
"""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert exc.value.exit_code == EX_CONFIG
    lines = str(exc.value).replace(str(path), "c.yaml").splitlines()
    assert lines == [
        "c.yaml:4: controllers[0].settings.sed: unknown key (did you mean 'seed'?)",
        "c.yaml:7: controllers[0].joints[0].index: expected an integer >= 1 and <= 64, found 0",
        "c.yaml:9: controllers[0].joints[0].encoder_bits: expected an integer >= 12 and <= 32, "
        "found 40",
        "c.yaml:10: controllers[0].joints[0].backlash_cycle.settle: unknown key "
        "(did you mean 'settle_s'?)",
    ]
    assert [i.line for i in issues_of(exc.value)] == [4, 7, 9, 10]


# --- drivers ---------------------------------------------------------------------------------


def test_unknown_driver(tmp_path: Path) -> None:
    from drivers.base import available_drivers

    installed = ", ".join(sorted(available_drivers()))
    assert "sim" in installed.split(", ")
    assert problems(tmp_path, MINIMAL.replace("driver: sim", "driver: simm")) == [
        f"c.yaml:3: controllers[0].driver: expected an installed driver ({installed}), "
        "found 'simm' (did you mean 'sim'?)"
    ]
    assert problems(tmp_path, MINIMAL.replace("driver: sim", "driver: fanuc")) == [
        f"c.yaml:3: controllers[0].driver: expected an installed driver ({installed}), "
        "found 'fanuc'"
    ]


def test_bad_driver_settings(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "    driver: sim\n",
        "    driver: sim\n"
        "    settings:\n"
        "      speed_override: 3\n"
        "      permission: maybe\n"
        "      joints:\n"
        "        j1: {backlash_rad: -1.0e-3}\n"
        "        axis4:\n"
        "          backlash_rad: 1.0e-3\n",
    )
    assert problems(tmp_path, text) == [
        "c.yaml:5: controllers[0].settings.speed_override: expected a number >= 0 and <= 2, "
        "found 3",
        "c.yaml:6: controllers[0].settings.permission: expected true or false, found 'maybe'",
        "c.yaml:8: controllers[0].settings.joints.j1.backlash_rad: expected a number >= 0 and "
        "<= 0.05, found -1.0e-3",
        "c.yaml:9: controllers[0].settings.joints.axis4: expected the name of a joint of this "
        "controller (j1), found 'axis4'",
    ]


def test_driver_settings_must_be_a_mapping(tmp_path: Path) -> None:
    text = MINIMAL.replace("    driver: sim\n", "    driver: sim\n    settings: [1]\n")
    assert problems(tmp_path, text) == [
        "c.yaml:4: controllers[0].settings: expected a mapping, found a list of 1 item"
    ]


def test_joint_settings_key_suggests_the_close_joint(tmp_path: Path) -> None:
    text = MINIMAL.replace(
        "    driver: sim\n", "    driver: sim\n    settings: {joints: {jj1: {}}}\n"
    )
    assert problems(tmp_path, text) == [
        "c.yaml:4: controllers[0].settings.joints.jj1: expected the name of a joint of this "
        "controller (j1), found 'jj1' (did you mean 'j1'?)"
    ]
