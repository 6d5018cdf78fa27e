"""What the CAN driver's tests share: the agent config they write, the peer processes they run
(with the JSON events those print), and the same cycles on the simulated fake for comparison."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from agent.capture.model import Capture
from agent.config.model import ControllerSettings
from agent.kinds.backlash.kind import backlash_cycle
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointSettings, SimSettings

ROOT = Path(__file__).resolve().parents[2]
DBC = ROOT / "config" / "can" / "joint_encoder.dbc"
SEED = 5
BACKLASH = {"j1": 1.2e-3, "j2": 4e-4}
T = TypeVar("T")


def config_text(interface: str, channel: str, port: int, dbc: str = str(DBC)) -> str:
    joint = textwrap.dedent(
        """\
        gear_ratio: 40
        encoder_bits: 19
        backlash_cycle: {motor_speed_rps: 100, load_turns: 2, sample_rate_hz: 500, settle_s: 0.1}
        """
    )
    body = textwrap.indent(joint, " " * 8)
    return (
        textwrap.dedent(
            f"""\
            controllers:
              - name: cell1
                driver: can
                settings:
                  dbc: {dbc}
                  interface: {interface}
                  channel: "{channel}"
                  port: {port}
                joints:
                  - name: j1
                    index: 1
                    test_pose_rad: 0.0
                    continuous_rotation: true   # the peer's joint is a test bench
            """
        )
        + body
        + "      - name: j2\n        index: 2\n        test_pose_rad: 0.5\n"
        + "        continuous_rotation: true\n"
        + body
    )


class Peer:
    """A peer process and the JSON events it prints, collected by a thread."""

    def __init__(self, module: str, args: list[str], prefix: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", module, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.events.append(json.loads(line))
                self._cond.notify_all()

    def wait(self, name: str, timeout: float = 10.0, count: int = 1) -> dict[str, Any]:
        """The first event `name`, once `count` of them were printed. The peer prints after it
        acts: a test asserting on its events must wait for them, never read them once."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: sum(e["event"] == name for e in self.events) >= count, timeout
            )
            if not ok:
                err = self.proc.stderr.read() if self.proc.poll() is not None else ""  # type: ignore[union-attr]
                raise AssertionError(
                    f"peer event {name!r} (x{count}) not seen in {timeout} s: {self.events} {err}"
                )
            return next(e for e in self.events if e["event"] == name)

    def named(self, name: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e["event"] == name]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)  # every event it printed is in self.events


def peer_args(config: Path, *extra: str) -> list[str]:
    backlash = [f"--backlash={k}={v}" for k, v in BACKLASH.items()]
    return [
        "--config",
        str(config),
        "--controller",
        "cell1",
        "--seed",
        str(SEED),
        *backlash,
        *extra,
    ]


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def sim_captures(ctrl: ControllerSettings, joint_names: list[str]) -> list[Capture]:
    """The same cycles, in the same order, on the simulated fake directly: the peer numbers its
    cycles (and so its seeds) the way the fake does."""
    truth = {name: SimJointSettings(backlash_rad=b) for name, b in BACKLASH.items()}
    sim = SimDriver(ctrl.name, SimSettings(seed=SEED, joints=truth), ctrl.joints)

    async def go() -> list[Capture]:
        await sim.connect()
        out = []
        for name in joint_names:
            joint = next(j for j in ctrl.joints if j.name == name)
            capture = await sim.run_cycle(backlash_cycle(ctrl, joint))
            assert isinstance(capture, Capture)  # a backlash cycle gives one capture
            out.append(capture)
        return out

    return run(go())


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
