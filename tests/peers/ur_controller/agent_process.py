"""The test's handle on an agent_client process: start it, read its JSON lines, kill or hang it.

Shared by tests/faults/test_ur_kill.py (the agent killed mid-capture),
tests/faults/test_ur_hang.py (its event loop hung mid-capture) and
tests/faults/test_ur_excitation_faults.py (both mid-excitation), with the emulator helpers they
use to tell when the arm is inside the capture and when it is still again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from tests.peers.ur_controller import REPO_ROOT, UrEmulator
from tests.peers.ur_controller.harness import LOAD_ATTEMPTS, MISSED, wait_until
from tests.support.processes import exited

T = TypeVar("T")
INTO_CAPTURE_S = 0.6  # run-up 0.06 s + settle 0.3 s, then well inside the 5 s capture


class Agent:
    """The agent_client process (its own process group) and the JSON lines it prints."""

    def __init__(self, config: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.peers.ur_controller.agent_client"),
                *("--config", str(config), "--controller", "ur5e", "--joint", "wrist1"),
                *extra,
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

    def wait(self, name: str, timeout_s: float = 20.0, nth: int = 0) -> dict[str, Any]:
        """The `nth` event called `name` (0: the first), waiting up to `timeout_s` for it."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._find(name, nth) is not None, timeout_s):
                raise AssertionError(f"agent event {name!r} #{nth} not seen: {self.events}")
            found = self._find(name, nth)
            assert found is not None
            return found

    def _find(self, name: str, nth: int = 0) -> dict[str, Any] | None:
        found = [e for e in self.events if e["event"] == name]
        return found[nth] if len(found) > nth else None

    def kill_group(self) -> None:
        """SIGKILL to the agent and everything it started (its worker)."""
        with contextlib.suppress(ProcessLookupError):  # already gone: what we wanted
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5.0)


def moving_into_capture(emu: UrEmulator) -> None:
    """Wait until the tested joint runs at its cycle speed, INTO_CAPTURE_S into the capture."""
    state = wait_until(emu, lambda s: "speedj" in s["commands"] and s["moving"], 20.0)
    assert "speedj" in state["commands"] and state["moving"], state["events"]
    time.sleep(INTO_CAPTURE_S)
    state = emu.state()
    assert state["moving"], (state["commands"], state["events"])


def moving_into_excitation(emu: UrEmulator, into_s: float) -> None:
    """Wait until the servoJ stream has begun (the arm counts as moving from its first target,
    still q0, on), then `into_s` more: past settle_s + hold_s it is really on the trajectory."""
    state = wait_until(emu, lambda s: "servoj" in s["commands"] and s["moving"], 20.0)
    assert "servoj" in state["commands"] and state["moving"], state["events"]
    time.sleep(into_s)
    state = emu.state()
    assert state["moving"], (state["commands"], state["events"])


def seconds_until_still(emu: UrEmulator, since: float, bound_s: float) -> tuple[float, Any]:
    """Seconds from `since` (time.monotonic()) until the arm stands and the script has ended."""
    state = wait_until(emu, lambda s: not s["moving"] and not s["script_running"], bound_s + 2.0)
    return time.monotonic() - since, state


@contextlib.contextmanager
def agent_moving(
    tmp_path: Path,
    start: Callable[[Path], AbstractContextManager[tuple[UrEmulator, Path, T]]],
    into: Callable[[UrEmulator], None],
    *agent_args: str,
) -> Iterator[tuple[UrEmulator, Path, T, Agent, int]]:
    """A fresh emulator (`start(folder)`: emulator, config, what else it gives) and an
    agent_client process, the motion `into` its run: (emulator, config, extra, agent, worker pid).

    A cycle the machine's load ended first (its outcome names lost packages: seen idle in
    fresh-clone runs) is run again on a fresh emulator, at most LOAD_ATTEMPTS times: the kill
    that follows is what the tests judge.
    """
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        folder = tmp_path / f"attempt{attempt}"
        folder.mkdir()
        with start(folder) as (emu, config, extra):
            agent = Agent(config, *agent_args)
            try:
                worker = agent.wait("connected")["worker_pid"]
                try:
                    into(emu)
                except AssertionError:
                    error = agent.wait("outcome", 10.0).get("error", "")
                    if attempt == LOAD_ATTEMPTS or MISSED not in error:
                        raise
                    print(f"attempt {attempt}: ended by the load before the kill: {error}")
                    continue
                yield emu, config, extra, agent, worker
                return
            finally:
                agent.kill_group()


def kill_agent_alone(
    agent: Agent, emu: UrEmulator, worker: int, bound_s: float
) -> tuple[float, Any, bool]:
    """SIGKILL the agent alone (no stop request, no reply ever read), then (seconds until the
    arm stood, the emulator's state then, whether the orphaned worker exited within 5 s)."""
    try:
        agent.proc.kill()
        took_s, state = seconds_until_still(emu, time.monotonic(), bound_s)
        deadline = time.monotonic() + 5.0
        while not exited(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        return took_s, state, exited(worker)
    finally:
        agent.kill_group()
