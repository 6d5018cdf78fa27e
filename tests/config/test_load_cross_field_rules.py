"""The agent's config file: rules across fields (unique names and indexes, ordered thresholds
and calibration points, ranges, the Nyquist rule), each naming the line to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.service.config_files import MINIMAL, problems

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


@pytest.mark.parametrize("name", ["''", "../../etc", "cell 1", "robot/1", "a+", "1st", "x" * 65])
def test_controller_and_joint_names_are_identifiers(tmp_path: Path, name: str) -> None:
    """A name becomes a directory, an MQTT topic level and an anchor: no '', '..', '/', '+'."""
    expected = "expected a name of 1 to 64 letters, digits, _ or - starting with a letter, found "
    shown = repr(name) if name != "''" else "''"
    found = problems(tmp_path, MINIMAL.replace("name: r1", f"name: {name}", 1))
    assert found == [f"c.yaml:2: controllers[0].name: {expected}{shown}"]
    found = problems(tmp_path, MINIMAL.replace("name: j1", f"name: {name}", 1))
    assert found == [f"c.yaml:5: controllers[0].joints[0].name: {expected}{shown}"]
    # what real cells are called passes
    assert problems(tmp_path, MINIMAL.replace("name: r1", "name: Cell-4_robot2", 1)) == []


def test_joint_names_unique_even_when_another_joint_is_wrong(tmp_path: Path) -> None:
    dup = JOINT2.replace("name: j2", "name: j1").replace("gear_ratio: 50", "gear_ratio: x")
    assert problems(tmp_path, MINIMAL + dup) == [
        "c.yaml:10: controllers[0].joints[1].name: expected a unique name among "
        "controllers[0].joints, found 'j1' again (first used by controllers[0].joints[0] at "
        "line 5)",
        "c.yaml:12: controllers[0].joints[1].gear_ratio: expected a number >= 1, found 'x'",
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
            # Narrower than two bins of the capture: every joint would read 0 rad/s, "OK".
            "estimator:\n  resonance_hz: [1.0e-300, 1.0e-299]",
            "c.yaml:11: controllers[0].joints[0].estimator.resonance_hz: expected a band at "
            "least 0.0166667 Hz wide (two frequency bins of the 120 s capture), found [1e-300, "
            "1e-299]",
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


UR_TWICE = """\
controllers:
  - name: a
    driver: ur_rtde
    settings: {host: localhost}
    joints:
      - {name: j1, index: 1, gear_ratio: 100, position_min_rad: -6, position_max_rad: 6,
         backlash_cycle: {motor_speed_rps: 10}}
  - name: b
    driver: ur_rtde
    settings:
      host: 127.0.0.1
    joints:
      - {name: j1, index: 1, gear_ratio: 100, position_min_rad: -6, position_max_rad: 6,
         backlash_cycle: {motor_speed_rps: 10}}
"""


def test_two_controllers_reaching_one_machine_are_refused(tmp_path: Path) -> None:
    # Two runners would move one robot at the same time: localhost and 127.0.0.1 are one host.
    assert problems(tmp_path, UR_TWICE) == [
        "c.yaml:11: controllers[1].settings: expected one controller per machine, found UR "
        "controller 127.0.0.1 again (first reached by controllers[0] at line 4): two runners "
        "would move it at once"
    ]
    assert problems(tmp_path, UR_TWICE.replace("host: 127.0.0.1", "host: 10.0.0.6")) == []
    # Simulated controllers reach no machine: any number of them.
    other = MINIMAL.split("\n", 1)[1].replace("name: r1", "name: r2")
    assert problems(tmp_path, MINIMAL + other) == []
