"""The identification test cycle end to end: ExcitationCycle through a driver, the simulated
robot's excitation (drivers.sim.excitation) and the multi-joint capture. Its analysis (the
daemon's job) is in test_identification_analysis.py."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pickle
import time
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.capture.files import save_capture
from agent.capture.model import Capture, CaptureMeta
from agent.capture.multi import (
    MultiCapture,
    is_multi_capture,
    load_multi_capture,
    save_multi_capture,
)
from agent.config.identification import IdentificationCycleSettings
from agent.errors import CaptureError, ConfigError, CycleAborted, DriverError
from agent.kinds.identification.analysis import (
    excitation_cycle,
)
from agent.schema.validate import build
from agent.schema.yaml_lines import load_yaml
from drivers.base import (
    BacklashCycle,
    Capability,
    ControllerMode,
    ControllerStatus,
    Cycle,
    Driver,
    ExcitationCycle,
    backlash_only,
)
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointWear, SimRobotSettings, SimSettings
from tests.support.identification.captures import (
    PLANAR,
    controller,
    cycle_settings,
    joints_of,
    sim_driver,
)

# ------------------------------------------------------------------------------- the cycle


def test_the_cycle_starts_where_its_trajectory_starts(cycle) -> None:
    traj = cycle.trajectory()
    q0, _, _ = traj.evaluate([0.0])
    assert cycle.joint == "all" and cycle.kind == "identification"
    assert cycle.joints == ("joint_1", "joint_2")
    assert dict(cycle.start_pose_rad) == pytest.approx(dict(zip(cycle.joints, q0[0], strict=True)))
    qe, qde, _ = traj.evaluate([cycle.period_s])  # and every period ends there, at rest
    assert qe[0] == pytest.approx(q0[0], abs=1e-12) and qde[0] == pytest.approx(0.0, abs=1e-12)
    assert cycle.duration_s == pytest.approx(2 * 4.0 + 2 * 0.45)
    assert cycle.gear_ratios == (100.0, 100.0) and cycle.encoder_bits is None  # 1.25 M counts
    assert pickle.loads(pickle.dumps(cycle)) == cycle  # it crosses the process pool
    meta = cycle.capture_meta("cell1", {"note": 1})
    assert meta.joint == "all" and meta.cycle == "identification"
    assert meta.extra["trajectory"] == traj.to_dict() and meta.extra["note"] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        cycle.periods = 3  # type: ignore[misc]


def test_the_cycle_refuses_what_it_cannot_run(cycle) -> None:
    with pytest.raises(ValueError, match="one row per joint"):
        dataclasses.replace(cycle, q0_rad=(0.0,))
    with pytest.raises(ConfigError, match="no identification: section"):
        excitation_cycle(dataclasses.replace(controller(), identification=None))
    with pytest.raises(ConfigError, match=r"joint_2 of .* not among the controller's joints"):
        excitation_cycle(dataclasses.replace(controller(), joints=joints_of(PLANAR)[:1]))
    bad_centre = dataclasses.replace(
        cycle_settings().trajectory, position_center_rad=(0.0, 0.0, 0.0)
    )
    with pytest.raises(ConfigError, match="position_center_rad: expected 2 values"):
        excitation_cycle(
            dataclasses.replace(
                controller(),
                identification=dataclasses.replace(cycle_settings(), trajectory=bad_centre),
            )
        )
    with pytest.raises(ConfigError, match=r"reaches condition number .* above"):
        excitation_cycle(controller(max_condition_number=1.5))


def test_settings_errors_name_the_file_line_and_field(tmp_path) -> None:
    f = tmp_path / "ident.yaml"
    f.write_text(
        "robot: no_such_robot.yaml\n"
        "sample_rate_hz: 20\n"
        "trajectory:\n"
        "  period_s: 4\n"
        "  harmonics: 1\n"
    )
    with pytest.raises(ConfigError) as err:
        build(IdentificationCycleSettings, load_yaml(f), str(f))
    text = str(err.value)
    assert f"{f}:5" in text and "harmonics" in text  # ge 2
    f.write_text(f"robot: {PLANAR}\nsample_rate_hz: 5\ndecimation: 20\n")
    with pytest.raises(ConfigError) as err:
        build(IdentificationCycleSettings, load_yaml(f), str(f))
    text = str(err.value)
    assert "sample_rate_hz" in text and "at least 100 samples per trajectory period" in text
    assert "harmonics" in text and "Nyquist" in text
    f.write_text("robot: no_such_robot.yaml\n")
    with pytest.raises(ConfigError, match=r"no robot description file 'no_such_robot\.yaml'"):
        build(IdentificationCycleSettings, load_yaml(f), str(f))
    f.write_text(f"robot: {PLANAR}\ntrajectory: {{periods: 3}}\n")
    s = build(IdentificationCycleSettings, load_yaml(f), str(f))
    assert s.duration_s == pytest.approx(3 * 10.0 + 2 * 0.5)


def test_the_sim_robot_settings_load_from_yaml(tmp_path) -> None:
    f = tmp_path / "sim.yaml"
    f.write_text(
        f"robot: {PLANAR}\n"
        "wear:\n"
        "  joint_2: {friction_scale: 2.0, stiffness_scale: 0.7}\n"
        "torque_noise_nm: 0.1\n"
    )
    s = build(SimRobotSettings, load_yaml(f), str(f))
    assert s.wear == {"joint_2": SimJointWear(2.0, 0.7)} and s.torque_noise_nm == 0.1
    f.write_text("robot: nowhere.yaml\nwear:\n  joint_2: {friction_scale: -1}\n")
    with pytest.raises(ConfigError) as err:
        build(SimRobotSettings, load_yaml(f), str(f))
    assert f"{f}:3" in str(err.value) and "friction_scale" in str(err.value)
    f.write_text("robot: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"no robot description file 'nowhere\.yaml'"):
        build(SimRobotSettings, load_yaml(f), str(f))


class BacklashOnly(Driver):
    name: ClassVar[str] = "backlash_only"
    capabilities: ClassVar[Capability] = Capability.CYCLES | Capability.MOTOR_ENCODER

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def read_status(self) -> ControllerStatus:
        return ControllerStatus(ControllerMode.STOPPED, True)

    async def run_cycle(self, cycle: Cycle) -> Capture:
        c = backlash_only(self, cycle)
        return Capture(np.arange(3.0), {"motor_pos_rad": np.zeros(3)}, CaptureMeta(joint=c.joint))

    async def stop_motion(self) -> None:
        return None


def test_a_driver_without_the_capability_refuses_the_cycle(cycle) -> None:
    d = BacklashOnly("cell9", None, ())
    with pytest.raises(DriverError, match=r"cannot run an identification cycle.*EXCITATION"):
        asyncio.run(d.run_cycle(cycle))
    backlash = BacklashCycle("cell9", "j1", 1, 6.28, 10.0, 1.0, 0.1, 100.0, 19, 0.0)
    assert asyncio.run(d.run_cycle(backlash)).meta.joint == "j1"


def test_the_sim_refuses_without_its_robot_or_away_from_the_start_pose(cycle) -> None:
    async def attempt(driver: SimDriver) -> None:
        await driver.connect()
        await driver.run_cycle(cycle)

    plain = SimDriver("cell1", SimSettings(seed=1), joints_of(PLANAR))
    with pytest.raises(DriverError, match="no `robot:` settings"):
        asyncio.run(attempt(plain))
    with pytest.raises(DriverError, match=r"joint joint_1 stands at 0\.0000 rad, the excitation"):
        asyncio.run(attempt(sim_driver()))  # the sim's joints stand at 0


def test_stop_motion_ends_the_excitation() -> None:
    short = ExcitationCycle(
        "cell1", "planar2", ("joint_1", "joint_2"), 1.0, (0.0, 0.0),
        ((-0.1, 0.1), (-0.05, 0.05)), ((0.0, 0.0), (0.0, 0.0)),
        periods=1, hold_s=0.1, settle_s=0.1, sample_rate_hz=200.0, gear_ratios=(100.0, 100.0),
    )  # fmt: skip
    driver = sim_driver(time_scale=10.0)  # 14 s of wall time unless stopped

    async def scenario() -> float:
        await driver.connect()
        for name, pose in short.start_pose_rad.items():
            driver.inject_pose(name, pose)
        task = asyncio.create_task(driver.run_cycle(short))
        await asyncio.sleep(0.5)
        started = time.monotonic()
        await driver.stop_motion()
        with pytest.raises(CycleAborted, match="motion stopped on request"):
            await task
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 2.0
    assert not driver._moving


# ------------------------------------------------------------------------------- the capture


def test_the_capture_holds_every_joint_s_two_encoders_and_torque(healthy, cycle) -> None:
    cap = healthy
    assert isinstance(cap, MultiCapture) and cap.joints == cycle.joints
    assert set(cap.channels) == {"link_pos_rad", "motor_pos_rad", "motor_torque_nm"}
    assert len(cap) == round(cycle.duration_s * cycle.sample_rate_hz) + 1
    assert cap.time_s[0] == pytest.approx(0.0) and cap.sample_rate_hz == pytest.approx(1000.0)
    assert cap.meta.cycle == "identification" and cap.meta.machine == "cell1"
    assert cap.meta.extra["saturated_samples"] == 0
    # the link follows the trajectory (PD tracking error well below the motion)
    moving_s = cycle.periods * cycle.period_s
    q_ref, _, _ = cycle.trajectory().evaluate(np.clip(cap.time_s - cycle.hold_s, 0.0, moving_s))
    err = cap.channel("link_pos_rad") - q_ref
    assert np.max(np.abs(err)) < 0.05 * np.ptp(q_ref, axis=0).min()
    # motor shaft = link * gear ratio + the gear's twist
    twist = cap.channel("motor_pos_rad") / 100.0 - cap.channel("link_pos_rad")
    assert 1e-5 < np.max(np.abs(twist)) < 0.01
    per_joint = cap.joint_captures()
    assert [c.meta.joint for c in per_joint] == list(cycle.joints)
    assert per_joint[1].meta.gear_ratio == 100.0
    torque = cap.channel("motor_torque_nm")
    assert np.array_equal(per_joint[1].channel("motor_torque_nm"), torque[:, 1])


def test_the_capture_file_round_trips_atomically(healthy, tmp_path) -> None:
    path = tmp_path / "ident.npz"
    path.write_bytes(b"old")
    save_multi_capture(healthy, path)
    assert sorted(os.listdir(tmp_path)) == ["ident.npz"]  # replaced whole, no temp file left
    back = load_multi_capture(path)
    assert back.joints == healthy.joints and back.gear_ratios == healthy.gear_ratios
    assert back.meta == healthy.meta and back.source == str(path)
    for name, values in healthy.channels.items():
        assert np.array_equal(back.channels[name], values)
    assert is_multi_capture(path)
    single = tmp_path / "single.npz"
    save_capture(healthy.joint_captures()[0], single)
    assert not is_multi_capture(single)
    with pytest.raises(CaptureError, match="not a multi-joint capture"):
        load_multi_capture(single)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CaptureError, match="corrupt or truncated"):
        load_multi_capture(path)


def test_a_malformed_capture_is_refused_naming_the_problem() -> None:
    t = np.arange(4.0)
    ok = {"link_pos_rad": np.zeros((4, 2))}
    with pytest.raises(CaptureError, match=r"shape \(4,\), expected \(4, 2\)"):
        MultiCapture(t, ("a", "b"), {"link_pos_rad": np.zeros(4)})
    with pytest.raises(CaptureError, match="unknown channel 'speed'"):
        MultiCapture(t, ("a", "b"), {"speed": np.zeros((4, 2))})
    bad = np.zeros((4, 2))
    bad[2, 1] = np.nan
    with pytest.raises(CaptureError, match="link_pos_rad of joint b sample 2 is not finite"):
        MultiCapture(t, ("a", "b"), {"link_pos_rad": bad})
    with pytest.raises(CaptureError, match="distinct"):
        MultiCapture(t, ("a", "a"), ok)
    with pytest.raises(CaptureError, match="strictly increasing at sample 2"):
        MultiCapture(np.array([0.0, 1.0, 1.0, 2.0]), ("a", "b"), ok)
    with pytest.raises(CaptureError, match="gear_ratios"):
        MultiCapture(t, ("a", "b"), ok, gear_ratios=(1.0, -1.0))
    cap = MultiCapture(t, ["a", "b"], ok)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="read-only"):
        cap.channels["link_pos_rad"][0, 0] = 1.0


@settings(max_examples=40, deadline=None)
@given(
    n_samples=st.integers(2, 40),
    n_joints=st.integers(1, 7),
    seed=st.integers(0, 2**32 - 1),
    with_ratios=st.booleans(),
)
def test_any_capture_survives_the_file(
    tmp_path_factory, n_samples: int, n_joints: int, seed: int, with_ratios: bool
) -> None:
    rng = np.random.default_rng(seed)
    cap = MultiCapture(
        np.cumsum(rng.uniform(1e-4, 1.0, n_samples)),
        tuple(f"j{k}" for k in range(n_joints)),
        {
            "link_pos_rad": rng.normal(size=(n_samples, n_joints)),
            "motor_torque_nm": rng.normal(size=(n_samples, n_joints)) * 1e3,
        },
        CaptureMeta(machine="m", joint="all", cycle="identification", extra={"k": [1, 2]}),
        tuple(rng.uniform(1.0, 200.0, n_joints)) if with_ratios else None,
    )
    path = tmp_path_factory.mktemp("cap") / "c.npz"
    save_multi_capture(cap, path)
    back = load_multi_capture(path)
    assert back.joints == cap.joints and back.gear_ratios == cap.gear_ratios
    assert back.meta == cap.meta and np.array_equal(back.time_s, cap.time_s)
    assert all(np.array_equal(back.channels[k], v) for k, v in cap.channels.items())
    joined = MultiCapture.from_joint_captures(back.joint_captures())
    assert all(np.array_equal(joined.channels[k], v) for k, v in cap.channels.items())
