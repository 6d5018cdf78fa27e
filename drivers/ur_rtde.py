"""Universal Robots through ur_rtde 1.6.5: RTDE capture at 500 Hz, dashboard and RTDE interlocks.

The C++ clients (`rtde_receive`, `rtde_control`, `dashboard_client`) run in a child process
(drivers.ur_rtde_worker): they can abort the process they live in, and the capture loop needs a
process no estimator or event loop can stall. This module is the asyncio side: it starts the
worker, turns its answers into ControllerStatus and Capture, and restarts it after a failure.

The test cycle (worker side): take control only when no program runs (the control script upload
would stop it), arm the controller's RTDE watchdog, moveJ to the test pose, speedJ the tested joint
at the cycle speed, capture every package from the motion start to the end of the window, stop
(speedStop, then stopJ), moveJ back to the start pose, stop the control script. Any protective or
emergency stop, robot mode leaving RUNNING, program leaving PLAYING, lost connection, frozen
timestamp (the receive interface keeps returning its last values after a drop) or missed package
aborts and stops. If the stop cannot be confirmed the worker is killed: the controller's RTDE
watchdog then stops the control script, and with it the arm.

RTDE reports joint angles after the gear from the motor encoder: motor_pos_rad = actual_q *
gear_ratio (and motor_speed_rad_s = actual_qd * gear_ratio when `motor_speed_from: actual_qd`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import logging
import math
import pickle
import socket
import struct
import sys
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from agent.capture import Capture, CaptureMeta
from agent.errors import ConfigError, CycleAborted, DriverError
from drivers.base import (
    BacklashCycle,
    Capability,
    ControllerMode,
    ControllerStatus,
    Cycle,
    Driver,
    backlash_only,
    within,
)
from drivers.ur_rtde_settings import UR_JOINT_VELOCITY_MAX_RAD_S, UrRtdeSettings

log = logging.getLogger("jha.driver.ur_rtde")

_LEN = struct.Struct(">I")
_SAFETY_OK = ("NORMAL", "REDUCED")
_SAFETY_STOP_BITS = sum(1 << b for b in (2, 4, 5, 6, 7, 8, 9, 10))
_START_TIMEOUT_S = 1.0
_CLEANUP_S = 3.0  # stop script + disconnect after an aborted cycle
_UR_JOINTS = 6


@dataclass(frozen=True)
class StreamStats:
    """What the RTDE stream delivered over a while (the benchmark's figure)."""

    samples: int
    missed: int  # by every path
    seconds: float
    missed_by_path: tuple[int, ...] = ()  # what each receive interface alone would have missed

    @property
    def rate_hz(self) -> float:
        return self.samples / self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate_hz": self.rate_hz}


def controller_status(
    raw: dict[str, Any], joints: tuple[Any, ...], settings: UrRtdeSettings, cycle_active: bool
) -> ControllerStatus:
    """The interlocks' view of one status read (dashboard strings plus RTDE words)."""
    alarms: list[str] = []
    safety_bits = int(raw["safety_bits"])
    if raw["safety"] not in _SAFETY_OK or safety_bits & _SAFETY_STOP_BITS:
        mode = ControllerMode.FAULT
        alarms.append(f"safety status {raw['safety']} (bits {safety_bits:#x})")
    elif raw["robot_mode"] != "RUNNING":
        mode = ControllerMode.MANUAL if raw["robot_mode"] == "BACKDRIVE" else ControllerMode.FAULT
        alarms.append(f"robot mode {raw['robot_mode']}")
    elif raw["remote"] is False:
        mode = ControllerMode.MANUAL  # pendant in local mode: someone is at the robot
    elif raw["program_state"] == "STOPPED":
        mode = ControllerMode.TEST_CYCLE if cycle_active else ControllerMode.STOPPED
    else:
        # A playing (or paused, resumable) program that is not our cycle is production.
        mode = ControllerMode.TEST_CYCLE if cycle_active else ControllerMode.PRODUCTION
    bit = settings.permission_input
    q = raw["q"]
    return ControllerStatus(
        mode=mode,
        permission=True if bit is None else bool((int(raw["digital_inputs"]) >> bit) & 1),
        joint_positions_rad={
            j.name: float(q[j.index - 1]) for j in joints if 1 <= j.index <= _UR_JOINTS
        },
        alarms=tuple(alarms),
        speed_override=float(raw["speed_fraction"]),
        operator_present=None if raw["remote"] is None else not raw["remote"],
        time_s=float(raw["timestamp"]),
    )


def capture_from_rows(
    rows: list[tuple[Any, ...]],
    cycle: BacklashCycle,
    settings: UrRtdeSettings,
    *,
    version: str,
    started_at: str,
) -> Capture:
    """The capture window's packages as a Capture (link-side RTDE values times the gear)."""
    j, n = cycle.joint_index - 1, cycle.gear_ratio
    t = np.array([r[0] for r in rows], dtype=np.float64)
    col = {
        name: np.array([r[k][j] for r in rows], dtype=np.float64)
        for k, name in enumerate(("q", "qd", "cur", "tq", "tqd", "tcur", "temp"), start=1)
    }
    channels = {"motor_pos_rad": col["q"] * n, "current_a": col["cur"]}
    if settings.motor_speed_from == "actual_qd":
        channels["motor_speed_rad_s"] = col["qd"] * n
    extra = {
        "driver": "ur_rtde",
        "controller_version": version,
        "rtde_frequency_hz": settings.frequency_hz,
        "missed_packets": 0,
        "motor_speed_from": settings.motor_speed_from,
        "controller_time_s": float(t[0]),
        "tracking_error_rms_rad": float(np.sqrt(np.mean((col["q"] - col["tq"]) ** 2))),
        "speed_error_rms_rad_s": float(np.sqrt(np.mean((col["qd"] - col["tqd"]) ** 2))),
        "target_current_rms_a": float(np.sqrt(np.mean(col["tcur"] ** 2))),
        "joint_temperature_c": [float(col["temp"][0]), float(col["temp"][-1])],
    }
    return Capture(
        time_s=t - t[0],
        channels=channels,
        meta=CaptureMeta(
            machine=cycle.controller,
            joint=cycle.joint,
            cycle=cycle.kind,
            commanded_speed_rad_s=cycle.motor_speed_rad_s,
            gear_ratio=cycle.gear_ratio,
            encoder_bits=cycle.encoder_bits,
            sample_rate_hz=settings.frequency_hz,
            started_at=started_at,
            extra=extra,
        ),
        source=f"ur_rtde:{settings.host}/{cycle.joint}",
    )


class _Link:
    """The worker process and the length-prefixed pickle socket to it."""

    def __init__(self, label: str, stop_timeout_s: float) -> None:
        self.label = label
        self.stop_timeout_s = stop_timeout_s
        self.proc: asyncio.subprocess.Process | None = None
        self.output: deque[str] = deque(maxlen=20)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._dead: str | None = None

    async def start(self) -> None:
        parent, child = socket.socketpair()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "drivers.ur_rtde_worker",
                "--fd",
                str(child.fileno()),
                pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
        finally:
            child.close()
        reader, self._writer = await asyncio.open_connection(sock=parent)
        self._tasks = [
            asyncio.create_task(self._read(reader)),
            asyncio.create_task(self._log_output()),
        ]

    @property
    def alive(self) -> bool:
        return self._dead is None and self.proc is not None and self.proc.returncode is None

    @property
    def failure(self) -> str:
        """Why the worker is gone ('' while it runs)."""
        return self._dead or ("" if self.alive else "ur_rtde worker ended")

    async def _log_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self.output.append(line)
                log.info("event=ur_rtde_output controller=%s line=%r", self.label, line)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = _LEN.unpack(await reader.readexactly(_LEN.size))
                msg = pickle.loads(await reader.readexactly(size))
                if "event" in msg:
                    self._on_abort(msg)
                    continue
                fut = self._pending.pop(msg["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        await self._died()

    def _on_abort(self, msg: dict[str, Any]) -> None:
        """The worker is stopping after a fault: it must confirm within the stop timeout."""
        log.warning("event=cycle_abort controller=%s reason=%r", self.label, msg["error"])
        loop = asyncio.get_running_loop()
        loop.call_later(self.stop_timeout_s, self._stop_deadline, msg["id"], msg["error"])

    def _stop_deadline(self, msg_id: int, error: str) -> None:
        fut = self._pending.get(msg_id)
        if fut is not None and not fut.done():
            self.kill(
                f"{error}; the stop was not confirmed in {self.stop_timeout_s:g} s: worker "
                "killed, the controller's RTDE watchdog stops the arm"
            )

    async def _died(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await within(self.proc.wait(), 1.0)
        if self._dead is None:
            rc = None if self.proc is None else self.proc.returncode
            how = f"signal {-rc}" if rc is not None and rc < 0 else f"exit code {rc}"
            last = " | ".join(list(self.output)[-3:])
            self._dead = f"ur_rtde worker ended ({how})" + (f"; it said: {last}" if last else "")
        self._fail_pending(self._dead)

    def _fail_pending(self, why: str) -> None:
        message = why if why.startswith(f"{self.label}: ") else f"{self.label}: {why}"
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(DriverError(message))
        self._pending.clear()

    def kill(self, why: str) -> None:
        if self._dead is None:
            self._dead = why
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
        self._fail_pending(self._dead)

    async def request(self, op: str, wait_s: float | None, **args: Any) -> Any:
        if not self.alive or self._writer is None:
            raise DriverError(f"{self.label}: {self._dead or 'ur_rtde worker not running'}")
        msg_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        data = pickle.dumps({"id": msg_id, "op": op, **args})
        try:
            self._writer.write(_LEN.pack(len(data)) + data)
            await self._writer.drain()
            reply = await within(asyncio.shield(fut), wait_s)
        except TimeoutError:
            raise DriverError(f"{self.label}: no answer to {op!r} in {wait_s:g} s") from None
        except ConnectionError as exc:
            raise DriverError(f"{self.label}: ur_rtde worker unreachable: {exc}") from exc
        finally:
            self._pending.pop(msg_id, None)
        if reply["ok"]:
            return reply["result"]
        error = CycleAborted if reply["kind"] == "abort" else DriverError
        raise error(f"{self.label}: {reply['error']}")

    async def close(self, timeout_s: float) -> None:
        with contextlib.suppress(DriverError, CycleAborted):
            await self.request("close", timeout_s)
        await self.reap(timeout_s)

    async def reap(self, timeout_s: float) -> None:
        """Wait for the process to end (killing it after `timeout_s`) and release its pipes."""
        if self.proc is not None:
            try:
                await within(self.proc.wait(), timeout_s)
            except TimeoutError:
                self.kill("did not exit")
                await self.proc.wait()
        self.kill("closed")
        if self._writer is not None:
            self._writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class UrRtdeDriver(Driver):
    name: ClassVar[str] = "ur_rtde"
    capabilities: ClassVar[Capability] = (
        Capability.CYCLES | Capability.MOTOR_ENCODER | Capability.CURRENT
    )
    settings_type: ClassVar[type[Any] | None] = UrRtdeSettings

    def __init__(self, controller: str, settings: Any, joints: tuple[Any, ...]) -> None:
        super().__init__(controller, settings, joints)
        if not isinstance(settings, UrRtdeSettings):
            raise ConfigError(f"controller {controller}: driver ur_rtde needs its settings (host)")
        self._s: UrRtdeSettings = settings
        for j in joints:
            if not 1 <= j.index <= _UR_JOINTS:
                raise ConfigError(
                    f"controller {controller}: joint {j.name} index {j.index}: "
                    f"a UR arm has joints 1..{_UR_JOINTS}"
                )
            rate = j.backlash_cycle.sample_rate_hz
            if not math.isclose(rate, settings.frequency_hz):
                raise ConfigError(
                    f"controller {controller}: joint {j.name} backlash_cycle.sample_rate_hz is "
                    f"{rate:g} Hz but RTDE streams at settings.frequency_hz = "
                    f"{settings.frequency_hz:g} Hz"
                )
        self._link: _Link | None = None
        self._version = ""
        self._next_attempt = 0.0
        self._last_error = ""
        self._cycle_active = False
        self._reaping: set[asyncio.Future[None]] = set()

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

    async def _open(self) -> _Link:
        self._drop_link("reconnecting")
        link = _Link(self.controller, self._s.stop_timeout_s)
        self._link = link
        try:
            await link.start()
            info = await link.request(
                "connect",
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

    async def _ensure_link(self) -> _Link:
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
                "status", self._s.request_timeout_s, stale_after_s=self._s.stale_after_s
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
        if not 1 <= cycle.joint_index <= _UR_JOINTS:
            raise DriverError(f"{where}: joint index {cycle.joint_index} is not 1..{_UR_JOINTS}")
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
            "return_to_start": s.return_to_start,
            "stale_after_s": s.stale_after_s,
            # The watchdog must outlast the blocking speedStop (no kicks while it decelerates).
            "watchdog_hz": min(s.watchdog_min_hz, 1.0 / (stop_s + 0.25)),
            "start_timeout_s": _START_TIMEOUT_S + ramp_s,
        }

    async def run_cycle(self, cycle: Cycle) -> Capture:
        cycle = backlash_only(self, cycle)
        params = self._cycle_params(cycle)
        link = await self._ensure_link()
        started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self._cycle_active = True
        request = asyncio.ensure_future(link.request("cycle", None, **params))
        try:
            result = await asyncio.shield(request)
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
            self._cycle_active = False
        return capture_from_rows(
            result["rows"], cycle, self._s, version=result["version"], started_at=started_at
        )

    async def _stop_quietly(self, link: _Link) -> None:
        try:
            await link.request(
                "stop", self._s.stop_timeout_s + 0.5, timeout_s=self._s.stop_timeout_s
            )
        except (DriverError, CycleAborted) as exc:
            log.error("event=stop_not_confirmed controller=%s error=%r", self.controller, str(exc))
            self._drop_link(f"stop not confirmed: {exc}")

    async def stop_motion(self) -> None:
        link = self._link
        if link is None or not link.alive:
            # Nothing of ours moves: a dead worker's control script is ended by its watchdog.
            return
        try:
            await link.request(
                "stop", self._s.stop_timeout_s + 0.5, timeout_s=self._s.stop_timeout_s
            )
        except (DriverError, CycleAborted) as exc:
            self._drop_link(f"stop not confirmed: {exc}")
            raise DriverError(
                f"{self.controller}: stop not confirmed ({exc}); worker killed, the controller's "
                "RTDE watchdog stops the arm"
            ) from exc

    async def stream_stats(self, duration_s: float) -> StreamStats:
        """Count RTDE packages for `duration_s` without moving (commissioning, benchmark)."""
        link = await self._ensure_link()
        out = await link.request(
            "stream", duration_s + 10.0, duration_s=duration_s, stale_after_s=self._s.stale_after_s
        )
        return StreamStats(
            samples=out["samples"],
            missed=out["missed"],
            seconds=out["seconds"],
            missed_by_path=tuple(out["missed_by_path"]),
        )
