"""The simulated fake controller: joints integrating the joint model of Giovannitti et al. 2022.

It has every capability and behaves like a controller from the agent's side: a production
timeline (running, then a stop), a permission signal, alarms, speed override, joint poses, and
test cycles that produce encoder captures from the physics in agent.models.joint. Tests and the
demo drive it; `inject_*` methods play the plant's part (operator, production restart, faults).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from agent.capture.model import Capture
from agent.capture.multi import MultiCapture
from agent.errors import CycleAborted, DriverError
from drivers.base import (
    Capability,
    ControllerMode,
    ControllerStatus,
    Cycle,
    Driver,
    ExcitationCycle,
    backlash_only,
    within,
)
from drivers.sim.backlash import simulate_backlash_capture
from drivers.sim.excitation import check_start_pose, simulate_excitation
from drivers.sim.settings import SimJointSettings, SimRobotSettings, SimSettings

T = TypeVar("T")


class SimDriver(Driver):
    name: ClassVar[str] = "sim"
    capabilities: ClassVar[Capability] = (
        Capability.CYCLES
        | Capability.MOTOR_ENCODER
        | Capability.LINK_ENCODER
        | Capability.CURRENT
        | Capability.TOOLPATH_STREAMING
        | Capability.EXCITATION
    )
    settings_type: ClassVar[type[Any] | None] = SimSettings

    def __init__(self, controller: str, settings: Any, joints: tuple[Any, ...]) -> None:
        super().__init__(controller, settings if settings is not None else SimSettings(), joints)
        self._settings: SimSettings = self.settings
        self._connected_at: float | None = None
        self._moving = False
        self._stop_requested = asyncio.Event()
        self._cycles_run = 0
        self._seed_base = (
            self._settings.seed if self._settings.seed is not None else time.time_ns() % 1_000_003
        )
        self.stop_motion_calls = 0
        # What the plant side can change while the agent runs (see inject_*).
        self._permission = self._settings.permission
        self._alarms: tuple[str, ...] = tuple(self._settings.alarms)
        self._override = self._settings.speed_override
        self._forced_mode: ControllerMode | None = None
        self._operator = self._settings.operator_present
        self._expected_override: float | None = None
        self._poses = {
            j.name: self._settings.joints.get(j.name, SimJointSettings()).pose_rad for j in joints
        }

    async def connect(self) -> None:
        self._connected_at = time.monotonic()

    async def close(self) -> None:
        await self.stop_motion()
        self._connected_at = None

    def _timeline(self) -> tuple[tuple[float, float], ...]:
        s = self._settings
        if s.stops:
            return tuple((stop.at_s, stop.at_s + stop.length_s) for stop in s.stops)
        return ((s.production_runs_s, s.production_runs_s + s.stop_length_s),)

    def _stop_left_s(self) -> float | None:
        """Seconds left of the stop the timeline is in; None outside every stop."""
        if self._connected_at is None:
            return None
        elapsed = time.monotonic() - self._connected_at
        for begin, end in self._timeline():
            if begin <= elapsed < end:
                return end - elapsed
        return None

    def _production_mode(self) -> ControllerMode:
        if self._connected_at is None:
            return ControllerMode.DISCONNECTED
        if self._forced_mode is not None:
            return self._forced_mode
        if self._stop_left_s() is None:
            return ControllerMode.PRODUCTION
        return ControllerMode.STOPPED

    @property
    def control_period_s(self) -> float:
        return self._settings.control_period_s

    async def read_status(self) -> ControllerStatus:
        mode = self._production_mode()
        if mode is ControllerMode.STOPPED and self._moving:
            mode = ControllerMode.TEST_CYCLE
        remaining = None
        if mode in (ControllerMode.STOPPED, ControllerMode.TEST_CYCLE) and (
            self._settings.announce_stop
        ):
            remaining = self._expected_override
            if remaining is None:
                remaining = self._stop_left_s()
        return ControllerStatus(
            mode=mode,
            permission=self._permission,
            joint_positions_rad=dict(self._poses),
            alarms=self._alarms,
            speed_override=self._override,
            operator_present=self._operator,
            stop_expected_s=remaining,
            time_s=time.monotonic(),
        )

    async def stop_motion(self) -> None:
        self.stop_motion_calls += 1
        self._stop_requested.set()

    async def run_cycle(self, cycle: Cycle) -> Capture | MultiCapture:
        if isinstance(cycle, ExcitationCycle):
            return await self._run_excitation(cycle)
        cycle = backlash_only(self, cycle)
        if self._connected_at is None:
            raise DriverError(f"{self.controller}: not connected")
        joint = next((j for j in self.joints if j.name == cycle.joint), None)
        if joint is None:
            raise DriverError(f"{self.controller}: no joint named {cycle.joint!r}")
        truth = self._settings.joints.get(cycle.joint, SimJointSettings())
        capture = await self._move(
            lambda seed: simulate_backlash_capture(
                joint,
                cycle,
                truth.backlash_rad,
                noise_counts=self._settings.encoder_noise_counts,
                seed=seed,
                machine=self.controller,
            ),
            cycle.settle_s + cycle.duration_s,
            f"{self.controller}/{cycle.joint}",
        )
        self._poses[cycle.joint] = cycle.test_pose_rad
        return capture

    async def _run_excitation(self, cycle: ExcitationCycle) -> MultiCapture:
        """An identification cycle on the simulated robot (needs `robot:` in the settings)."""
        if self._connected_at is None:
            raise DriverError(f"{self.controller}: not connected")
        robot = self._settings.robot
        if not isinstance(robot, SimRobotSettings):
            raise DriverError(
                f"{self.controller}: the sim has no `robot:` settings (SimRobotSettings), so it "
                "cannot run an identification cycle"
            )
        check_start_pose(self.controller, cycle, self._poses)
        capture = await self._move(
            lambda seed: simulate_excitation(cycle, robot, seed, self.controller),
            cycle.settle_s + cycle.duration_s,
            f"{self.controller}/all",
        )
        link = capture.channel("link_pos_rad")[-1]
        for j, joint in enumerate(cycle.joints):
            if joint in self._poses:
                self._poses[joint] = float(link[j])
        return capture

    async def _move(self, compute: Callable[[int], T], motion_s: float, where: str) -> T:
        """One motion: the physics computed in a thread (from this cycle's seed), then paced.

        With time_scale > 0 the motion takes motion_s * time_scale of wall time, during which a
        stop request ends it as a real controller would; the joint reads as moving throughout.
        """
        self._stop_requested.clear()
        self._moving = True
        try:
            seed = self._seed_base * 1000 + self._cycles_run
            self._cycles_run += 1
            result = await asyncio.to_thread(compute, seed)
            deadline = time.monotonic() + motion_s * self._settings.time_scale
            while True:
                if self._stop_requested.is_set():
                    raise CycleAborted(f"{where}: motion stopped on request")
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await within(self._stop_requested.wait(), min(left, 0.05))
            return result
        finally:
            self._moving = False

    # The plant's side, for tests and demos.
    def inject_permission(self, value: bool) -> None:
        self._permission = value

    def inject_alarm(self, *alarms: str) -> None:
        self._alarms = tuple(alarms)

    def inject_mode(self, mode: ControllerMode | None) -> None:
        self._forced_mode = mode

    def inject_operator(self, present: bool | None) -> None:
        self._operator = present

    def inject_stop_expected(self, seconds: float | None) -> None:
        """Announce another stop length than the timeline's (None: the timeline's again)."""
        self._expected_override = seconds

    def inject_override(self, value: float) -> None:
        self._override = value

    def inject_pose(self, joint: str, pose_rad: float) -> None:
        self._poses[joint] = pose_rad
