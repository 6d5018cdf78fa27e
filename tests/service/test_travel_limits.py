"""A cycle whose whole travel does not fit the joint's limits is refused before motion; a joint a
driver may move needs limits in the config (or from the robot description or the driver)."""

from __future__ import annotations

import asyncio
import errno
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import drivers.base
from agent.config.load import config_issues, load_config
from agent.config.model import InterlockSettings, JointSettings
from agent.config.travel_limits import joint_travel, travel_issues
from agent.errors import TravelRefused
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import check_interlocks, run_guarded_cycle
from drivers.base import BacklashCycle
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimSettings
from drivers.travel import (
    CONTINUOUS,
    UNKNOWN_RAMP_S,
    JointTravel,
    Ramps,
    TravelLimits,
    backlash_travel_rad,
    check_backlash_travel,
    check_excitation_travel,
)
from drivers.ur_rtde.driver import UrRtdeDriver

ROOT = Path(__file__).resolve().parents[2]
UR5E = ROOT / "config" / "robots" / "ur5e.yaml"


def _ur_config(tmp_path: Path, joint_extra: str = "", controller_extra: str = "") -> Path:
    """The README's UR example: the wrist (joint 4), 2 load turns, test pose -1.57 rad."""
    path = tmp_path / "ur.yaml"
    path.write_text(
        f"""\
controllers:
  - name: ur5e
    driver: ur_rtde
{controller_extra}    settings:
      host: 127.0.0.1
    joints:
      - name: wrist1
        index: 4
        gear_ratio: 101
        test_pose_rad: -1.57
{joint_extra}        backlash_cycle:
          motor_speed_rps: 40
          load_turns: 2
          sample_rate_hz: 500
          settle_s: 0.3
"""
    )
    return path


def _refusal(path: Path) -> str:
    ctrl = load_config(path).controllers[0]
    driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
    cycle = backlash_cycle(ctrl, ctrl.joints[0])
    # Never connected: the refusal comes before any status read, let alone motion.
    with pytest.raises(TravelRefused) as info:
        asyncio.run(check_interlocks(driver, cycle, ctrl.interlocks, ctrl.joints[0]))
    return str(info.value)


def test_the_documented_ur_wrist_example_is_refused_by_the_ur_joint_range(tmp_path: Path) -> None:
    message = _refusal(_ur_config(tmp_path))
    assert "ur5e/wrist1: the cycle travels over [-1.570, " in message
    assert "UR joint range +-360 deg" in message and "refused before motion" in message
    # -1.57 rad plus two load turns (12.57 rad) and more: beyond +2 pi.
    hi = float(message.split("[-1.570, ")[1].split("]")[0])
    assert hi > -1.57 + 4 * math.pi


def test_limits_come_from_the_robot_description(tmp_path: Path) -> None:
    path = _ur_config(tmp_path, controller_extra=f"    robot: {UR5E}\n")
    ctrl = load_config(path).controllers[0]
    travel = joint_travel(ctrl, ctrl.joints[0])
    assert isinstance(travel, TravelLimits) and f"robot description {UR5E}" in travel.source
    assert f"robot description {UR5E}" in _refusal(path)


def test_configured_limits_win_and_a_fitting_cycle_passes_the_check(tmp_path: Path) -> None:
    extra = "        position_min_rad: -2.0\n        position_max_rad: 20.0\n"
    ctrl = load_config(_ur_config(tmp_path, joint_extra=extra)).controllers[0]
    cycle = backlash_cycle(ctrl, ctrl.joints[0])
    assert cycle.travel_limits == TravelLimits(-2.0, 20.0, 0.05, "configured")
    driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
    lo, hi = backlash_travel_rad(cycle, driver.ramps(cycle))
    assert check_backlash_travel(cycle, driver.ramps(cycle)) is None and -1.95 <= lo < hi <= 19.95


def test_a_moving_joint_without_limits_is_a_config_error_with_its_line(tmp_path: Path) -> None:
    from tests.peers.opcua.harness import config_text

    text = config_text(state_dir=str(tmp_path))
    marker = "        continuous_rotation: true"
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith(marker))
    path = tmp_path / "opcua.yaml"
    path.write_text("".join(lines[:at] + lines[at + 1 :]))
    issues = config_issues(path)
    travel = [i for i in issues if "travel limits" in i.message]
    assert len(travel) == 1, issues
    # Reported at the joint's first line ("- name: axis4", 5 lines above the removed one).
    assert travel[0].line == at - 4
    assert travel[0].path == "controllers[0].joints[0].position_min_rad"
    assert "continuous_rotation" in travel[0].message


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("        position_min_rad: -1.0\n", "position_max_rad"),
        ("        position_min_rad: 1.0\n        position_max_rad: -1.0\n", "position_max_rad"),
        (
            "        position_min_rad: -1.0\n        position_max_rad: 1.0\n"
            "        continuous_rotation: true\n",
            "continuous_rotation",
        ),
    ],
)
def test_contradictory_limits_are_config_errors(tmp_path: Path, extra: str, key: str) -> None:
    issues = config_issues(_ur_config(tmp_path, joint_extra=extra))
    assert [i.path for i in issues] == [f"controllers[0].joints[0].{key}"], issues


def _sim_cycle(limits: JointTravel) -> BacklashCycle:
    return BacklashCycle(
        controller="sim",
        joint="j1",
        joint_index=1,
        motor_speed_rad_s=2 * math.pi * 100,
        gear_ratio=40,
        duration_s=0.8,
        settle_s=0.5,
        sample_rate_hz=500,
        encoder_bits=19,
        test_pose_rad=0.0,
        travel_limits=limits,
    )


@pytest.mark.parametrize("limits", [TravelLimits(-1.0, 5.0), None])
def test_the_guard_refuses_before_the_driver_moves(
    make_joint: Callable[..., JointSettings], limits: TravelLimits | None
) -> None:
    joint = make_joint()
    driver = SimDriver("sim", SimSettings(production_runs_s=0.0, seed=1), (joint,))
    cycle = _sim_cycle(limits)

    async def go() -> str:
        await driver.connect()
        with pytest.raises(TravelRefused) as info:
            await run_guarded_cycle(driver, cycle, _rules(), joint)
        return str(info.value)

    message = asyncio.run(go())
    assert driver._cycles_run == 0 and driver.stop_motion_calls == 0
    assert ("outside" in message) if limits is not None else ("no travel limits" in message)


def test_a_continuous_joint_has_no_position_limit() -> None:
    assert check_backlash_travel(_sim_cycle(CONTINUOUS), Ramps()) is None


def test_unknown_ramps_are_bounded_generously() -> None:
    cycle = _sim_cycle(TravelLimits(-100.0, 100.0))
    speed = cycle.motor_speed_rad_s / cycle.gear_ratio
    known = backlash_travel_rad(cycle, Ramps(accel_rad_s2=1e6, decel_rad_s2=1e6))[1]
    unknown = backlash_travel_rad(cycle, Ramps())[1]
    assert known == pytest.approx(speed * 1.3, rel=1e-3)
    assert unknown == pytest.approx(speed * (1.3 + 2 * UNKNOWN_RAMP_S))


def test_an_excitation_beyond_a_joint_limit_is_refused(tmp_path: Path) -> None:
    from tests.peers.ur_controller.excitation import controller, excitation_cycle, write_config

    # The UR peer's random (not optimised) excitation: the design's SLSQP takes half a minute.
    ctrl = controller(write_config(tmp_path, "127.0.0.1"))
    cycle = excitation_cycle(ctrl)
    driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
    assert check_excitation_travel(cycle, driver.ramps(cycle)) is None
    # The same trajectory with the first joint's limits just inside its swing.
    q = cycle.trajectory().evaluate([0.0, cycle.period_s / 4, cycle.period_s / 2])[0][:, 0]
    tight = TravelLimits(float(q.min()) - 0.01, float(q.max()) + 0.01, 0.0)
    narrowed = type(cycle)(**{**cycle.__dict__, "travel_limits": (tight, *cycle.travel_limits[1:])})
    message = check_excitation_travel(narrowed, driver.ramps(cycle))
    assert message is not None and f"ur5e/{cycle.joints[0]}: the excitation travels" in message


def _rules() -> InterlockSettings:
    return InterlockSettings(require_production_stop=False, require_permission=False)


def test_limits_unreadable_for_want_of_descriptors_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Out of descriptors (EMFILE) the driver's module cannot be read: the refusal names that,
    # not a config mistake a person would then hunt for.
    ctrl = load_config(_ur_config(tmp_path)).controllers[0]

    def no_descriptors(name: str) -> None:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(drivers.base, "load_driver_class", no_descriptors)
    assert travel_issues(ctrl) == [
        (0, "position_min_rad", "the driver ur_rtde's joint limits could not be read: "
         "Too many open files"),
    ]  # fmt: skip
    assert joint_travel(ctrl, ctrl.joints[0]) is None
