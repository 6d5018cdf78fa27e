"""What fails in the middle of a stop ends the stop: the state directory filled by another writer
after the first cycle, the descriptors taken. The preflight that held before the first cycle
is checked again before each one (agent.service.runner), so no motion is spent on a capture
that cannot be saved. Motions are counted by the simulated controller itself."""

from __future__ import annotations

import asyncio
import resource
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.capture.model import Capture
from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.service.daemon import Agent
from agent.service.exit_codes import EX_CANTCREAT
from drivers.base import BacklashCycle
from drivers.sim.driver import SimDriver
from tests.support.service.agent_config import controller, write
from tests.support.summary import record

RUNNER = "one machine, one runner"


class AfterFirstCycle(SimDriver):
    """The simulated controller counting its motions, and playing `then` once its first
    cycle has ended: what another process does to the machine the agent runs on."""

    motions: list[str]
    then: Callable[[], None]

    async def run_cycle(self, cycle: BacklashCycle) -> Capture:  # type: ignore[override]
        self.motions.append(cycle.joint)
        capture = await super().run_cycle(cycle)
        if len(self.motions) == 1:
            self.then()
        return capture


def _once(path: Path, then: Callable[[], None]) -> tuple[int, list[str]]:
    motions: list[str] = []

    def make(ctrl: ControllerSettings) -> AfterFirstCycle:
        driver = AfterFirstCycle(ctrl.name, ctrl.settings, ctrl.joints)
        driver.motions, driver.then = motions, then
        return driver

    agent = Agent(
        load_config(path), once=True, wait_for_stop_s=20, pool_workers=1, driver_factory=make
    )
    return asyncio.run(agent.run()), motions


def test_a_disk_filled_after_the_first_cycle_ends_the_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "tmpfs", str(state)], check=True
    )

    def fill() -> None:  # another writer leaves 64 kB: less than one cycle's capture and report
        with (state / "filler").open("wb") as f:
            f.write(b"\0" * (8 * 1024 * 1024 - 64 * 1024 - sum(
                p.stat().st_blocks * 512 for p in state.rglob("*") if p.is_file())))  # fmt: skip

    try:
        path = write(tmp_path / "agent.yaml", controller("robot"), disk_reserve_mb=0.0)
        caplog.set_level("INFO")
        code, motions = _once(path, fill)
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)
    record(RUNNER, "disk filled after the first cycle", str(len(motions)), "-", "-",
           str(len(motions) - 1))  # fmt: skip
    assert motions == ["j1"], motions  # the one before the fill; none after it
    assert code == EX_CANTCREAT
    assert "event=preflight_failed" in caplog.text and "MB free, the stop needs" in caplog.text


def test_descriptors_taken_after_the_first_cycle_end_the_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def take() -> None:  # a flood elsewhere leaves this process a handful of descriptors
        used = len(list(Path("/proc/self/fd").iterdir()))
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, hard))

    path = write(tmp_path / "agent.yaml", controller("robot"))
    caplog.set_level("INFO")
    try:
        code, motions = _once(path, take)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    record(RUNNER, "descriptors taken after the first cycle", str(len(motions)), "-", "-",
           str(len(motions) - 1))  # fmt: skip
    assert motions == ["j1"], motions
    assert code == EX_CANTCREAT
    assert "event=preflight_failed" in caplog.text and "file descriptors left" in caplog.text


def test_a_capture_that_cannot_be_saved_ends_the_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"

    def block() -> None:  # j2's capture folder is a file now: its save fails, the disk is fine
        folder = state / "captures" / "robot" / "j2"
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.write_text("not a folder")

    path = write(tmp_path / "agent.yaml", controller("robot"))
    caplog.set_level("INFO")
    code, motions = _once(path, block)
    record(RUNNER, "a capture not saved", str(len(motions)), "-", "-", str(len(motions) - 2))
    assert motions == ["j1", "j2"], motions  # j2 moved, was not saved: j3 must not move
    assert code == EX_CANTCREAT
    assert "event=capture_not_saved" in caplog.text and "event=stop_ended" in caplog.text
