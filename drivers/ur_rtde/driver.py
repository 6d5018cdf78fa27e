"""Universal Robots through ur_rtde 1.6.5: RTDE capture at 500 Hz, dashboard and RTDE interlocks.

The C++ clients (`rtde_receive`, `rtde_control`, `dashboard_client`) run in a child process
(drivers/ur_rtde/worker/): they can abort the process they live in, and the capture loop needs a
process no estimator or event loop can stall. This module is the asyncio side: it starts the
worker, turns its answers into ControllerStatus and Capture, and restarts it after a failure.
stop_motion is here: a stop request the worker serves at once (speedStop or servoStop, then
stopJ), the worker killed when it cannot confirm it.

The test cycle (worker side): take control only when no program runs (the control script upload
would stop it), arm the controller's RTDE watchdog, moveJ to the test pose, speedJ the tested joint
at the cycle speed, capture every package from the motion start to the end of the window, stop
(speedStop, then stopJ), moveJ back to the start pose, stop the control script. Any protective or
emergency stop, robot mode leaving RUNNING, program leaving PLAYING, lost connection, frozen
timestamp (the receive interface keeps returning its last values after a drop) or missed package
aborts and stops. If the stop cannot be confirmed the worker is killed: the controller's RTDE
watchdog then stops the control script, and with it the arm. While the cycle runs the driver sends
the worker a heartbeat from its event loop every heartbeat_interval_s; a loop that hangs (a bug,
a blocking call) also blinds the interlock watcher, so the worker stops the arm and aborts the
cycle after agent_timeout_s without a beat, as it does when the agent dies (EOF on its socket).

The excitation cycle (identification, Capability.EXCITATION): refused unless every joint stands
at the trajectory's q0; then servoJ along the trajectory at the RTDE rate (initPeriod/waitPeriod),
the same checks, heartbeat and stops as the test cycle, ended with servoStop then stopJ
(drivers.ur_rtde.excitation, drivers.ur_rtde.worker.servo).

Modules: drivers.ur_rtde.status (status and capture mapping), drivers.ur_rtde.link (the worker
process and its socket), drivers.ur_rtde.worker (the worker side: server, cycle, servo, stream).

RTDE reports joint angles after the gear from the motor encoder: motor_pos_rad = actual_q *
gear_ratio (and motor_speed_rad_s = actual_qd * gear_ratio when `motor_speed_from: actual_qd`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
from typing import Any, ClassVar

from agent.capture.model import Capture
from agent.capture.multi import MultiCapture
from agent.errors import ConfigError, CycleAborted, DriverError
from drivers.base import (
    BacklashCycle,
    Capability,
    ControllerStatus,
    Cycle,
    Driver,
    ExcitationCycle,
    within,
)
from drivers.travel import JointTravel, Ramps, TravelLimits
from drivers.ur_rtde.excitation import excitation_request, multi_capture_from_rows
from drivers.ur_rtde.link import WorkerLink
from drivers.ur_rtde.settings import UR_JOINT_VELOCITY_MAX_RAD_S, UrRtdeSettings
from drivers.ur_rtde.status import UR_JOINTS, StreamStats, capture_from_rows, controller_status
from drivers.ur_rtde.wire import Op
from drivers.ur_rtde.worker.escalation import CONFIRM_S, PROTECTIVE_S

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 1.0
_CLEANUP_S = 3.0  # stop script + disconnect after an aborted cycle


class UrRtdeDriver(Driver):
    name: ClassVar[str] = "ur_rtde"
    capabilities: ClassVar[Capability] = (
        Capability.CYCLES
        | Capability.MOTOR_ENCODER
        | Capability.CURRENT
        | Capability.EXCITATION
        | Capability.RETURN_MOVE
    )
    settings_type: ClassVar[type[Any] | None] = UrRtdeSettings
    # imported by the worker process only (drivers.ur_rtde.worker.cycle)
    requires: ClassVar[tuple[str, ...]] = ("rtde_control", "rtde_receive")

    def __init__(self, controller: str, settings: Any, joints: tuple[Any, ...]) -> None:
        super().__init__(controller, settings, joints)
        if not isinstance(settings, UrRtdeSettings):
            raise ConfigError(f"controller {controller}: driver ur_rtde needs its settings (host)")
        self._s: UrRtdeSettings = settings
        for j in joints:
            if not 1 <= j.index <= UR_JOINTS:
                raise ConfigError(
                    f"controller {controller}: joint {j.name} index {j.index}: "
                    f"a UR arm has joints 1..{UR_JOINTS}"
                )
            rate = j.backlash_cycle.sample_rate_hz
            if not math.isclose(rate, settings.frequency_hz):
                raise ConfigError(
                    f"controller {controller}: joint {j.name} backlash_cycle.sample_rate_hz is "
                    f"{rate:g} Hz but RTDE streams at settings.frequency_hz = "
                    f"{settings.frequency_hz:g} Hz"
                )
        self._link: WorkerLink | None = None
        self._version = ""
        self._next_attempt = 0.0
        self._last_error = ""
        self._cycle_active = False
        self._reaping: set[asyncio.Future[None]] = set()

    @classmethod
    def joint_travel(cls, settings: Any, index: int) -> JointTravel:
        # Every joint of the UR3e/5e/10e/16e (and the CB3 arms) turns +-360 degrees (the user
        # manuals' joint ranges); a tighter range set in the robot's safety config is not
        # readable over RTDE, so give it as the joint's position_min_rad/position_max_rad.
        return TravelLimits(-2.0 * math.pi, 2.0 * math.pi, source="UR joint range +-360 deg")

    def ramps(self, cycle: Cycle) -> Ramps:
        s = self._s
        if isinstance(cycle, ExcitationCycle):
            return Ramps(decel_rad_s2=s.stop_deceleration_rad_s2)
        return Ramps(s.speedj_acceleration_rad_s2, s.stop_deceleration_rad_s2)

    @property
    def control_period_s(self) -> float:
        return self._s.status_period_s

    @property
    def worker_pid(self) -> int | None:
        """The worker process holding the ur_rtde clients (None before connect / after close)."""
        link = self._link
        return None if link is None or link.proc is None else link.proc.pid

    # Connection ---------------------------------------------------------------------------
    async def connect(self) -> None:
        await self._open()

    async def _open(self) -> WorkerLink:
        self._drop_link("reconnecting")
        link = WorkerLink(self.controller, self._s.stop_timeout_s)
        self._link = link
        try:
            await link.start()
            info = await link.request(
                Op.CONNECT,
                self._s.connect_timeout_s,
                host=self._s.host,
                dashboard_port=self._s.dashboard_port,
                frequency_hz=self._s.frequency_hz,
                rt_priority=self._s.rt_priority,
                paths=self._s.rtde_paths,
            )
        except (DriverError, CycleAborted, OSError) as exc:
            self._last_error = str(exc)
            self._drop_link(str(exc))
            why = str(exc).removeprefix(f"{self.controller}: ")
            host = self._s.host
            raise DriverError(f"{self.controller}: cannot connect to {host}: {why}") from exc
        self._version = str(info["version"])
        log.info("event=ur_connected controller=%s version=%s", self.controller, self._version)
        return link

    def _drop_link(self, why: str) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.kill(why)
            reaping = asyncio.ensure_future(link.reap(1.0))
            self._reaping.add(reaping)
            reaping.add_done_callback(self._reaping.discard)
            self._next_attempt = asyncio.get_running_loop().time() + self._s.reconnect_backoff_s

    async def _ensure_link(self) -> WorkerLink:
        if self._link is not None and self._link.alive:
            return self._link
        if self._link is not None:
            self._last_error = self._link.failure
            self._drop_link(self._last_error)
        wait = self._next_attempt - asyncio.get_running_loop().time()
        if wait > 0:
            raise DriverError(
                f"{self.controller}: not connected ({self._last_error}); "
                f"next attempt in {wait:.1f} s"
            )
        return await self._open()

    async def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            await link.close(self._s.request_timeout_s)
        await asyncio.gather(*self._reaping, return_exceptions=True)
        self._reaping.clear()

    # Status -------------------------------------------------------------------------------
    async def read_status(self) -> ControllerStatus:
        link = await self._ensure_link()
        try:
            raw = await link.request(
                Op.STATUS, self._s.request_timeout_s, stale_after_s=self._s.stale_after_s
            )
        except DriverError as exc:
            self._last_error = str(exc)
            if not self._cycle_active:  # during a cycle the stop still needs the worker
                self._drop_link(str(exc))
            raise
        return controller_status(raw, self.joints, self._s, self._cycle_active)

    # Motion -------------------------------------------------------------------------------
    def _cycle_params(self, cycle: BacklashCycle) -> dict[str, Any]:
        s = self._s
        where = f"{self.controller}/{cycle.joint}"
        if not 1 <= cycle.joint_index <= UR_JOINTS:
            raise DriverError(f"{where}: joint index {cycle.joint_index} is not 1..{UR_JOINTS}")
        if not math.isclose(cycle.sample_rate_hz, s.frequency_hz):
            raise DriverError(
                f"{where}: the cycle asks for {cycle.sample_rate_hz:g} Hz, RTDE streams at "
                f"{s.frequency_hz:g} Hz"
            )
        speed = cycle.motor_speed_rad_s / cycle.gear_ratio
        if abs(speed) > UR_JOINT_VELOCITY_MAX_RAD_S:
            raise DriverError(
                f"{where}: the cycle needs {abs(speed):.2f} rad/s at the joint, a UR joint "
                f"moves at most {UR_JOINT_VELOCITY_MAX_RAD_S} rad/s"
            )
        accel, decel = s.speedj_acceleration_rad_s2, s.stop_deceleration_rad_s2
        ramp_s = abs(speed) / accel
        if s.joint_limit_rad is not None:
            travel = abs(speed) * (0.5 * ramp_s + cycle.settle_s + cycle.duration_s)
            travel += speed * speed / (2.0 * decel)
            end = cycle.test_pose_rad + math.copysign(travel, speed)
            if max(abs(cycle.test_pose_rad), abs(end)) > s.joint_limit_rad:
                raise DriverError(
                    f"{where}: the cycle runs from {cycle.test_pose_rad:.3f} to {end:.3f} rad, "
                    f"beyond the joint limit +-{s.joint_limit_rad:g} rad"
                )
        stop_s = abs(speed) / decel
        fs = s.frequency_hz
        return {
            "index": cycle.joint_index - 1,
            "test_pose_rad": cycle.test_pose_rad,
            "speed_rad_s": speed,
            "accel_rad_s2": accel,
            "decel_rad_s2": decel,
            "n_pre": math.ceil((ramp_s + cycle.settle_s) * fs),
            "n_out": round(cycle.duration_s * fs) + 1,
            "move_speed_rad_s": s.move_speed_rad_s,
            "move_accel_rad_s2": s.move_acceleration_rad_s2,
            "stale_after_s": s.stale_after_s,
            # The watchdog must outlast the blocking speedStop (no kicks while it decelerates).
            "watchdog_hz": min(s.watchdog_min_hz, 1.0 / (stop_s + 0.25)),
            "start_timeout_s": _START_TIMEOUT_S + ramp_s,
            "agent_timeout_s": s.agent_timeout_s,
            "gap_max_run": s.gap_fill_max_run,
            "gap_max_total": s.gap_fill_max_per_cycle,
        }

    def _excitation_params(self, cycle: ExcitationCycle) -> dict[str, Any]:
        s = self._s
        # The stop comes from the trajectory's top speed, bounded by the UR's joint limit.
        stop_s = UR_JOINT_VELOCITY_MAX_RAD_S / s.stop_deceleration_rad_s2
        return {
            **excitation_request(cycle, s, self.joints, self.controller),
            "decel_rad_s2": s.stop_deceleration_rad_s2,
            "stale_after_s": s.stale_after_s,
            "watchdog_hz": min(s.watchdog_min_hz, 1.0 / (stop_s + 0.25)),
            "agent_timeout_s": s.agent_timeout_s,
            "gap_max_run": s.gap_fill_max_run,
            "gap_max_total": s.gap_fill_max_per_cycle,
        }

    async def run_cycle(self, cycle: Cycle) -> Capture | MultiCapture:
        started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        if isinstance(cycle, ExcitationCycle):
            result = await self._motion(Op.EXCITE, "identification", self._excitation_params(cycle))
            return multi_capture_from_rows(
                result["rows"],
                cycle,
                self._s,
                self.joints,
                version=result["version"],
                beat_gap_max_s=float(result["agent_beat_gap_max_s"]),
                filled_at_s=result.get("filled_at_s", []),
                servo_late_max_s=result.get("servo_late_max_s"),
            )
        result = await self._motion(Op.CYCLE, cycle.joint, self._cycle_params(cycle))
        return capture_from_rows(
            result["rows"],
            cycle,
            self._s,
            version=result["version"],
            started_at=started_at,
            beat_gap_max_s=float(result["agent_beat_gap_max_s"]),
            filled_at_s=result.get("filled_at_s", []),
        )

    @property
    def returns_by_agent(self) -> bool:
        return self._s.return_to_start

    @property
    def move_speed_max_rad_s(self) -> float:
        return self._s.move_speed_rad_s

    async def move_joint(self, joint: str, target_rad: float, speed_rad_s: float) -> None:
        spec = next((j for j in self.joints if j.name == joint), None)
        if spec is None:
            raise DriverError(f"{self.controller}: no joint named {joint!r}")
        s = self._s
        await self._motion(
            Op.MOVE,
            joint,
            {
                "index": spec.index - 1,
                "target_rad": target_rad,
                "move_speed_rad_s": min(speed_rad_s, s.move_speed_rad_s),
                "move_accel_rad_s2": s.move_acceleration_rad_s2,
                "decel_rad_s2": s.stop_deceleration_rad_s2,
                "stale_after_s": s.stale_after_s,
                "watchdog_hz": s.watchdog_min_hz,
                "agent_timeout_s": s.agent_timeout_s,
            },
        )

    async def _motion(self, op: Op, what: str, params: dict[str, Any]) -> dict[str, Any]:
        """One motion request to the worker with the heartbeat running; on cancellation the
        stop is sent and the worker given time to end its control script."""
        link = await self._ensure_link()
        self._cycle_active = True
        # The beats start before the request, so the worker never waits for a first one.
        beats = asyncio.create_task(self._heartbeat(link), name=f"ur_rtde heartbeat {what}")
        request = asyncio.ensure_future(link.request(op, None, **params))
        try:
            result: dict[str, Any] = await asyncio.shield(request)
        except asyncio.CancelledError:
            await self._stop_quietly(link)
            # Let the worker finish (stop script, disconnect) so the next cycle finds it idle.
            with contextlib.suppress(BaseException):
                await within(request, _CLEANUP_S)
            raise
        except DriverError as exc:
            self._drop_link(str(exc))
            raise
        finally:
            beats.cancel()
            self._cycle_active = False
        return result

    async def _heartbeat(self, link: WorkerLink) -> None:
        """A beat to the worker every heartbeat_interval_s while the cycle runs.

        Sent from the event loop on purpose: a loop that hangs stops the beats, and the worker
        stops the arm, as it does when the process dies. Never waits on the socket.
        """
        while True:
            link.beat()
            await asyncio.sleep(self._s.heartbeat_interval_s)

    async def _stop_quietly(self, link: WorkerLink) -> None:
        try:
            await link.request(
                Op.STOP, self._s.stop_timeout_s + 0.5, timeout_s=self._s.stop_timeout_s
            )
        except (DriverError, CycleAborted) as exc:
            log.error("event=stop_not_confirmed controller=%s error=%r", self.controller, str(exc))
            self._drop_link(f"stop not confirmed: {exc}")

    async def stop_motion(self) -> str | None:
        link = self._link
        if link is None or not link.alive:
            # Nothing of ours moves: a dead worker's control script is ended by its watchdog.
            return None
        try:
            out = await link.request(
                Op.STOP, self._s.stop_timeout_s + 0.5, timeout_s=self._s.stop_timeout_s
            )
        except (DriverError, CycleAborted) as exc:
            self._drop_link(f"stop not confirmed: {exc}")
            raise DriverError(
                f"{self.controller}: stop not confirmed ({exc}); worker killed, the controller's "
                "RTDE watchdog stops the arm"
            ) from exc
        # "stopped", "nothing moving", or what the worker's escalation did (a protective stop)
        return None if out in ("stopped", "nothing moving") else str(out)

    async def protective_stop(self) -> str | None:
        """triggerProtectiveStop through the worker's control script, confirmed at rest from
        the packages; the paused script is then stopped from the dashboard
        (drivers.ur_rtde.worker.escalation). None when no worker runs: nothing of ours moves."""
        link = self._link
        if link is None or not link.alive:
            return None
        out = await link.request(
            Op.PROTECTIVE_STOP,
            self._s.stop_timeout_s + PROTECTIVE_S + CONFIRM_S + 3.0,
            timeout_s=self._s.stop_timeout_s,
        )
        return str(out)

    async def stream_stats(self, duration_s: float) -> StreamStats:
        """Count RTDE packages for `duration_s` without moving (commissioning, benchmark)."""
        link = await self._ensure_link()
        out = await link.request(
            Op.STREAM, duration_s + 10.0, duration_s=duration_s, stale_after_s=self._s.stale_after_s
        )
        return StreamStats(
            samples=out["samples"],
            missed=out["missed"],
            seconds=out["seconds"],
            missed_by_path=tuple(out["missed_by_path"]),
        )
