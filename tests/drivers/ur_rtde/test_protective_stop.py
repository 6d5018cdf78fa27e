"""When speedStop and stopJ do not stop the arm, the worker triggers a protective stop
(drivers/ur_rtde/worker/escalation.py; issue 28 item 6).

The emulator is told to acknowledge the control script's stop commands without stopping the arm
(`stops_ignored`, an injected fault). What it does with ur_rtde's triggerProtectiveStop (cmd 31)
is what UR documents for URScript `protective_stop()` and a protective stop: a category-2 stop on
the path, safety mode PROTECTIVE_STOP, the program paused (so the command is never answered
"done"), the dashboard's "unlock protective stop" refused until 5 s after it, and Play resuming a
paused program where it stood. The verdicts are the emulator's: how the arm ended, which commands
reached the script, what the dashboard answers afterwards.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from agent.errors import CycleAborted, DriverError
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from drivers.ur_rtde.driver import UrRtdeDriver
from tests.peers.ur_controller import UrEmulator
from tests.peers.ur_controller.harness import (
    FAST,
    LOAD_ATTEMPTS,
    emulator_args,
    ended_by_load,
    run,
    setup,
    wait_until,
)
from tests.support.summary import abort

UNLOCK_AFTER_S = 5.0  # Polyscope unlocks a protective stop 5 s after it at the earliest


def dashboard(emu: UrEmulator, line: str) -> str:
    """One request on the emulator's dashboard port, as a person's tool would send it."""
    with (
        socket.create_connection((emu.host, 29999), timeout=5.0) as sock,
        sock.makefile("rwb") as f,
    ):
        f.readline()  # the greeting
        f.write((line + "\n").encode())
        f.flush()
        return f.readline().decode().strip()


def test_stops_that_do_not_take_end_in_a_protective_stop_and_a_stopped_program(
    tmp_path: Path,
) -> None:
    host, path, ctrl, joint = setup(tmp_path, **FAST)
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        with UrEmulator(host, *emulator_args(path)) as emu:
            # Half a second into the motion the script stops acting on speedStop/stopJ.
            emu.call("on_motion", delay_s=0.5, action={"op": "set", "stops_ignored": True})

            async def cycle() -> tuple[str, str]:
                driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
                await driver.connect()
                try:
                    try:
                        await run_guarded_cycle(
                            driver, backlash_cycle(ctrl, joint), ctrl.interlocks, joint
                        )
                    except (CycleAborted, DriverError) as exc:
                        message = f"{type(exc).__name__}: {exc}"
                    else:
                        raise AssertionError("the cycle was not aborted")
                    await asyncio.sleep(0.3)
                    mode = (await asyncio.wait_for(driver.read_status(), 5.0)).mode.value
                finally:
                    await driver.close()
                return message, mode

            message, mode = run(cycle())
            stood_at = time.monotonic()
            state = wait_until(emu, lambda s: not s["moving"])
            commands = state["commands"]
            after = commands[len(commands) - 1 - commands[::-1].index("speedj") :]
            events = "\n".join(state["events"])
            # Packages the machine lost before the stops were ignored: the driver's stop was
            # taken, and the attempt says nothing about stops that do not take.
            if attempt < LOAD_ATTEMPTS and ended_by_load(message):
                print(f"attempt {attempt}: ended by the load before the fault: {message}")
                continue
            assert "CycleAborted" in message and "protective stop triggered" in message, message
            assert "unlock the protective stop" in message and "Play resumes nothing" in message
            assert after[:4] == ["speedj", "speed_stop", "stopj", "protective_stop"], events
            assert "speed_stop ignored" in events and "protective_stop() called by the" in events
            # Stood by the controller's protective stop, not by the RTDE watchdog.
            assert not state["moving"] and state["watchdog_trips"] == 0, events
            assert state["safety_mode"] == "PROTECTIVE_STOP"
            # Nothing a person's Play would resume: the paused script was stopped.
            assert state["program_state"] == "STOPPED" and not state["script_running"], events
            assert mode == "fault"  # the driver reports the protective stop
            # Polyscope refuses the unlock within 5 s of the stop (the emulator's rule, as UR's).
            assert time.monotonic() - stood_at < UNLOCK_AFTER_S
            assert dashboard(emu, "unlock protective stop").startswith("Cannot unlock")
        break
    abort(
        "UR stop not taken (speedStop/stopJ ignored)",
        stopped_by="protective stop (triggerProtectiveStop), script stopped from the dashboard",
        at_rest=not state["moving"],
        off_pose_rad=abs(state["q"][joint.index - 1] - joint.test_pose_rad),
        next_step="inspect, unlock the protective stop at the pendant, then the next cycle",
    )


def test_the_agents_protective_stop_request_reaches_the_controller(tmp_path: Path) -> None:
    """UrRtdeDriver.protective_stop, the last step of agent.service.standstill's escalation:
    asked mid-motion while the script ignores stops, it stops the cycle, sees the arm run on,
    and the controller's protective stop stands it; asked with nothing moving, it says so."""
    host, path, ctrl, joint = setup(tmp_path, **FAST)
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        with UrEmulator(host, *emulator_args(path)) as emu:
            emu.call("on_motion", delay_s=0.2, action={"op": "set", "stops_ignored": True})

            async def scenario() -> tuple[str, str, str]:
                driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
                await driver.connect()
                try:
                    task = asyncio.create_task(driver.run_cycle(backlash_cycle(ctrl, joint)))
                    while not emu.state()["moving"] and not task.done():
                        await asyncio.sleep(0.02)
                    await asyncio.sleep(0.5)  # the stops are ignored by now
                    note = await driver.protective_stop()
                    try:
                        await task
                    except (CycleAborted, DriverError) as exc:
                        ended = str(exc)
                    else:
                        ended = "the cycle was not aborted"
                    again = await driver.protective_stop()  # nothing moves any more
                finally:
                    await driver.close()
                return str(note), ended, str(again)

            note, ended, again = run(scenario())
            state = wait_until(emu, lambda s: not s["moving"])
            events = "\n".join(state["events"])
        # Packages the machine lost at the motion's start (seen once, idle): the cycle ended
        # before the stops were ignored and nothing was left for a protective stop to stand.
        if attempt == LOAD_ATTEMPTS or not ended_by_load(ended):
            break
        print(f"attempt {attempt}: ended by the load before the fault: {ended}")
    assert "protective stop triggered" in note, note
    assert "protective stop triggered" in ended, ended
    assert "protective_stop() called by the" in events and "stopj ignored" in events, events
    assert not state["moving"] and state["watchdog_trips"] == 0
    assert state["safety_mode"] == "PROTECTIVE_STOP" and state["program_state"] == "STOPPED"
    assert "no protective stop needed" in again, again
