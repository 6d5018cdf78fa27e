"""The serial encoder board (tests/peers/serial_board.py) as the driver's tests and the fault
tests use it: a config, a pty link and the board processes started on it (`Bench`), the same
cycle on the simulated fake, and a bounded asyncio.run."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from agent.capture.model import Capture
from agent.config.load import load_config
from agent.config.model import ControllerSettings, InterlockSettings
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from drivers.serial.driver import SerialEncoderDriver
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointSettings, SimSettings
from tests.support.paths import PEERS

PEER = PEERS / "serial_board.py"
T = TypeVar("T")
BACKLASH_RAD = 1.2e-3
SEED = 7

CONFIG = """\
controllers:
  - name: board1
    driver: serial
    settings:
      port: {port}
      channels: 4
      count_bits: 19
      reply_timeout_s: 0.5
      stall_timeout_s: 0.5
      start_timeout_s: 5.0
      watchdog_timeout_s: {watchdog_s}
{extra}
    joints:
      - &joint
        name: axis1
        index: 1
        gear_ratio: 40
        encoder_bits: 19
        test_pose_rad: 0.0
        continuous_rotation: true  # the board's joint is a test bench (turns without end)
        backlash_cycle:
          motor_speed_rps: 100
          load_turns: 2
          sample_rate_hz: 500
          settle_s: 0.5
      - {{<<: *joint, name: axis2, index: 2}}
"""


def run(coro: Awaitable[T], timeout_s: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


class Peer:
    """One board process; `events()` reads what it logged."""

    def __init__(self, config: Path, link: Path, events: Path, scenario: dict[str, Any]) -> None:
        self.link, self.events_path = link, events
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-P",
                str(PEER),
                "--config",
                str(config),
                "--controller",
                "board1",
                "--link",
                str(link),
                "--scenario",
                json.dumps(scenario),
                "--events",
                str(events),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the peer prints READY once the link exists
        assert line.startswith("READY"), f"peer did not start: {line!r}"

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        return [json.loads(x) for x in self.events_path.read_text().splitlines() if x.strip()]

    def stops_while_moving(self) -> int:
        return sum(1 for e in self.events() if e["event"] == "stop" and e["moving"])

    def stop_came_after_the_motion(self) -> bool:
        """The board ran its whole cycle before the agent's STOP reached it: the agent was not
        scheduled for the motion left after the fault (a flood at frame 150 of a 2x-speed
        cycle leaves ~0.5 s; seen once in a loaded fresh-clone run). The agent stopped as it
        should and the motion was over: the load's doing, so a test runs such an attempt again
        on a new board (LATE_ATTEMPTS)."""
        events = self.events()
        done = [e for e in events if e["event"] == "cycle_done"]
        stops = [e for e in events if e["event"] == "stop"]
        return bool(
            done
            and done[0]["result"] not in ("STOPPED", "WATCHDOG")  # ran to its last frame
            and stops
            and not any(e["moving"] for e in stops)
            and stops[0]["t"] >= done[0]["t"]
        )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


# Attempts of a scenario whose STOP the machine's load delayed past the board's last frame.
LATE_ATTEMPTS = 3


class Bench:
    """A config file, a link path, and the peers started on it."""

    def __init__(self, tmp: Path, extra_settings: str = "", watchdog_s: float = 1.0) -> None:
        self.tmp = tmp
        self.link = tmp / "board"
        self.config_path = tmp / "agent.yaml"
        extra = "\n".join("      " + line for line in extra_settings.splitlines())
        # 1 s, not the 0.5 s default: a loaded test machine must not trip it by accident.
        self.config_path.write_text(
            CONFIG.format(port=self.link, extra=extra, watchdog_s=watchdog_s)
        )
        self.ctrl: ControllerSettings = load_config(self.config_path).controllers[0]
        self.peers: list[Peer] = []

    def peer(self, **scenario: Any) -> Peer:
        scenario.setdefault("seed", SEED)
        scenario.setdefault("backlash_rad", {"axis1": BACKLASH_RAD})
        events = self.tmp / f"events{len(self.peers)}.jsonl"
        p = Peer(self.config_path, self.link, events, scenario)
        self.peers.append(p)
        return p

    def driver(self) -> SerialEncoderDriver:
        return SerialEncoderDriver(self.ctrl.name, self.ctrl.settings, self.ctrl.joints)

    def cycle(self, joint: int = 0) -> Any:
        return backlash_cycle(self.ctrl, self.ctrl.joints[joint])

    async def guarded(self, driver: SerialEncoderDriver) -> Capture:
        j = self.ctrl.joints[0]
        return await run_guarded_cycle(driver, self.cycle(), InterlockSettings(), j)


def sim_capture(ctrl: ControllerSettings) -> Capture:
    """The same cycle on the simulated fake, directly."""
    truth = {"axis1": SimJointSettings(backlash_rad=BACKLASH_RAD)}
    sim = SimDriver(ctrl.name, SimSettings(seed=SEED, joints=truth), ctrl.joints)

    async def go() -> Capture:
        await sim.connect()
        return await sim.run_cycle(backlash_cycle(ctrl, ctrl.joints[0]))

    return run(go())


async def connected(b: Bench) -> SerialEncoderDriver:
    d = b.driver()
    await d.connect()
    return d


async def until(pred: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)
