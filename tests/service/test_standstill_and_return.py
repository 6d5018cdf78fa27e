"""After an abort: the machine is confirmed at rest (or the stop is escalated), and the joint is
moved back to its test pose by a separate interlocked motion, or the record says a person must.

The simulated controller (drivers/sim/driver.py) keeps a stopped joint where the stop caught it
and reports joint speeds; `inject_stop_ignored` plays a drive that does not obey a stop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any

import pytest

from agent.config.model import ControllerSettings, JointSettings
from agent.errors import CycleAborted, InterlockError
from agent.service.interlocks import run_guarded_cycle
from agent.service.pose_recovery import return_to_start_pose
from agent.service.standstill import Standstill
from drivers.base import Capability, ControllerMode
from tests.support.service.interlocks import RULES, RecordingSim, cycle_of, run, sim

SCALE = 4.0  # the cycle's 1.3 s of motion paced to 5.2 s: an abort lands mid-motion


class NoProtectiveStop(RecordingSim):
    """A controller whose protocol has no protective-stop request."""

    async def protective_stop(self) -> str | None:
        return None


class CannotMoveAlone(RecordingSim):
    capabilities = RecordingSim.capabilities & ~Capability.RETURN_MOVE


# The joint runs at 15.7 rad/s in the cycle: move it back at 2 rad/s so the test stays short.
BACK = dataclasses.replace(RULES, return_speed_rad_s=2.0)


def _ctrl(joint: JointSettings) -> ControllerSettings:
    return ControllerSettings(name="robot", driver="sim", joints=(joint,), interlocks=BACK)


async def _abort_mid_motion(driver: RecordingSim, joint: JointSettings) -> CycleAborted:
    """Run a paced cycle and drop the permission signal 0.3 s into it."""
    await driver.connect()
    task = asyncio.create_task(run_guarded_cycle(driver, cycle_of(joint), RULES, joint))
    await asyncio.sleep(0.3)
    driver.inject_permission(False)
    with pytest.raises(CycleAborted) as info:
        await task
    return info.value


def test_an_abort_confirms_the_joint_at_rest_where_the_stop_caught_it(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint(test_pose_rad=0.3)
    driver = sim(joint, time_scale=SCALE)
    exc = run(_abort_mid_motion(driver, joint))
    standstill = exc.standstill
    assert isinstance(standstill, Standstill) and standstill.confirmed
    assert standstill.escalations == () and driver.protective_stops == 0
    stood_rad = standstill.positions_rad[joint.name]
    # Stopped mid-motion: away from the test pose, in the direction of travel.
    assert stood_rad > joint.test_pose_rad + 0.1
    assert f"at rest ({joint.name} at {stood_rad:.4f} rad)" in str(exc)


def test_a_stop_the_drive_ignores_is_escalated_to_a_protective_stop(
    make_joint: Callable[..., JointSettings], caplog: pytest.LogCaptureFixture
) -> None:
    joint = make_joint()
    driver = sim(joint, time_scale=SCALE)
    driver.inject_stop_ignored(2)  # the guard's stop and the repeated one
    with caplog.at_level(logging.ERROR):
        exc = run(_abort_mid_motion(driver, joint))
    standstill = exc.standstill
    assert standstill.confirmed and driver.protective_stops == 1
    assert standstill.escalations == ("stop requested again", "protective stop (simulated)")
    assert "event=standstill_not_confirmed" in caplog.text
    assert driver.stop_motion_calls == 2


def test_without_a_protective_stop_a_running_drive_is_reported_for_a_person(
    make_joint: Callable[..., JointSettings], caplog: pytest.LogCaptureFixture
) -> None:
    joint = make_joint()
    driver = sim(joint, NoProtectiveStop, time_scale=SCALE)
    driver.inject_stop_ignored(10)
    with caplog.at_level(logging.ERROR):
        exc = run(_abort_mid_motion(driver, joint))
    assert not exc.standstill.confirmed
    assert "NOT confirmed at rest" in str(exc) and "a person must check the machine" in str(exc)
    assert "no protective-stop request in this protocol" in str(exc)
    assert "event=standstill_failed" in caplog.text
    # What a person finds: nothing told the machine anything after the two stops.
    assert driver.stop_motion_calls == 2


def test_the_joint_is_moved_back_and_the_next_cycle_runs(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint(test_pose_rad=0.3)
    driver = sim(joint, time_scale=SCALE)
    ctrl = _ctrl(joint)

    async def go() -> tuple[str | None, Any]:
        await _abort_mid_motion(driver, joint)
        stood = (await driver.read_status()).joint_positions_rad[joint.name]
        # The next cycle would be refused at this pose.
        with pytest.raises(InterlockError, match="stands at"):
            await run_guarded_cycle(driver, cycle_of(joint), RULES, joint)
        driver.inject_permission(True)
        note = await return_to_start_pose(driver, ctrl, cycle_of(joint))
        assert driver.moves == [(joint.name, stood, joint.test_pose_rad)]
        return note, await run_guarded_cycle(driver, cycle_of(joint), RULES, joint)

    note, capture = run(go())
    assert note is not None and note.startswith(f"moved {joint.name} back from ")
    assert note.endswith(f"to {joint.test_pose_rad:.4f} rad at 2 rad/s")
    assert len(capture) > 0


def test_no_move_back_while_an_interlock_fails_then_it_happens_when_they_hold(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = sim(joint, time_scale=SCALE)
    ctrl = _ctrl(joint)

    async def go() -> tuple[str | None, str | None]:
        await _abort_mid_motion(driver, joint)
        driver.inject_mode(ControllerMode.PRODUCTION)
        waiting = await return_to_start_pose(driver, ctrl, cycle_of(joint))
        assert driver.moves == []
        driver.inject_mode(None)
        driver.inject_permission(True)
        return waiting, await return_to_start_pose(driver, ctrl, cycle_of(joint))

    waiting, done = run(go())
    assert waiting is not None and waiting.startswith("not moved back yet (")
    assert "production" in waiting and "permission signal is off" in waiting
    assert done is not None and done.startswith("moved ")


def test_a_driver_that_cannot_move_a_joint_alone_says_a_person_must(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint(test_pose_rad=-0.2)
    driver = sim(joint, CannotMoveAlone, time_scale=SCALE)

    async def go() -> str | None:
        await _abort_mid_motion(driver, joint)
        driver.inject_permission(True)
        return await return_to_start_pose(driver, _ctrl(joint), cycle_of(joint))

    note = run(go())
    assert note is not None and note.startswith(f"a person must move {joint.name} from ")
    assert "to -0.2000 rad (the sim driver cannot move a joint alone)" in note
    assert driver.moves == []


def test_an_interlock_dropping_during_the_move_back_stops_it(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = sim(joint, time_scale=SCALE)

    async def go() -> str | None:
        await _abort_mid_motion(driver, joint)
        driver.inject_permission(True)
        back = asyncio.create_task(return_to_start_pose(driver, _ctrl(joint), cycle_of(joint)))
        while not driver.moves:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        driver.inject_permission(False)
        return await back

    note = run(go())
    assert note is not None and note.startswith("the move back was aborted (")
    assert "permission signal is off" in note and "a person must move" in note


def test_a_joint_without_end_stops_is_at_its_pose_any_whole_turn_away() -> None:
    from agent.service.interlocks import pose_error_rad, wrapped_rad

    assert pose_error_rad(4 * math.pi + 0.002, 0.0, continuous=True) == pytest.approx(0.002)
    assert pose_error_rad(4 * math.pi + 0.002, 0.0, continuous=False) > 12.0
    assert wrapped_rad(3 * math.pi / 2) == pytest.approx(-math.pi / 2)


def test_a_continuous_joint_goes_back_the_short_way(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = sim(joint, time_scale=SCALE)
    driver.inject_pose(joint.name, 4 * math.pi + 1.0)  # two turns and a radian on

    async def go() -> str | None:
        await driver.connect()
        return await return_to_start_pose(driver, _ctrl(joint), cycle_of(joint))

    note = run(go())
    ((name, start, to),) = driver.moves
    assert name == joint.name
    assert note is not None and note.startswith("moved")
    assert to == pytest.approx(4 * math.pi) and abs(to - start) == pytest.approx(1.0)
