"""Each way a cycle on a UR arm is aborted: where the joint ends up and what the agent does next.

Not among the `realtime` tests that run alone (tests/conftest.py): these judge no 2 ms timing.

Against the UR controller emulator (tests/peers/ur_controller) through the real ur_rtde clients.
A fault is played 0.5 s into the motion; then, as the daemon does after an abort
(agent.service.jobs.run_job), the agent tries to move the joint back to its test pose
(agent.service.pose_recovery). Every cell of the "aborts" summary table is read from the
emulator (its command log, whether the arm moves, its joint position) or from what the agent
said, never written as a constant.
"""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path
from typing import Any

import pytest

from agent.errors import CycleAborted, DriverError
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import CycleLimits, run_guarded_cycle
from agent.service.pose_recovery import return_to_start_pose
from drivers.ur_rtde.driver import UrRtdeDriver
from tests.peers.ur_controller import UrEmulator
from tests.peers.ur_controller.harness import (
    FAST,
    LOAD_ATTEMPTS,
    MISSED,
    emulator_args,
    ended_by_load,
    run,
    setup,
    wait_until,
)
from tests.support.summary import abort

WRIST = 3  # wrist1, index 4 in the harness config

CAUSES: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    # cause: (fault 0.5 s into the motion, what a person or the plant does to clear it)
    "protective stop": (
        {"op": "set", "safety_mode": "PROTECTIVE_STOP"},
        {"op": "set", "safety_mode": "NORMAL"},
    ),
    "robot mode change (power off)": (
        {"op": "set", "robot_mode": "POWER_OFF"},
        {"op": "set", "robot_mode": "RUNNING"},
    ),
    "stale data (stream frozen, sockets open)": (
        {"op": "set", "rtde_stall": True},
        {"op": "set", "rtde_stall": False},
    ),
    "controller killed": ({"op": "die"}, None),
}


def _short(note: str | None) -> str:
    if note is None:
        return "nothing: at its test pose"
    return note.split(" (")[0] if note.startswith("not moved back") else note.split(" from ")[0]


@pytest.mark.parametrize("cause", list(CAUSES))
def test_where_the_joint_ends_and_what_the_agent_does_next(tmp_path: Path, cause: str) -> None:
    fault_action, clear = CAUSES[cause]
    # The stall played here lasts until it is cleared: a stale_after_s of 1 s sees it as surely as
    # the default 0.1 s (whose detection test_driver.py judges, run alone), and unlike 0.1 s it is
    # not tripped by the loaded machine's own hiccups before the fault or during the move back
    # (this test runs beside three other test processes). Lost packages likewise are
    # test_driver.py's subject: the longest run the driver may bridge.
    host, path, ctrl, joint = setup(tmp_path, **FAST, stale_after_s=1.0)
    cycle = backlash_cycle(ctrl, joint)
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        with UrEmulator(host, *emulator_args(path)) as emu:
            emu.call("on_motion", delay_s=0.5, action=fault_action)

            async def abort_then_recover(
                emu: UrEmulator,
            ) -> tuple[str, dict[str, Any], str | None, str | None]:
                driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
                await driver.connect()
                try:
                    with pytest.raises((CycleAborted, DriverError)) as info:
                        await run_guarded_cycle(driver, cycle, ctrl.interlocks, joint)
                    # Where the stop left the arm, before the agent does anything more.
                    stopped: dict[str, Any] = {}
                    if emu.alive:
                        stopped = await asyncio.to_thread(
                            wait_until, emu, lambda s: not s["moving"]
                        )
                    await asyncio.sleep(0.3)  # the worker restarts after a link failure
                    first = await return_to_start_pose(driver, ctrl, cycle)
                    second = None
                    if clear is not None and first is not None and first.startswith("not moved"):
                        emu.call(**clear)
                        await asyncio.sleep(0.5)
                        second = await return_to_start_pose(driver, ctrl, cycle)
                    return str(info.value), stopped, first, second
                finally:
                    await driver.close()

            message, stopped, first, second = run(abort_then_recover(emu), 120.0)
            final_state = wait_until(emu, lambda s: not s["moving"]) if emu.alive else {}
        # None of the faults played loses packages: a run of them lost ended the cycle before
        # the fault (the machine's load), and the attempt says nothing about the fault.
        if attempt == LOAD_ATTEMPTS or MISSED not in message:
            break
        print(f"attempt {attempt}: ended by the load before the fault: {message}")
    print(cause, "|", message, "|", first, "|", second)
    steps = [_short(first)] + ([f"after clearing: {_short(second)}"] if second else [])
    if stopped:
        after = stopped["commands"][stopped["commands"].index("speedj") :]
        by_agent = "speed_stop" in after or "stopj" in after
        off = abs(stopped["q"][WRIST] - joint.test_pose_rad)
        abort(
            cause,
            stopped_by="agent (speedStop, stopJ)" if by_agent else "controller",
            at_rest=not stopped["moving"],
            off_pose_rad=off,
            next_step="; ".join(steps),
        )
        final = second or first
        # Moved back, waiting for the interlocks, or handed to a person: an aborted move back
        # (a new fault while it ran) names the person's step too.
        assert (
            final is None
            or final.startswith(("moved", "not moved", "a person must"))
            or (final.startswith("the move back was aborted (") and "a person must move" in final)
        ), final
        if final is not None and final.startswith("moved"):
            back = abs(final_state["q"][WRIST] - joint.test_pose_rad)
            assert back < ctrl.interlocks.pose_tolerance_rad, final_state["events"]
    else:  # the controller is gone: nothing on its side can be read any more
        abort(cause, stopped_by="unknown", at_rest=False, off_pose_rad=None, next_step=steps[0])
        assert first is not None and "status unreadable" in first
        assert "NOT confirmed at rest" in message and "a person must check" in message


def test_a_fault_in_the_move_back_keeps_the_complete_capture(tmp_path: Path) -> None:
    # return_to_start: the agent moves back after. This test needs a complete capture and runs
    # beside three other test processes: an emulator stalled 0.1 s by that load made the data
    # stale and aborted the capture (CI, once). Stale data and lost packages are other tests'
    # subjects (tests/drivers/ur_rtde/test_driver.py): here they are given room.
    host, path, ctrl, joint = setup(tmp_path, stale_after_s=1.0)
    cycle = backlash_cycle(ctrl, joint)

    async def go() -> tuple[Any, str | None]:
        driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
        await driver.connect()
        try:
            # As agent.service.jobs.run_job: the cycle, its capture, then the move back.
            # The status watcher's 2 s timeout is not this test's subject: on a loaded
            # machine a slow dashboard answer aborted the cycle before its move back.
            capture = await run_guarded_cycle(
                driver, cycle, ctrl.interlocks, joint, CycleLimits(status_timeout_s=15.0)
            )
            assert driver.returns_by_agent
            back = await return_to_start_pose(driver, ctrl, cycle, speed_rad_s=math.inf)
            return capture, back
        finally:
            await driver.close()

    for attempt in range(1, LOAD_ATTEMPTS + 1):
        with UrEmulator(host, *emulator_args(path)) as emu:
            # Armed during the capture: a protective stop 0.2 s into the next movej, the move
            # back.
            stop = {"op": "set", "safety_mode": "PROTECTIVE_STOP"}
            arm = {"op": "on_motion", "when": "movej", "delay_s": 0.2, "action": stop}
            emu.call("on_motion", delay_s=0.5, action=arm)
            try:
                capture, back = run(go(), 120.0)
            except CycleAborted as exc:
                # Packages the machine lost during the capture (an idle 2-core run lost 6 in a
                # row once): the driver rightly refused it, the move back was never reached.
                if attempt == LOAD_ATTEMPTS or not ended_by_load(str(exc)):
                    raise
                print(f"attempt {attempt}: ended by the load before the move back: {exc}")
                continue
            state = wait_until(emu, lambda s: not s["moving"])
            break
    assert len(capture) == round(cycle.duration_s * cycle.sample_rate_hz) + 1
    assert back is not None and back.startswith("the move back was aborted (")
    # Named by whichever detector saw it first: the worker's RTDE safety bits ("protective
    # stopped") or the interlock watcher's dashboard string ("PROTECTIVE_STOP"); which one
    # wins is the machine's timing (a loaded run saw the bits first).
    assert re.search(r"(?i)protective[ _]stop", back) and "a person must move wrist1" in back
    assert state["safety_mode"] == "PROTECTIVE_STOP"
    off = abs(state["q"][WRIST] - joint.test_pose_rad)
    assert off > ctrl.interlocks.pose_tolerance_rad
    abort(
        "protective stop on the move back after a complete capture",
        stopped_by="controller",
        at_rest=not state["moving"],
        off_pose_rad=off,
        next_step=f"capture kept ({len(capture)} samples); {back.split(' (')[0]}",
    )
