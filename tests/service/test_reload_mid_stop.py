"""A reload in the middle of a stop (agent.service.daemon.reload): it takes effect between
cycles. The runner of a changed, removed or renamed controller ends after the cycle under way
and is gone before a new runner moves anything; the new config's limits hold from the next
cycle on. Motions are counted by the simulated controller itself (a motion log kept by the
driver), not by the agent's records."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.capture.model import Capture
from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.service.daemon import Agent
from drivers.base import BacklashCycle
from drivers.sim.driver import SimDriver
from tests.support.service.agent_config import controller, write
from tests.support.service.daemon import cycles, serve, until
from tests.support.summary import record

RUNNER = "one machine, one runner"


@dataclass
class Motion:
    controller: str
    joint: str
    start: float
    end: float | None = None


class LoggedSim(SimDriver):
    """The simulated controller writing every cycle's motion into a log shared by all the
    controllers of a test: one physical machine, whatever the config calls it."""

    log: list[Motion]
    controller: str

    async def run_cycle(self, cycle: BacklashCycle) -> Capture:  # type: ignore[override]
        motion = Motion(self.controller, cycle.joint, time.monotonic())
        self.log.append(motion)
        try:
            return await super().run_cycle(cycle)
        finally:
            motion.end = time.monotonic()


def _agent(path: Path) -> tuple[Agent, list[Motion]]:
    log: list[Motion] = []

    def make(ctrl: ControllerSettings) -> LoggedSim:
        driver = LoggedSim(ctrl.name, ctrl.settings, ctrl.joints)
        driver.log, driver.controller = log, ctrl.name
        return driver

    return Agent(load_config(path), pool_workers=1, driver_factory=make), log


# Paced in real time: each cycle about 1 s of motion (tests/support/service/agent_config.py).
PACED = {"time_scale": 1.0}


def _overlaps(log: list[Motion]) -> int:
    spans = sorted((m.start, m.end if m.end is not None else float("inf")) for m in log)
    return sum(1 for (_, end), (start, _) in itertools.pairwise(spans) if start < end)


def _narrowed(ctrl: dict[str, Any], limit_rad: float) -> dict[str, Any]:
    for j in ctrl["joints"]:
        j["position_min_rad"], j["position_max_rad"] = -limit_rad, limit_rad
    return ctrl


def test_a_reload_narrowing_the_limits_mid_stop_holds_from_the_next_cycle(tmp_path: Path) -> None:
    path = write(tmp_path / "agent.yaml", _narrowed(controller("robot1", **PACED), 100.0))
    agent, log = _agent(path)
    seen: dict[str, Any] = {}

    def refused() -> list[str]:
        return [c.joint for c in cycles(tmp_path / "state") if c.outcome == "rejected"]

    async def scenario() -> None:
        await until(lambda: len(log) == 1, 20, "the first cycle under way")
        old = agent.runners["robot1"]
        # 2 load turns of travel no longer fit: +-0.5 rad.
        write(path, _narrowed(controller("robot1", **PACED), 0.5))
        assert await agent.reload()
        seen["reloaded_at"] = time.monotonic()
        seen["under_way"] = list(log)
        await until(
            lambda: (
                agent.runners.get("robot1") not in (None, old)
                and agent.runners["robot1"].task is not None
            ),
            20,
            "the new runner",
        )
        new = agent.runners["robot1"]
        # The new runner plans the rest of this stop under the new limits: refused.
        # It plans the rest of this stop under the new limits: every cycle refused.
        await until(lambda: len(refused()) == 3, 20, "the new runner's refusals")
        seen["new_state"] = new.state

    assert serve(agent, scenario) == 0
    started_after = [m for m in log if m.start > seen["reloaded_at"]]
    record(RUNNER, "reload narrowing the limits mid-stop", str(len(log)),
           str(len(started_after)), str(_overlaps(log)), "-")  # fmt: skip
    assert len(seen["under_way"]) == 1 and started_after == [], (seen, log)
    assert _overlaps(log) == 0
    assert sorted(refused()) == ["j1", "j2", "j3"] and "do not fit" in seen["new_state"]


def test_a_rename_mid_stop_never_moves_the_machine_from_two_runners(tmp_path: Path) -> None:
    path = write(tmp_path / "agent.yaml", controller("robot1", **PACED))
    agent, log = _agent(path)

    async def scenario() -> None:
        await until(lambda: len(log) == 1, 20, "the first cycle under way")
        write(path, controller("robot1b", **PACED))
        assert await agent.reload()
        # The renamed controller measures the joints owed in this stop.
        await until(lambda: any(m.controller == "robot1b" for m in log), 30, "robot1b's cycles")
        await until(lambda: all(m.end is not None for m in log), 30, "the cycles' ends")

    assert serve(agent, scenario) == 0
    old = [m for m in log if m.controller == "robot1"]
    new = [m for m in log if m.controller == "robot1b"]
    record(RUNNER, "controller renamed mid-stop", str(len(log)), "-", str(_overlaps(log)), "-")
    assert len(old) == 1 and new, log  # the cycle under way, then only the new runner
    assert old[0].end is not None and old[0].end <= min(m.start for m in new)
    assert _overlaps(log) == 0
