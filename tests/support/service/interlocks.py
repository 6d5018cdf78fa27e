"""The simulated fake controller (drivers/sim/driver.py) subclassed to record what the guard
asked of it (run_cycle entered, how it ended, stop times) or to play a broken status link,
and the rules, cycle and event-loop helpers the interlock tests share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from agent.capture.model import Capture
from agent.config.model import ControllerSettings, InterlockSettings, JointSettings
from agent.errors import CycleAborted, DriverError
from agent.kinds.backlash.kind import backlash_cycle
from drivers.base import BacklashCycle, ControllerMode, ControllerStatus
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointSettings, SimSettings

TOLERANCE_RAD = 0.01
RULES = InterlockSettings(pose_tolerance_rad=TOLERANCE_RAD, require_operator_absent=True)


class RecordingSim(SimDriver):
    """The simulated controller, recording whether run_cycle was entered and how it ended.

    `status_failure` plays a broken link: "raise" makes read_status raise DriverError, "oserror"
    raise a non-driver error (a driver bug), "hang" never answer.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_cycle_calls = 0
        self.cycle_ending: str | None = None
        self.status_failure: str | None = None
        self.stop_motion_times: list[float] = []

    async def stop_motion(self) -> None:
        self.stop_motion_times.append(time.monotonic())
        await super().stop_motion()

    async def read_status(self) -> ControllerStatus:
        if self.status_failure == "raise":
            raise DriverError("link lost")
        if self.status_failure == "oserror":
            raise ConnectionResetError("connection reset by peer")
        if self.status_failure == "hang":
            await asyncio.Event().wait()
        return await super().read_status()

    async def run_cycle(self, cycle: BacklashCycle) -> Capture:
        self.run_cycle_calls += 1
        try:
            capture = await super().run_cycle(cycle)
        except asyncio.CancelledError:
            self.cycle_ending = "cancelled"
            raise
        except CycleAborted:
            self.cycle_ending = "stopped"
            raise
        self.cycle_ending = "finished"
        return capture


def sim(
    joint: JointSettings,
    cls: type[RecordingSim] = RecordingSim,
    *,
    joints: tuple[JointSettings, ...] | None = None,
    **settings_kw: Any,
) -> RecordingSim:
    settings_kw.setdefault("production_runs_s", 0.0)
    settings_kw.setdefault("stop_length_s", 3600.0)
    settings_kw.setdefault("operator_present", False)  # the area scanner sees nobody
    sim_settings = SimSettings(
        joints={joint.name: SimJointSettings(backlash_rad=1e-3, pose_rad=joint.test_pose_rad)},
        **settings_kw,
    )
    return cls("robot", sim_settings, (joint,) if joints is None else joints)


def cycle_of(joint: JointSettings) -> BacklashCycle:
    return backlash_cycle(ControllerSettings(name="robot", driver="sim", joints=(joint,)), joint)


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


def others() -> set[asyncio.Task[Any]]:
    """Tasks still alive apart from the test's own: must be empty after every guarded cycle."""
    return asyncio.all_tasks() - {asyncio.current_task()}


def inject_production(d: RecordingSim) -> None:
    d.inject_mode(ControllerMode.PRODUCTION)
