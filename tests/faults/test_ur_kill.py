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
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cycles import backlash_cycle, run_guarded_cycle
from drivers.base import ControllerMode
from drivers.ur_rtde import UrRtdeDriver
from tests.peers.ur_controller import REPO_ROOT, UrEmulator
from tests.peers.ur_controller.harness import FAST, emulator_args, run, setup, wait_until
from tests.summary import record

# Stop ramp: 2.5 rad/s at stop_deceleration_rad_s2 10 is 0.25 s; the worker notices EOF at once.
WORKER_STOP_BOUND_S = 1.0
# The watchdog runs at 1 / (stop ramp + 0.25 s) = 2 Hz: it trips 0.5 s after the last kick,
# then the controller's own stop (20 rad/s^2) takes 0.125 s.
WATCHDOG_STOP_BOUND_S = 1.5
INTO_CAPTURE_S = 0.6  # run-up 0.06 s + settle 0.3 s, then well inside the 5 s capture


class Agent:
    """The agent_client process (its own process group) and the JSON lines it prints."""

    def __init__(self, config: Path) -> None:
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.peers.ur_controller.agent_client"),
                *("--config", str(config), "--controller", "ur5e", "--joint", "wrist1"),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.events.append(json.loads(line))
                self._cond.notify_all()

    def wait(self, name: str, timeout_s: float = 20.0) -> dict[str, Any]:
        with self._cond:
            if not self._cond.wait_for(lambda: self._find(name) is not None, timeout_s):
                raise AssertionError(f"agent event {name!r} not seen: {self.events}")
            found = self._find(name)
            assert found is not None
            return found

    def _find(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["event"] == name), None)

    def kill_group(self) -> None:
        """SIGKILL to the agent and everything it started (its worker)."""
        with _gone():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5.0)


class _gone:
    """Suppress ProcessLookupError: the process is already gone, which is what we wanted."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, *_: object) -> bool:
        return kind is ProcessLookupError


def _exited(pid: int) -> bool:
    """True once `pid` is gone or a zombie (reparented: nobody may reap it here)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _moving_into_capture(emu: UrEmulator) -> None:
    state = wait_until(emu, lambda s: "speedj" in s["commands"] and s["moving"], 20.0)
    assert "speedj" in state["commands"] and state["moving"], state["events"]
    time.sleep(INTO_CAPTURE_S)
    assert emu.state()["moving"]


def _seconds_until_still(emu: UrEmulator, since: float, bound_s: float) -> tuple[float, Any]:
    state = wait_until(emu, lambda s: not s["moving"] and not s["script_running"], bound_s + 2.0)
    return time.monotonic() - since, state


@pytest.fixture
def ur(tmp_path: Path) -> Iterator[tuple[UrEmulator, Path]]:
    host, path, _, _ = setup(tmp_path, **FAST)
    with UrEmulator(host, *emulator_args(path)) as emu:
        yield emu, path


def test_agent_killed_mid_capture_the_worker_sees_eof_and_stops_the_arm(
    ur: tuple[UrEmulator, Path],
) -> None:
    emu, config = ur
    agent = Agent(config)
    try:
        worker = agent.wait("connected")["worker_pid"]
        _moving_into_capture(emu)
        agent.proc.kill()  # the daemon alone dies: no stop request, no reply ever read
        t_kill = time.monotonic()
        took_s, state = _seconds_until_still(emu, t_kill, WORKER_STOP_BOUND_S)
        deadline = time.monotonic() + 5.0
        while not _exited(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker_exited = _exited(worker)
    finally:
        agent.kill_group()
    after = state["commands"][state["commands"].index("speedj") :]
    assert not state["moving"] and took_s < WORKER_STOP_BOUND_S, (took_s, state["events"])
    # The worker's own stop, not the watchdog: speedStop, stopJ, then the script ended.
    assert after == ["speedj", "speed_stop", "stopj", "stop_script"], state["events"]
    assert state["watchdog_trips"] == 0
    assert worker_exited, "the orphaned worker must exit once the arm is stopped"
    record("UR arm still after", "agent SIGKILLed mid-capture (worker stops it)", f"{took_s:.2f} s")


def test_agent_and_worker_killed_mid_capture_the_rtde_watchdog_stops_the_arm(
    ur: tuple[UrEmulator, Path],
) -> None:
    emu, config = ur
    agent = Agent(config)
    try:
        agent.wait("connected")
        _moving_into_capture(emu)
        agent.kill_group()  # nothing of the agent is left to send a stop or kick the watchdog
        t_kill = time.monotonic()
        took_s, state = _seconds_until_still(emu, t_kill, WATCHDOG_STOP_BOUND_S)
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
    from agent.config import load_config

    ctrl = load_config(config).controllers[0]
    joint = ctrl.joints[0]

    async def scenario() -> tuple[float, dict[str, Any], ControllerMode]:
        driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
        await driver.connect()
        try:
            cycle = backlash_cycle(ctrl, joint)
            task = asyncio.create_task(run_guarded_cycle(driver, cycle, ctrl.interlocks, joint))
            await asyncio.to_thread(_moving_into_capture, emu)
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

    returned_s, state, mode = run(scenario())
    after = state["commands"][state["commands"].index("speedj") :]
    assert after[:3] == ["speedj", "speed_stop", "stopj"], state["events"]
    assert not state["moving"] and state["watchdog_trips"] == 0
    assert returned_s < WORKER_STOP_BOUND_S + 3.0  # stop + the worker's cleanup
    state = wait_until(emu, lambda s: not s["script_running"])
    assert not state["script_running"] and state["commands"][-1] == "stop_script"
    assert mode is ControllerMode.STOPPED
    record(
        "UR arm still after", "run_guarded_cycle cancelled (stop confirmed)", f"{returned_s:.2f} s"
    )
