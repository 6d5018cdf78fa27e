"""Drive gains from a payload pair (agent.estimation.identification.drive_gains; `jha calibrate
drive-gains`; issue 30, point 6): on a simulated UR5e pair with what the estimator is not told
(as-built arm, Stribeck and load-dependent friction, cogging, a cable spring, the second run
1 K warmer, the stated payload 0.5 % and 1 mm off, current noise, a quantised encoder), every
gain it gives lies in its 95 % interval; a joint the payload does not load is null with the
reason; the calibration file is what the UR driver reads, and one with a null joint refuses
the excitation cycle rather than guess."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from agent.capture.files import write_csv
from agent.capture.model import Capture
from agent.cli.main import main
from agent.errors import ConfigError, DriverError, EstimationError
from agent.estimation.identification.drive_gains import Payload, drive_gains
from agent.estimation.identification.drive_gains_file import read_torque_constants
from agent.models.robot.description import load_robot
from tests.peers.ur_controller.excitation import ROBOT, controller, excitation_cycle, write_config
from tests.peers.ur_controller.harness import run
from tests.support.identification.payload_pair import payload_pair

OFF_AXIS = Payload(5.0, (0.06, 0.02, 0.08))  # 5 kg (a UR5e's rated payload), off every axis


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_gain_given_lies_in_its_interval(seed: int) -> None:
    robot = load_robot(ROBOT)
    pair = payload_pair(robot, OFF_AXIS, seed=seed)
    result = drive_gains(robot, pair.without, pair.with_payload, pair.stated)
    given = [
        (j, g) for j, g in zip(result.joints, pair.true_gains_nm_a, strict=True) if j.gain_nm_a
    ]
    assert len(given) >= 5  # the base's own friction change can leave it "cannot judge"
    for j, true in given:
        assert j.interval_95 is not None and j.interval_95[0] <= true <= j.interval_95[1], j
    for j in result.joints:
        if j.gain_nm_a is None:
            assert j.reason is not None and j.reason.startswith("cannot judge")


def test_a_joint_the_payload_does_not_load_is_not_given_a_gain() -> None:
    robot = load_robot(ROBOT)
    # A point mass on the last joint's axis: no torque about it, whatever the motion.
    pair = payload_pair(robot, Payload(5.0, (0.0, 0.0, 0.08)), seed=4)
    result = drive_gains(robot, pair.without, pair.with_payload, pair.stated)
    last = result.joints[-1]
    assert last.gain_nm_a is None and last.interval_95 is None
    assert last.reason is not None and "cannot judge" in last.reason
    assert result.joints[1].gain_nm_a is not None  # the shoulder carries it


def test_two_different_trajectories_are_not_a_pair() -> None:
    robot = load_robot(ROBOT)
    a = payload_pair(robot, OFF_AXIS, seed=1)
    b = payload_pair(robot, OFF_AXIS, seed=2)
    with pytest.raises(EstimationError, match="a payload pair is the same trajectory twice"):
        drive_gains(robot, a.without, b.with_payload, a.stated)


def _write(captures: tuple[Capture, ...], directory: Path) -> None:
    directory.mkdir()
    for c in captures:
        write_csv(c, directory / f"{c.meta.joint}.csv", require_motor=False)


def test_the_calibration_reaches_the_ur_driver(tmp_path: Path) -> None:
    robot = load_robot(ROBOT)
    pair = payload_pair(robot, OFF_AXIS, seed=2)
    _write(pair.without, tmp_path / "without")
    _write(pair.with_payload, tmp_path / "with")
    gains = tmp_path / "gains.yaml"
    com = ",".join(f"{c:.6f}" for c in pair.stated.com_m)
    argv = ["calibrate", "drive-gains", "--robot", ROBOT, "--without", str(tmp_path / "without"),
            "--with", str(tmp_path / "with"), "--payload-mass", f"{pair.stated.mass_kg:.6f}",
            "--payload-com", com, "-o", str(gains)]  # fmt: skip
    assert main(argv) == 0
    doc = yaml.safe_load(gains.read_text())
    given = doc["torque_constants_nm_a"]
    gear = np.array([j.gear_ratio for j in robot.joints])
    truth = pair.true_gains_nm_a / gear
    for value, true, entry in zip(given, truth, doc["joints"], strict=True):
        if value is None:
            assert entry["reason"]
        else:
            lo, hi = (v / entry["gear_ratio"] for v in entry["interval_95"])
            assert lo <= true <= hi
    # A complete calibration: the driver's torque constants come from the file.
    complete = tmp_path / "complete.yaml"
    doc["torque_constants_nm_a"] = [
        v if v is not None else float(t) for v, t in zip(given, truth, strict=True)
    ]
    complete.write_text(yaml.safe_dump(doc))
    ctrl = controller(write_config(tmp_path, "127.0.0.1"))
    settings = dataclasses.replace(
        ctrl.settings, torque_constants_nm_a=None, drive_gains_file=str(complete)
    )
    assert settings.torque_constants() == pytest.approx(doc["torque_constants_nm_a"])
    assert settings.check_files(tmp_path) == []
    # One joint not judged: the driver refuses the cycle, naming the joint and why.
    doc["torque_constants_nm_a"][5] = None
    doc["joints"][5]["reason"] = "cannot judge: the payload changes this joint's torque ..."
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="no drive gain for wrist_3: cannot judge"):
        read_torque_constants(partial, 6)
    settings = dataclasses.replace(settings, drive_gains_file=str(partial))
    assert settings.check_files(tmp_path)[0][0] == "drive_gains_file"
    from drivers.ur_rtde.driver import UrRtdeDriver

    driver = UrRtdeDriver(ctrl.name, settings, ctrl.joints)
    with pytest.raises(DriverError, match="no drive gain for wrist_3"):
        run(driver.run_cycle(excitation_cycle(ctrl)))
