"""The simulated fake controller: joints integrating the joint model of Giovannitti et al. 2022.

It has every capability and behaves like a controller from the agent's side: a production
timeline (running, then a stop), a permission signal, alarms, speed override, joint poses, and
test cycles that produce encoder captures from the physics in agent.models.joint. Tests and the
demo drive it; `inject_*` methods play the plant's part (operator, production restart, faults).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
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
from drivers.sim import motion_log
from drivers.sim.backlash import simulate_backlash_capture
from drivers.sim.excitation import check_start_pose, simulate_excitation
from drivers.sim.settings import SimJointSettings, SimRobotSettings, SimSettings
from drivers.travel import CONTINUOUS, JointTravel, Ramps

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
        | Capability.RETURN_MOVE
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
        self.protective_stops = 0
        self.moves: list[tuple[str, float, float]] = []  # move_joint calls: joint, from, to
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
        # The joint moving now: (name, position at t0, speed rad/s, motion length s in sim time,
        # t0 monotonic).
        self._motion: tuple[str, float, float, float, float] | None = None
        self._ignore_stops = 0  # inject_stop_ignored: stop requests the "drive" does not obey
        self._runaway = False  # a stop was ignored: the joint moves on until one is obeyed

    @classmethod
    def joint_travel(cls, settings: Any, index: int) -> JointTravel:
        # The simulated joint is the test bench of Giovannitti et al. 2022: a gearbox whose
        # load turns without end. Limits in the joint's config still apply.
        return CONTINUOUS

    def ramps(self, cycle: Cycle) -> Ramps:
        # The simulated joints change speed at once: no run-up or stop distance.
        return Ramps(math.inf, math.inf)

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
        poses, speeds = self._kinematics()
        return ControllerStatus(
            mode=mode,
            permission=self._permission,
            joint_positions_rad=poses,
            joint_speeds_rad_s=speeds,
            alarms=self._alarms,
            speed_override=self._override,
            operator_present=self._operator,
            stop_expected_s=remaining,
            time_s=time.monotonic(),
        )

    def _kinematics(self) -> tuple[dict[str, float], dict[str, float]]:
        """Where each joint is and how fast it moves, now."""
        poses = dict(self._poses)
        speeds = dict.fromkeys(poses, 0.0)
        if self._motion is not None:
            name, at, speed, length_s, t0 = self._motion
            elapsed = self._sim_elapsed_s(t0)
            if self._runaway or elapsed < length_s:
                poses[name] = at + speed * elapsed
                speeds[name] = speed
            else:  # the motion is over; the capture's physics may still be computing
                poses[name] = at + speed * length_s
        return poses, speeds

    def _sim_elapsed_s(self, t0: float) -> float:
        scale = self._settings.time_scale
        return (time.monotonic() - t0) / scale if scale > 0 else 0.0

    async def stop_motion(self) -> None:
        self.stop_motion_calls += 1
        if self._ignore_stops > 0:
            self._ignore_stops -= 1
            # The drive runs on whatever the agent does with its cycle task.
            self._runaway = self._motion is not None
            return
        self._freeze()
        self._stop_requested.set()

    async def protective_stop(self) -> str | None:
        self.protective_stops += 1
        self._ignore_stops = 0
        self._freeze()
        self._stop_requested.set()
        return "protective stop (simulated)"

    def _freeze(self) -> None:
        """Stop where the joint is now."""
        if self._motion is not None:
            self._poses = self._kinematics()[0]
            self._motion = None
        self._runaway = False
        self._moving = False

    @property
    def move_speed_max_rad_s(self) -> float:
        return 50.0  # the bench's load side: its test cycles run it at up to ~80 rad/s

    async def move_joint(self, joint: str, target_rad: float, speed_rad_s: float) -> None:
        if joint not in self._poses:
            raise DriverError(f"{self.controller}: no joint named {joint!r}")
        if speed_rad_s <= 0:
            raise DriverError(f"{self.controller}/{joint}: move speed must be > 0")
        speed_rad_s = min(speed_rad_s, self.move_speed_max_rad_s)
        start = self._poses[joint]
        distance = target_rad - start
        self.moves.append((joint, start, target_rad))
        await self._move(
            lambda _seed: None,
            abs(distance) / speed_rad_s,
            f"{self.controller}/{joint}",
            motion=(joint, start, math.copysign(speed_rad_s, distance)),
            what="move",
        )
        self._poses[joint] = target_rad

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
            motion=(cycle.joint, cycle.test_pose_rad, cycle.motor_speed_rad_s / cycle.gear_ratio),
        )
        # The cycle ends with the move back to the test pose.
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

    async def _move(
        self,
        compute: Callable[[int], T],
        motion_s: float,
        where: str,
        motion: tuple[str, float, float] | None = None,
        what: str = "cycle",
    ) -> T:
        """One motion: the physics computed in a thread (from this cycle's seed), then paced.

        With time_scale > 0 the motion takes motion_s * time_scale of wall time, during which a
        stop request ends it as a real controller would; the joint reads as moving throughout,
        and `motion` (joint, start, speed) says where it is: a stopped joint stays there.
        """
        self._stop_requested.clear()
        self._moving = True
        how = ""  # how the motion ended, for the motion log; "" before it started
        try:
            seed = self._seed_base * 1000 + self._cycles_run
            self._cycles_run += 1
            # The joint moves from the command on, as a controller's would; the physics of the
            # capture is computed meanwhile (the capture is ready when both are done).
            started = time.monotonic()
            if motion is not None:
                self._motion = (*motion, motion_s, started)
            self._log_motion("start", where, motion, motion_s, what)
            how = "failed"  # until it is known to be otherwise
            result = await asyncio.to_thread(compute, seed)
            deadline = started + motion_s * self._settings.time_scale
            while True:
                if self._stop_requested.is_set():
                    how = "stopped"
                    raise CycleAborted(f"{where}: motion stopped on request")
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await within(self._stop_requested.wait(), min(left, 0.05))
            how = "done"
            return result
        except asyncio.CancelledError:
            how = how and "cancelled"
            raise
        finally:
            if not self._runaway:
                self._motion = None
                self._moving = False
                if how:
                    self._log_motion("end", where, motion, motion_s, what, how=how)

    def _log_motion(
        self,
        event: str,
        where: str,
        motion: tuple[str, float, float] | None,
        motion_s: float,
        what: str,
        **more: str,
    ) -> None:
        """A line of the machine's motion log (drivers.sim.motion_log), when it keeps one."""
        if self._settings.motion_log is None:
            return
        fields: dict[str, Any] = {
            "event": event,
            "machine": self.controller,
            "joint": where.rsplit("/", 1)[-1],
            "what": what,
        }
        if event == "start":
            # The whole travel commanded; an excitation (motion None) states none.
            fields["from_rad"] = fields["to_rad"] = None
            if motion is not None:
                _, start, speed = motion
                fields["from_rad"], fields["to_rad"] = start, start + speed * motion_s
        motion_log.append(self._settings.motion_log, **fields, **more)

    # The plant's side, for tests and demos.
    def inject_stop_ignored(self, times: int = 1) -> None:
        """The next `times` stop requests are not obeyed (a drive that does not stop)."""
        self._ignore_stops = times

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
