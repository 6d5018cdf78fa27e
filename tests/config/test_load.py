"""The agent's config file: load_config / config_issues, every mistake with file:line."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config.load import config_issues, load_config
from agent.config.model import PAPER_SWEEP_BACKLASH_RAD, CalibrationPoint, Config
from agent.errors import EX_CONFIG, ConfigError
from agent.schema.yaml_lines import issues_of
from drivers.sim.settings import SimJointSettings, SimSettings

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
                "expected a number > 0 (motor turns per load turn)",
                "c.yaml:7: controllers[0].joints[0].gear_raito: unknown key "
                "(did you mean 'gear_ratio'?)",
            ],
        ),
        (
            "gear_ratio: 100",
            "gear_ratio: -40",
            ["c.yaml:7: controllers[0].joints[0].gear_ratio: expected a number > 0, found -40"],
        ),
        (
            "gear_ratio: 100",
            "gear_ratio: fast",
            ["c.yaml:7: controllers[0].joints[0].gear_ratio: expected a number > 0, found 'fast'"],
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


# --- cross-field rules -----------------------------------------------------------------------

JOINT2 = """\
      - name: j2
        index: 2
        gear_ratio: 50
        backlash_cycle: {motor_speed_rps: 10}
"""


def test_controller_names_are_unique(tmp_path: Path) -> None:
    second = MINIMAL.split("\n", 1)[1]  # the controller entry again, lines 10-17
    assert problems(tmp_path, MINIMAL + second) == [
        "c.yaml:10: controllers[1].name: expected a unique name among controllers, found 'r1' "
        "again (first used by controllers[0] at line 2)"
    ]


def test_joint_names_and_indexes_are_unique_within_a_controller(tmp_path: Path) -> None:
    dup = JOINT2.replace("name: j2", "name: j1").replace("index: 2", "index: 1")
    assert problems(tmp_path, MINIMAL + dup) == [
        "c.yaml:10: controllers[0].joints[1].name: expected a unique name among "
        "controllers[0].joints, found 'j1' again (first used by controllers[0].joints[0] at "
        "line 5)",
        "c.yaml:11: controllers[0].joints[1].index: expected a unique index among "
        "controllers[0].joints, found 1 again (first used by controllers[0].joints[0] at "
        "line 6)",
    ]
    # the same names in another controller are fine
    other = MINIMAL.split("\n", 1)[1].replace("name: r1", "name: r2")
    assert problems(tmp_path, MINIMAL + other) == []


def test_joint_names_unique_even_when_another_joint_is_wrong(tmp_path: Path) -> None:
    dup = JOINT2.replace("name: j2", "name: j1").replace("gear_ratio: 50", "gear_ratio: x")
    assert problems(tmp_path, MINIMAL + dup) == [
        "c.yaml:10: controllers[0].joints[1].name: expected a unique name among "
        "controllers[0].joints, found 'j1' again (first used by controllers[0].joints[0] at "
        "line 5)",
        "c.yaml:12: controllers[0].joints[1].gear_ratio: expected a number > 0, found 'x'",
    ]


def with_joint_extra(extra: str) -> str:
    """MINIMAL with more keys in the joint (starting at line 10)."""
    return MINIMAL + "".join(f"        {line}\n" for line in extra.splitlines())


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "thresholds:\n  backlash_watch_rad: 2.0e-3\n  backlash_alert_rad: 1.0e-3",
            "c.yaml:11: controllers[0].joints[0].thresholds.backlash_watch_rad: expected a "
            "number < backlash_alert_rad (0.001), found 0.002",
        ),
        (
            "thresholds: {amplitude_watch_rad_s: 1, amplitude_alert_rad_s: 1}",
            "c.yaml:10: controllers[0].joints[0].thresholds.amplitude_watch_rad_s: expected a "
            "number < amplitude_alert_rad_s (1), found 1",
        ),
        (
            "calibration:\n  source: points\n  points:\n"
            "    - {amplitude_rad_s: 0.1, backlash_rad: 0}\n"
            "    - {amplitude_rad_s: 0.2, backlash_rad: 1.0e-3}",
            "c.yaml:12: controllers[0].joints[0].calibration.points: expected at least 4 points "
            "for source 'points', found 2",
        ),
        (
            "calibration:\n  source: points\n  points:\n"
            "    - {amplitude_rad_s: 0.1, backlash_rad: 0}\n"
            "    - {amplitude_rad_s: 0.2, backlash_rad: 1.0e-3}\n"
            "    - {amplitude_rad_s: 0.2, backlash_rad: 2.0e-3}\n"
            "    - {amplitude_rad_s: 0.3, backlash_rad: 3.0e-3}",
            "c.yaml:15: controllers[0].joints[0].calibration.points[2].amplitude_rad_s: expected "
            "a number > 0.2 (points must increase strictly in amplitude_rad_s), found 0.2",
        ),
        (
            "calibration:\n  source: points\n  points:\n"
            "    - {amplitude_rad_s: 0.1, backlash_rad: 0}\n"
            "    - {amplitude_rad_s: 0.2, backlash_rad: 1.0e-3}\n"
            "    - {amplitude_rad_s: 0.3, backlash_rad: 2.0e-3}\n"
            "    - {amplitude_rad_s: 0.4, backlash_rad: 1.5e-3}",
            "c.yaml:16: controllers[0].joints[0].calibration.points[3].backlash_rad: expected "
            "a number > 0.002 (points must increase strictly in backlash_rad), found 0.0015",
        ),
        (
            "calibration: {source: simulation, sweep_backlash_rad: [0, 1.0e-3, 2.0e-3]}",
            "c.yaml:10: controllers[0].joints[0].calibration.sweep_backlash_rad: expected at "
            "least 4 values for source 'simulation', found 3",
        ),
        (
            "estimator:\n  resonance_hz: [200, 100]",
            "c.yaml:11: controllers[0].joints[0].estimator.resonance_hz: expected [low, high] "
            "with low < high, found [200, 100]",
        ),
        (
            "estimator:\n  resonance_hz: [0, 100]",
            "c.yaml:11: controllers[0].joints[0].estimator.resonance_hz[0]: expected a number "
            "> 0, found 0",
        ),
        (
            "estimator:\n  decay_per_s:\n    - 50\n    - 5",
            "c.yaml:11: controllers[0].joints[0].estimator.decay_per_s: expected [low, high] "
            "with low < high, found [50, 5]",
        ),
        (
            "estimator:\n  decay_per_s:\n    - -1\n    - 5",
            "c.yaml:12: controllers[0].joints[0].estimator.decay_per_s[0]: expected a number "
            "> 0, found -1",
        ),
        (
            "estimator: {resonance_hz: [10, 300]}",  # default sample rate 500 Hz
            "c.yaml:8: controllers[0].joints[0].backlash_cycle.sample_rate_hz: expected a number "
            "> 600 (twice "
            "estimator.resonance_hz[1] = 300 Hz, so the resonance stays below Nyquist), found 500",
        ),
    ],
)
def test_cross_field_rules(tmp_path: Path, extra: str, expected: str) -> None:
    found = problems(tmp_path, with_joint_extra(extra))
    assert found == [expected]


def test_nyquist_rule_points_at_the_sample_rate_line(tmp_path: Path) -> None:
    rate = "motor_speed_rps: 10\n          sample_rate_hz: 300"
    text = MINIMAL.replace("motor_speed_rps: 10", rate)
    assert problems(tmp_path, text) == [
        "c.yaml:10: controllers[0].joints[0].backlash_cycle.sample_rate_hz: expected a number > "
        "400 (twice estimator.resonance_hz[1] = 200 Hz, so the resonance stays below Nyquist), "
        "found 300"
    ]


def test_valid_calibration_points_pass(tmp_path: Path) -> None:
    # the full example has strictly increasing points; sources other than 'points' ignore them
    extra = "calibration:\n  source: none\n  points: [{amplitude_rad_s: 1, backlash_rad: 0}]"
    assert problems(tmp_path, with_joint_extra(extra)) == []


# --- properties ------------------------------------------------------------------------------


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


VALID_TREE = yaml.safe_load(VALID_CONFIG)
KNOWN_PATHS = _paths(VALID_TREE)
GARBAGE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**20, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "yes", "off", "~", "2024-01-01", "1e3", "0x1F", ".nan", "[]", "{}"]),
)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("garbage") / "c.yaml"


def _assert_only_config_errors(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8"))
    last_line = max(1, len(text.splitlines()))
    try:
        load_config(path)
    except ConfigError as exc:
        found = issues_of(exc)
        assert found, "a ConfigError without issues"
        for issue in found:
            assert 1 <= issue.line <= last_line, (issue, text)
            assert str(issue).startswith(f"{path}:{issue.line}: ")


@given(st.lists(st.tuples(st.sampled_from(KNOWN_PATHS), GARBAGE), min_size=1, max_size=4))
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_scalar_garbage_at_known_fields_only_raises_config_errors(
    scratch: Path, changes: list[tuple[tuple[Any, ...], Any]]
) -> None:
    tree = copy.deepcopy(VALID_TREE)
    for path, value in changes:
        parent = tree
        try:
            for part in path[:-1]:
                parent = parent[part]
            parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced a parent with a scalar
    _assert_only_config_errors(scratch, yaml.safe_dump(tree, sort_keys=False))


@given(st.text(alphabet=st.sampled_from(list("ab:- \n\t[]{},&*!#'\"|>?.019~")), max_size=60))
@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_any_text_only_raises_config_errors(scratch: Path, text: str) -> None:
    _assert_only_config_errors(scratch, text)
