"""The agent dies or cancels mid-capture on a UR arm: the motion still ends (docs/safety.md G6, G8).

Against the UR controller emulator (tests/peers/ur_controller), which the real ur_rtde clients
in the driver's worker process connect to. The agent side runs in a process of its own
(tests/peers/ur_controller/agent_client.py) so the test can SIGKILL it mid-capture:

- the agent alone dies (OOM killer, kill -9): its worker sees EOF on its socket and stops the
  arm itself (speedStop, stopJ, stop script); the controller's RTDE watchdog must not be needed;
- the agent and its worker die together (the unit's final SIGKILL): nobody kicks the RTDE
  watchdog any more and the controller ends the control script, and with it the motion;
- the cycle is cancelled (daemon shutdown): the stop reaches the controller before
  run_guarded_cycle gives the cancellation back.

Every verdict is read from the emulator (moving or not, the command log, watchdog trips).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.config.load import load_config
from agent.errors import CycleAborted
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from agent.service.pose_recovery import return_to_start_pose
from drivers.base import ControllerMode
from drivers.ur_rtde.driver import UrRtdeDriver
from tests.peers.ur_controller import UrEmulator
from tests.peers.ur_controller.agent_process import (
    agent_moving,
    kill_agent_alone,
    moving_into_capture,
    seconds_until_still,
)
from tests.peers.ur_controller.harness import (
    FAST,
    MISSED,
    emulator_args,
    run,
    setup,
    wait_until,
)
from tests.support.summary import abort, record

# Stop ramp: 2.5 rad/s at stop_deceleration_rad_s2 10 is 0.25 s; the worker notices EOF at once.
WORKER_STOP_BOUND_S = 1.0
# The watchdog runs at 1 / (stop ramp + 0.25 s) = 2 Hz: it trips 0.5 s after the last kick,
# then the controller's own stop (20 rad/s^2) takes 0.125 s.
WATCHDOG_STOP_BOUND_S = 1.5


@pytest.fixture
def ur(tmp_path: Path) -> Iterator[tuple[UrEmulator, Path]]:
    host, path, _, _ = setup(tmp_path, **FAST)
    with UrEmulator(host, *emulator_args(path)) as emu:
        yield emu, path


@contextlib.contextmanager
def _emulator(folder: Path) -> Iterator[tuple[UrEmulator, Path, None]]:
    host, path, _, _ = setup(folder, **FAST)
    with UrEmulator(host, *emulator_args(path)) as emu:
        yield emu, path, None


def _moving_into_capture(tmp_path: Path) -> Any:
    """agent_moving: the tested joint INTO_CAPTURE_S into its capture."""
    return agent_moving(tmp_path, _emulator, moving_into_capture)


def test_agent_killed_mid_capture_the_worker_sees_eof_and_stops_the_arm(tmp_path: Path) -> None:
    with _moving_into_capture(tmp_path) as (emu, config, _, agent, worker):
        took_s, state, worker_exited = kill_agent_alone(agent, emu, worker, WORKER_STOP_BOUND_S)
        after = state["commands"][state["commands"].index("speedj") :]
        assert not state["moving"] and took_s < WORKER_STOP_BOUND_S, (took_s, state["events"])
        # The worker's own stop, not the watchdog: speedStop, stopJ, then the script ended.
        assert after == ["speedj", "speed_stop", "stopj", "stop_script"], state["events"]
        assert state["watchdog_trips"] == 0
        assert worker_exited, "the orphaned worker must exit once the arm is stopped"
        record(
            "UR arm still after", "agent SIGKILLed mid-capture (worker stops it)", f"{took_s:.2f} s"
        )
        # What the agent does next: restarted, at the next stop it moves the joint back first
        # (agent.service.runner, agent.service.pose_recovery), as here.
        ctrl = load_config(config).controllers[0]
        joint = ctrl.joints[0]
        off = abs(state["q"][3] - joint.test_pose_rad)

        async def restarted() -> str | None:
            driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
            await driver.connect()
            try:
                return await return_to_start_pose(driver, ctrl, backlash_cycle(ctrl, joint))
            finally:
                await driver.close()

        note = run(restarted(), 60.0)
        back = wait_until(emu, lambda s: not s["moving"])
        assert note is not None and note.startswith("moved wrist1 back"), note
        assert abs(back["q"][3] - joint.test_pose_rad) < ctrl.interlocks.pose_tolerance_rad
        abort(
            "agent killed (SIGKILL) mid-capture",
            stopped_by="worker on EOF (speedStop, stopJ)",
            at_rest=not state["moving"],
            off_pose_rad=off,
            next_step=f"restarted: {note.split(' from ')[0]} before the next cycle",
        )


def test_agent_and_worker_killed_mid_capture_the_rtde_watchdog_stops_the_arm(
    tmp_path: Path,
) -> None:
    with _moving_into_capture(tmp_path) as (emu, _config, _, agent, _worker):
        try:
            agent.kill_group()  # nothing of the agent is left to send a stop or kick the watchdog
            t_kill = time.monotonic()
            took_s, state = seconds_until_still(emu, t_kill, WATCHDOG_STOP_BOUND_S)
        finally:
            agent.kill_group()
        after = state["commands"][state["commands"].index("speedj") :]
        assert not state["moving"] and took_s < WATCHDOG_STOP_BOUND_S, (took_s, state["events"])
        assert after == ["speedj"], after  # no stop came from the agent's side
        assert state["watchdog_trips"] == 1 and not state["script_running"]
        assert any("RTDE watchdog" in e for e in state["events"])
        record("UR arm still after", "agent + worker SIGKILLed (RTDE watchdog)", f"{took_s:.2f} s")


def test_cancelling_the_guarded_cycle_mid_capture_stops_the_arm(
    ur: tuple[UrEmulator, Path],
) -> None:
    emu, config = ur
    from agent.config.load import load_config

    ctrl = load_config(config).controllers[0]
    joint = ctrl.joints[0]

    async def scenario(rules: Any) -> tuple[float, dict[str, Any], ControllerMode] | str:
        """The cancellation's outcome, or the abort that ended the cycle before it."""
        driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
        await driver.connect()
        try:
            cycle = backlash_cycle(ctrl, joint)
            task = asyncio.create_task(run_guarded_cycle(driver, cycle, rules, joint))
            try:
                await asyncio.to_thread(moving_into_capture, emu)
            except AssertionError as exc:  # the cycle ended early: say why
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(task), 10.0)
                why = task.exception() if task.done() else "the cycle still runs"
                if isinstance(why, CycleAborted) and MISSED in str(why):
                    return str(why)
                raise AssertionError(f"{exc}; the cycle: {why!r}") from None
            t_cancel = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # When the cancellation comes back, the stop has reached the controller.
            returned_s = time.monotonic() - t_cancel
            state = emu.state()
            mode = (await driver.read_status()).mode  # and the driver goes on
        finally:
            await driver.close()
        return returned_s, state, mode

    # A cycle the machine's load ended before the cancellation (a run of lost packages longer
    # than the driver bridges: 11 in a row in an idle fresh-clone run) is run again, at most
    # twice, from where the abort left the joint: the cancellation is what the test judges.
    rules = ctrl.interlocks
    for attempt in range(3):
        outcome = run(scenario(rules))
        if not isinstance(outcome, str):
            break
        assert attempt < 2, outcome
        print(f"attempt {attempt + 1}: ended by the load before the cancellation: {outcome}")
        wait_until(emu, lambda s: not s["moving"] and not s["script_running"])
        rules = dataclasses.replace(rules, pose_tolerance_rad=100.0)
    returned_s, state, mode = outcome
    commands = state["commands"]
    after = commands[len(commands) - 1 - commands[::-1].index("speedj") :]  # this attempt's
    assert after[:3] == ["speedj", "speed_stop", "stopj"], state["events"]
    assert not state["moving"] and state["watchdog_trips"] == 0
    assert returned_s < WORKER_STOP_BOUND_S + 3.0  # stop + the worker's cleanup
    state = wait_until(emu, lambda s: not s["script_running"])
    assert not state["script_running"] and state["commands"][-1] == "stop_script"
    assert mode is ControllerMode.STOPPED
    record(
        "UR arm still after", "run_guarded_cycle cancelled (stop confirmed)", f"{returned_s:.2f} s"
    )
