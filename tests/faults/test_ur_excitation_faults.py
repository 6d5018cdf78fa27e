"""Faults mid-excitation on a UR arm: the servoJ stream stops and the cycle records nothing
(docs/safety.md G10).

The identification excitation (drivers/ur_rtde/excitation.py, drivers/ur_rtde/worker/servo.py) runs
in the same worker frame as the backlash cycle (`_run_motion` in drivers/ur_rtde/worker/cycle.py),
but streams a servoJ target every RTDE period instead of one speedJ, and ends with servoStop: these
tests prove the hang and kill handling of tests/faults/test_ur_{kill,hang}.py for that path, and the
missed-package abort, against the UR controller emulator's rigid UR5e (tests/peers/ur_controller,
the real ur_rtde clients in the driver's worker process). The agent side runs in a process of its
own (tests/peers/ur_controller/agent_client.py --excitation) where it must be killed or hung. Every
verdict on the motion is read from the emulator.

Short trajectory (tests/peers/ur_controller/excitation.py: settle 0.2 s, hold 0.3 s, 2 periods
of 2 s): every fault lands INTO_MOTION_S into the motion, well before its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.errors import CycleAborted
from agent.service.interlocks import run_guarded_cycle
from drivers.base import ExcitationCycle
from drivers.ur_rtde.driver import UrRtdeDriver
from drivers.ur_rtde.settings import UrRtdeSettings
from tests.peers.ur_controller import UrEmulator, free_host
from tests.peers.ur_controller.agent_process import (
    Agent,
    agent_moving,
    kill_agent_alone,
    moving_into_excitation,
    seconds_until_still,
)
from tests.peers.ur_controller.excitation import (
    HOLD_S,
    SETTLE_S,
    controller,
    emulator_args,
    excitation_cycle,
    write_config,
)
from tests.peers.ur_controller.harness import (
    BRIDGE_LOSSES,
    DRIVER_LOSSES,
    LOAD_ATTEMPTS,
    MISSED,
    run,
    wait_until,
)
from tests.peers.ur_controller.joint_model import _SpeedRamp
from tests.support.summary import record

DEFAULTS = UrRtdeSettings(host="x")
AGENT_TIMEOUT_S = DEFAULTS.agent_timeout_s  # the defaults are what is tested
BEAT_S = DEFAULTS.heartbeat_interval_s
DECEL_RAD_S2 = DEFAULTS.stop_deceleration_rad_s2
INTO_MOTION_S = 0.8
# servoj is logged, and the arm counts as moving, from the first (still q0) target on.
INTO_STREAM_S = SETTLE_S + HOLD_S + INTO_MOTION_S
HANG_S = 1.8  # beyond the bound (about 1.1 s): the arm must be still while the loop still hangs
BOUND_FOR_HANG_S = 5.0  # how long seconds_until_still watches; the test judges its own bound
DROPPED = 3


def fastest_rad_s(cycle: ExcitationCycle) -> float:
    """The trajectory's highest joint speed: what the stop may have to ramp down from."""
    tau = np.linspace(0.0, cycle.period_s, 2001)
    return float(np.abs(cycle.trajectory().evaluate(tau)[1]).max())


def bounds(cycle: ExcitationCycle, notice_s: float) -> tuple[float, float]:
    """(seconds, rad) within which the arm must stand once a fault is noticed after
    `notice_s`: the servoStop ramp from the fastest speed, plus 0.5 s of scheduling, the
    emulator's cycle and the test's 20 ms polling; the travel the arm may still cover on the
    trajectory until the stop and during the ramp."""
    v = fastest_rad_s(cycle)
    ramp_s = v / DECEL_RAD_S2
    return notice_s + ramp_s + 0.5, v * (notice_s + 0.1) + v * v / (2.0 * DECEL_RAD_S2)


def travel_rad(before: dict[str, Any], after: dict[str, Any]) -> float:
    return float(np.abs(np.array(after["q"]) - np.array(before["q"])).max())


def _ur(tmp_path: Path, **settings: Any) -> Iterator[tuple[UrEmulator, Path, ExcitationCycle]]:
    host = free_host()
    path = write_config(tmp_path, host, **settings)
    cycle = excitation_cycle(controller(path))
    with UrEmulator(host, *emulator_args(cycle)) as emu:
        yield emu, path, cycle


def test_agent_killed_mid_excitation_the_worker_sees_eof_and_stops_the_arm(tmp_path: Path) -> None:
    # A run of lost packages longer than the bridging can end the excitation before the kill:
    # agent_moving runs such an attempt again on a new emulator.
    start = functools.partial(contextlib.contextmanager(_ur), **BRIDGE_LOSSES)
    into = functools.partial(moving_into_excitation, into_s=INTO_STREAM_S)
    with agent_moving(tmp_path, start, into, "--excitation") as (emu, _, cycle, agent, worker):
        bound_s, bound_rad = bounds(cycle, 0.0)  # EOF is seen at once
        at_kill = emu.state()
        took_s, state, worker_exited = kill_agent_alone(agent, emu, worker, bound_s)
        moved_rad = travel_rad(at_kill, state)
        speed_rad_s = float(np.abs(at_kill["qd"]).max())
        print(f"kill at {speed_rad_s:.2f} rad/s: still after {took_s:.3f} s, {moved_rad:.3f} rad")
        assert speed_rad_s > 0.05, "the fault must land while the arm really moves"
        assert not state["moving"] and took_s < bound_s, (took_s, state["events"])
        assert moved_rad < bound_rad, (moved_rad, bound_rad)
        # The worker's own stop, not the watchdog: servoStop, stopJ, then the script ended.
        after = state["commands"][state["commands"].index("servoj") :]
        assert after == ["servoj", "servo_stop", "stopj", "stop_script"], state["events"]
        assert state["watchdog_trips"] == 0
        assert worker_exited, "the orphaned worker must exit once the arm is stopped"
        # Nothing came back to the dead agent: no capture of the aborted run exists.
        assert [e for e in agent.events if e["event"] == "outcome"] == []
        record(
            "UR arm still after",
            "agent SIGKILLed mid-excitation (worker stops it)",
            f"{took_s:.2f} s, {moved_rad:.3f} rad",
        )


def _hang_once(
    emu: UrEmulator, config: Path
) -> tuple[dict[str, Any], float, dict[str, Any], float, float, dict[str, Any], dict[str, Any]]:
    """One excitation hung mid-motion: (state at the hang, seconds to still, state then, still
    at, woke at, the agent's outcome, the end state)."""
    agent = Agent(config, "--excitation", "--hang-s", str(HANG_S))
    try:
        agent.wait("connected")
        moving_into_excitation(emu, INTO_STREAM_S)
        at_hang = emu.state()
        os.kill(agent.proc.pid, signal.SIGUSR1)
        hung_at = agent.wait("hang_start", 5.0)["t"]
        took_s, state = seconds_until_still(emu, hung_at, BOUND_FOR_HANG_S)
        woke_at = agent.wait("hang_end", HANG_S + 5.0)["t"]
        outcome = agent.wait("outcome", 20.0)
        end = emu.state()
    finally:
        agent.kill_group()
    return at_hang, took_s, state, hung_at + took_s, woke_at, outcome, end


def test_a_hung_event_loop_mid_excitation_the_worker_stops_the_arm(tmp_path: Path) -> None:
    # A run of lost packages longer than the bridging (8 in a row, in an idle fresh-clone run)
    # can end the excitation before the hang is noticed: its abort names the lost packages and
    # the stop cannot be told from the hang's. Such an attempt is run again on a new emulator,
    # at most twice: the hang is what the test judges.
    for attempt in range(3):
        folder = tmp_path / f"attempt{attempt + 1}"
        folder.mkdir()
        with contextlib.contextmanager(_ur)(folder, **BRIDGE_LOSSES) as ur:
            emu, config, cycle = ur
            at_hang, took_s, state, still_at, woke_at, outcome, end = _hang_once(emu, config)
        if MISSED not in outcome.get("error", ""):
            break
        assert attempt < 2, outcome
        print(f"attempt {attempt + 1}: ended by the load before the hang: {outcome['error']}")
    bound_s, bound_rad = bounds(cycle, AGENT_TIMEOUT_S)
    moved_rad = travel_rad(at_hang, state)
    print(f"hang: still after {took_s:.3f} s, {moved_rad:.3f} rad")
    assert float(np.abs(at_hang["qd"]).max()) > 0.05, "the hang must land mid-motion"
    assert not state["moving"] and not state["script_running"], state["events"]
    # Not sooner than the timeout allows (the last beat left at most one interval before the
    # hang), not later than the timeout plus the stop ramp, and while the loop still hung.
    assert AGENT_TIMEOUT_S - BEAT_S < took_s < bound_s, (took_s, state["events"])
    assert moved_rad < bound_rad, (moved_rad, bound_rad)
    assert still_at < woke_at, "the arm must stop while the agent's loop is still blocked"
    after = state["commands"][state["commands"].index("servoj") :]
    assert after == ["servoj", "servo_stop", "stopj", "stop_script"], state["events"]
    assert state["watchdog_trips"] == 0
    # Once the loop runs again the cycle fails, naming the heartbeat; nothing was captured.
    assert outcome["outcome"] == "aborted" and outcome["samples"] == 0, outcome
    assert "no heartbeat from the agent" in outcome["error"], outcome
    assert "event loop is hung" in outcome["error"], outcome
    assert end["commands"] == state["commands"] and not end["moving"]
    record(
        "UR arm still after",
        "agent event loop hung mid-excitation (heartbeat)",
        f"{took_s:.2f} s, {moved_rad:.3f} rad",
    )


def test_missed_packages_mid_excitation_abort_with_the_count_and_stop(tmp_path: Path) -> None:
    """The driver's own handling of lost packages (its defaults: a run of 3 aborts)."""

    async def go(emu: UrEmulator, config: Path, cycle: ExcitationCycle) -> tuple[str, float, Any]:
        ctrl = controller(config)
        driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
        await driver.connect()
        try:
            with pytest.raises(CycleAborted) as info:
                await run_guarded_cycle(driver, cycle, ctrl.interlocks, None)
            # The stop was sent before the worker answered: the arm stands, or ramps down.
            t_abort = time.monotonic()
            state = await asyncio.to_thread(
                wait_until, emu, lambda s: not s["moving"] and not s["script_running"]
            )
            return str(info.value), time.monotonic() - t_abort, state
        finally:
            await driver.close()

    # A run the machine lost before the emulator dropped its 3 (4 in a row once, idle) ends the
    # cycle first, rightly, but says nothing about the drop played here: such an attempt, told by
    # the emulator's count of dropped packages still 0, is run again on a new emulator.
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        folder = tmp_path / f"attempt{attempt}"
        folder.mkdir()
        with contextlib.contextmanager(_ur)(folder, **DRIVER_LOSSES) as (emu, config, cycle):
            emu.call("on_motion", when="servo", delay_s=INTO_STREAM_S, action={
                "op": "drop_packets", "n": DROPPED})  # fmt: skip
            message, still_s, state = run(go(emu, config, cycle))
        print(f"attempt {attempt}, drop: {message!r}; still {still_s:.3f} s after the abort")
        if state["dropped_packets"] > 0 or attempt == LOAD_ATTEMPTS:
            break
    # The ones the emulator dropped, and any the receiving side lost next to them on a busy
    # machine: all are missed, the count names them all.
    missed = re.search(r"(\d+) RTDE package\(s\) missed", message)
    assert missed is not None and int(missed.group(1)) >= DROPPED, message
    assert state["dropped_packets"] == DROPPED
    assert not state["moving"] and not state["script_running"], state["events"]
    after = state["commands"][state["commands"].index("servoj") :]
    assert after == ["servoj", "servo_stop", "stopj", "stop_script"], state["events"]
    assert state["watchdog_trips"] == 0
    # The ramp from the fastest speed bounds how long after the abort the arm may still move.
    assert still_s < fastest_rad_s(cycle) / DECEL_RAD_S2 + 0.5, still_s


def test_the_emulator_s_stop_ramp_ends_at_exactly_zero_speed() -> None:
    # What the kill test found: with every joint moving (a servoJ stream, not one speedJ'd
    # joint) v0 + (0 - v0) * T / T missed 0.0 by an ulp for most speeds, the emulated arm never
    # came to rest, servoStop never completed, and only the RTDE watchdog stopped the "motion".
    rng = np.random.default_rng(0)
    for _ in range(500):
        v0 = rng.uniform(-1.0, 1.0, 6).tolist()
        ramp = _SpeedRamp([0.0] * 6, v0, [0.0] * 6, DECEL_RAD_S2)
        _, qd = ramp.at(ramp.duration_s + 0.002)
        assert qd == [0.0] * 6, (v0, qd)
        _, qd = ramp.at(ramp.duration_s)
        assert qd == [0.0] * 6, (v0, qd)
