"""Safety before every motion: each interlock refuses the cycle and nothing moves; disabled
rules do not block; the pose tolerance and the start pose of every joint are checked.

The driver is the simulated fake controller, subclassed only to record what the guard asked of
it (tests/support/service/interlocks.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.capture.model import Capture
from agent.config.model import BacklashCycleSettings, InterlockSettings, JointSettings
from agent.errors import InterlockError
from agent.service.interlocks import CycleLimits, interlock_violations, run_guarded_cycle
from drivers.base import ControllerMode, ControllerStatus
from tests.support.service.interlocks import (
    RULES,
    TOLERANCE_RAD,
    RecordingSim,
    cycle_of,
    inject_production,
    others,
    run,
    sim,
)

# --- before motion: every interlock refuses the cycle, and nothing moves -------------------------

REFUSALS: dict[str, tuple[Callable[[RecordingSim], None], str]] = {
    "production": (
        inject_production,
        "controller is in production mode, not stopped for production",
    ),
    "manual": (lambda d: d.inject_mode(ControllerMode.MANUAL), "controller is in manual mode"),
    "fault": (lambda d: d.inject_mode(ControllerMode.FAULT), "controller is in fault mode"),
    "permission": (lambda d: d.inject_permission(False), "permission signal is off"),
    "alarm": (
        lambda d: d.inject_alarm("E-STOP 12", "door open"),
        "active alarm: E-STOP 12, door open",
    ),
    "override": (lambda d: d.inject_override(0.5), "speed override is 50 %, not 100 %"),
    "override_above": (lambda d: d.inject_override(1.2), "speed override is 120 %, not 100 %"),
    "pose_outside": (
        lambda d: d.inject_pose("j1", 0.3 + 1.001 * TOLERANCE_RAD),
        "joint j1 stands at 0.3100 rad, test pose is 0.3000 +- 0.01 rad",
    ),
    "pose_outside_below": (
        lambda d: d.inject_pose("j1", 0.3 - 1.001 * TOLERANCE_RAD),
        "joint j1 stands at 0.2900 rad",
    ),
    "operator_present": (lambda d: d.inject_operator(True), "an operator is present"),
    "operator_unknown": (lambda d: d.inject_operator(None), "operator presence is unknown"),
    "stop_over": (
        lambda d: d.inject_stop_expected(0.0),
        "the production stop is over (stop_expected_s ran out)",
    ),
    "status_error": (
        lambda d: setattr(d, "status_failure", "raise"),
        "cannot read controller status: link lost",
    ),
    "status_timeout": (
        lambda d: setattr(d, "status_failure", "hang"),
        "cannot read controller status: timeout",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_interlock_refuses_the_cycle_before_any_motion(
    case: str, make_joint: Callable[..., JointSettings]
) -> None:
    joint = make_joint(test_pose_rad=0.3)
    driver = sim(joint)
    inject, reason = REFUSALS[case]

    async def scenario() -> None:
        await driver.connect()
        inject(driver)
        started = time.monotonic()
        with pytest.raises(InterlockError) as err:
            await run_guarded_cycle(
                driver, cycle_of(joint), RULES, joint, CycleLimits(status_timeout_s=0.2)
            )
        assert time.monotonic() - started < 2.0  # a hung status read is given up quickly
        assert reason in str(err.value)
        assert not others()

    run(scenario())
    assert driver.run_cycle_calls == 0
    assert driver.stop_motion_calls == 0  # nothing was started, so nothing had to be stopped


def test_a_disconnected_controller_refuses_the_cycle(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = sim(joint)  # never connected
    with pytest.raises(InterlockError, match="controller is in disconnected mode"):
        run(run_guarded_cycle(driver, cycle_of(joint), RULES, joint))
    assert driver.run_cycle_calls == 0


def test_a_joint_the_controller_does_not_report_is_refused(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = sim(joint, joints=())  # a controller that knows no joint: position unknown

    async def scenario() -> None:
        await driver.connect()
        await run_guarded_cycle(driver, cycle_of(joint), RULES, joint)

    with pytest.raises(InterlockError, match="position of joint j1 is unknown"):
        run(scenario())
    assert driver.run_cycle_calls == 0


def test_every_violated_interlock_is_named(make_joint: Callable[..., JointSettings]) -> None:
    joint = make_joint()
    driver = sim(joint, permission=False, alarms=("overtemp",), speed_override=0.8)

    async def scenario() -> None:
        await driver.connect()
        driver.inject_pose("j1", 1.0)
        await run_guarded_cycle(driver, cycle_of(joint), RULES, joint)

    with pytest.raises(InterlockError) as err:
        run(scenario())
    text = str(err.value)
    for part in (
        "permission signal is off",
        "active alarm: overtemp",
        "speed override is 80 %",
        "joint j1 stands at 1.0000 rad",
    ):
        assert part in text
    assert driver.run_cycle_calls == 0


@pytest.mark.parametrize("offset", [0.999 * TOLERANCE_RAD, -0.999 * TOLERANCE_RAD, 0.0])
def test_a_joint_inside_the_pose_tolerance_runs_its_cycle(
    offset: float, make_joint: Callable[..., JointSettings]
) -> None:
    joint = make_joint(test_pose_rad=0.3)
    driver = sim(joint)

    async def scenario() -> Capture:
        await driver.connect()
        driver.inject_pose("j1", 0.3 + offset)
        return await run_guarded_cycle(driver, cycle_of(joint), RULES, joint)

    capture = run(scenario())
    assert driver.run_cycle_calls == 1
    assert driver.cycle_ending == "finished"
    assert driver.stop_motion_calls == 0
    assert len(capture) == 401  # 2 load turns of 0.4 s at 500 Hz, both ends included


@settings(max_examples=200, deadline=None)
@given(
    pose=st.floats(-math.pi, math.pi),
    offset=st.floats(-0.1, 0.1),
    tolerance=st.floats(1e-4, 0.05),
)
def test_the_pose_interlock_holds_exactly_within_the_tolerance(
    pose: float, offset: float, tolerance: float
) -> None:
    joint = JointSettings(
        name="j1",
        index=1,
        gear_ratio=40.0,
        test_pose_rad=pose,
        backlash_cycle=BacklashCycleSettings(motor_speed_rps=100.0),
    )
    position = pose + offset
    status = ControllerStatus(ControllerMode.STOPPED, True, {"j1": position})
    problems = interlock_violations(status, InterlockSettings(pose_tolerance_rad=tolerance), joint)
    outside = abs(position - pose) > tolerance
    assert bool(problems) == outside
    # During motion the pose changes by design: it is not an interlock then.
    assert (
        interlock_violations(
            status, InterlockSettings(pose_tolerance_rad=tolerance), joint, running=True
        )
        == []
    )


DISABLED: dict[str, tuple[InterlockSettings, Callable[[RecordingSim], None]]] = {
    "production": (InterlockSettings(require_production_stop=False), inject_production),
    "permission": (
        InterlockSettings(require_permission=False),
        lambda d: d.inject_permission(False),
    ),
    "alarm": (InterlockSettings(require_no_alarm=False), lambda d: d.inject_alarm("warning 7")),
    "override": (InterlockSettings(require_full_override=False), lambda d: d.inject_override(0.3)),
    "pose": (InterlockSettings(pose_tolerance_rad=0.5), lambda d: d.inject_pose("j1", 0.4)),
    "operator": (InterlockSettings(), lambda d: d.inject_operator(None)),
}


@pytest.mark.parametrize("rule", sorted(DISABLED))
def test_a_disabled_rule_does_not_block(
    rule: str, make_joint: Callable[..., JointSettings]
) -> None:
    rules, inject = DISABLED[rule]
    joint = make_joint()
    driver = sim(joint)

    async def scenario() -> Capture:
        await driver.connect()
        inject(driver)
        return await run_guarded_cycle(driver, cycle_of(joint), rules, joint)

    capture = run(scenario())
    assert driver.run_cycle_calls == 1
    assert driver.cycle_ending == "finished"
    assert len(capture) == 401


@pytest.mark.parametrize("mode", [ControllerMode.MANUAL, ControllerMode.FAULT])
def test_manual_and_fault_modes_block_even_without_the_production_rule(
    mode: ControllerMode, make_joint: Callable[..., JointSettings]
) -> None:
    joint = make_joint()
    driver = sim(joint)

    async def scenario() -> None:
        await driver.connect()
        driver.inject_mode(mode)
        await run_guarded_cycle(
            driver, cycle_of(joint), InterlockSettings(require_production_stop=False), joint
        )

    with pytest.raises(InterlockError, match=f"controller is in {mode.value} mode"):
        run(scenario())
    assert driver.run_cycle_calls == 0


def test_every_joint_of_the_start_pose_is_checked(
    make_joint: Callable[..., JointSettings],
) -> None:
    """A cycle that moves several joints names each one standing away from its start pose."""
    joint = make_joint()
    status = ControllerStatus(
        mode=ControllerMode.STOPPED,
        permission=True,
        joint_positions_rad={"j1": 0.0, "j2": 0.5, "j3": -0.2},
        operator_present=False,
    )
    pose = {"j1": 0.0, "j2": 0.1, "j3": -0.2, "j4": 0.0}
    problems = interlock_violations(status, RULES, joint, start_pose_rad=pose)
    assert problems == [
        "joint j2 stands at 0.5000 rad, test pose is 0.1000 +- 0.01 rad",
        "position of joint j4 is unknown",
    ]
    assert interlock_violations(status, RULES, joint, start_pose_rad={"j1": 0.0, "j3": -0.2}) == []
