"""The UR worker's motion: the test cycle and the stream count, on the worker's cycle thread.

`CycleOps` is the part of the worker that owns the control interface while a cycle runs (the
command loop is drivers.ur_rtde.worker.server). Take control only when no program runs (the
control script upload would stop it), arm the controller's RTDE watchdog, moveJ to the test pose,
speedJ the tested joint, capture every package from the motion start to the end of the window,
stop (speedStop, then stopJ), moveJ back. Every package is checked (safety bits, robot mode,
program state, missed or frozen packages, the joint's target speed), and so is the agent's
heartbeat: the driver sends one from its event loop every heartbeat_interval_s, and a cycle that
hears none for agent_timeout_s is stopped here, because the agent's interlock watcher (permission,
override, operator presence) runs on that same loop and is blind while it hangs.
"""

from __future__ import annotations

import contextlib
import gc
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from drivers.ur_rtde.safety_bits import STOP_BITS, stop_names
from drivers.ur_rtde.wire import ABORTING, Fault, FaultKind, tell
from drivers.ur_rtde.worker.escalation import CONFIRM_S, motion_after, protective_stop
from drivers.ur_rtde.worker.stream import GapFiller, Row, StreamError, StreamReader

ROBOT_MODE_RUNNING = 7
RUNTIME_PLAYING = 2
_WAIT_S = 0.002  # longest wait for the next package before checking stop, kicks, silence
_KICK_S = 0.05
_MOVING_RAD_S = 1e-4  # target joint speed above which the speedJ run-up has begun


class CycleOps:
    """The cycle thread's side of drivers.ur_rtde.worker.server.Worker (which sets these
    attributes)."""

    sock: socket.socket
    lock: threading.Lock
    recv: Any  # path 0: status reads and moves
    recvs: list[Any]
    cpus: list[int | None]
    ctrl: Any
    host: str
    dashboard_port: int
    frequency_hz: float
    rt_priority: int
    version: tuple[int, ...]
    stop_requested: threading.Event
    stopped: threading.Event
    motion_commanded: bool
    # time.monotonic() of the agent's last heartbeat, set by the main thread as beats arrive.
    beat_at: float
    beat_gap_max_s: float  # the longest silence between two beats in this cycle
    servoing: bool = False  # servoJ streamed in this cycle: the stop is servoStop, not speedStop
    gaps: GapFiller | None = None  # the lost packages the last capture bridged
    servo_late_max_s: float = 0.0  # how late the latest servoJ target of the cycle went out
    # What the escalation to a protective stop did (speedStop/stopJ did not stop the arm).
    stop_note: str | None = None

    # Checks --------------------------------------------------------------------------------
    def _check_sample(self, robot_mode: int, safety_bits: int, runtime: int | None) -> None:
        if safety_bits & STOP_BITS:
            raise Fault(f"safety stop: {stop_names(safety_bits)}", FaultKind.ABORT)
        if robot_mode != ROBOT_MODE_RUNNING:
            raise Fault(f"robot mode left RUNNING (RTDE robot mode {robot_mode})", FaultKind.ABORT)
        if runtime is not None and runtime != RUNTIME_PLAYING:
            raise Fault(
                f"control program no longer PLAYING (runtime state {runtime})", FaultKind.ABORT
            )

    def _check_agent(self, p: dict[str, Any]) -> None:
        """Abort when the agent's event loop has been silent too long (hung or stalled)."""
        silent = time.monotonic() - self.beat_at
        if silent > p["agent_timeout_s"]:
            raise Fault(
                f"no heartbeat from the agent for {silent:.2f} s (agent_timeout_s "
                f"{p['agent_timeout_s']:g} s): its event loop is hung, so the worker stopped "
                "the arm without waiting for the agent's interlocks",
                FaultKind.ABORT,
            )

    def _check_running(self, p: dict[str, Any]) -> None:
        if self.stop_requested.is_set():
            raise Fault("stop requested", FaultKind.ABORT)
        self._check_agent(p)

    def _wait_new(self, last_ts: float, since: float, stale_after_s: float) -> float | None:
        """The next timestamp, or None to poll again; raises on a lost or frozen stream."""
        ts = self.recv.getTimestamp()
        if not math.isfinite(ts):
            raise Fault(f"RTDE stream is garbled (timestamp {ts})")
        if ts != last_ts:
            return float(ts)
        silent = time.monotonic() - since
        if silent > stale_after_s:
            if not self.recv.isConnected():
                raise Fault("RTDE connection to the controller lost during the cycle")
            raise Fault(f"RTDE data stale: timestamp {ts:.3f} s frozen for {silent:.2f} s")
        return None

    def _silence(self, reader: StreamReader, stale_after_s: float) -> None:
        silent = time.monotonic() - reader.last_new_at
        if silent > stale_after_s:
            if not reader.connected():
                raise Fault("RTDE connection to the controller lost during the cycle")
            raise Fault(f"RTDE data stale: no new package for {silent:.2f} s")

    # The cycle -----------------------------------------------------------------------------
    def op_cycle(self, **p: Any) -> dict[str, Any]:
        return self._run_motion(p, lambda: None, self._backlash)

    def op_move(self, **p: Any) -> dict[str, Any]:
        """moveJ of one joint to `target_rad` (the others stay): the return to the test pose."""

        def body(ctrl: Any, p: dict[str, Any]) -> list[Row]:
            q = list(self.recv.getActualQ())
            q[p["index"]] = p["target_rad"]
            self._move(ctrl, q, p)
            return []

        return self._run_motion(p, lambda: None, body)

    def _backlash(self, ctrl: Any, p: dict[str, Any]) -> list[Row]:
        r = self.recv
        q_test = list(r.getActualQ())
        q_test[p["index"]] = p["test_pose_rad"]
        self._move(ctrl, q_test, p)
        qd = [0.0] * 6
        qd[p["index"]] = p["speed_rad_s"]
        self._commanding(p)
        if not ctrl.speedJ(qd, p["accel_rad_s2"], 0.0):
            raise Fault("the controller refused speedJ", FaultKind.ABORT)
        rows = self._capture(ctrl, p)
        self._send_stop(ctrl, p["decel_rad_s2"])
        # The move back is the agent's own guarded motion (op_move), so that a fault in it
        # cannot cost this complete capture (agent.service.pose_recovery).
        return rows

    def _run_motion(
        self,
        p: dict[str, Any],
        precheck: Callable[[], None],
        body: Callable[[Any, dict[str, Any]], list[Row]],
    ) -> dict[str, Any]:
        """Every motion's frame: interlocks before control is taken, `precheck` (refusals that
        need no control interface), the watchdog, `body`, and on any fault the stop."""
        import rtde_control

        r = self.recv
        if r is None:
            raise Fault("not connected")
        ctrl = None
        self.servoing = False
        self.gaps = None
        self.stop_note = None
        try:
            self._check_sample(r.getRobotMode(), r.getSafetyStatusBits(), None)
            if r.getRuntimeState() == RUNTIME_PLAYING:
                # Uploading the control script would stop whatever program is running.
                raise Fault(
                    "a program is running on the controller: not taking control", FaultKind.ABORT
                )
            self._check_agent(p)
            precheck()
            ctrl = rtde_control.RTDEControlInterface(self.host, self.frequency_hz)
            self.ctrl = ctrl
            if not ctrl.setWatchdog(p["watchdog_hz"]):
                raise Fault("the control script did not accept the RTDE watchdog", FaultKind.ABORT)
            # No cyclic-GC pause while the arm moves and the pollers must run every period: the
            # rows are freed by reference counting, the collector runs once the motion is over.
            gc.disable()
            try:
                rows = body(ctrl, p)
            finally:
                gc.enable()
            if self.stop_note is not None:  # the capture is whole, but the arm is not as left
                raise Fault(self.stop_note, FaultKind.ABORT)
            gaps = self.gaps
            return {
                "rows": rows,
                "missed": gaps.total if gaps is not None else 0,
                "filled_at_s": gaps.filled_at_s if gaps is not None else [],
                "servo_late_max_s": self.servo_late_max_s if self.servoing else None,
                "version": ".".join(map(str, self.version)),
                "agent_beat_gap_max_s": self.beat_gap_max_s,
            }
        except Exception as exc:
            # A Fault, or ur_rtde's own exception (a lost connection raises RuntimeError).
            fault = exc if isinstance(exc, Fault) else Fault(str(exc))
            tell(
                self.sock,
                self.lock,
                {"id": p.get("request_id"), "event": ABORTING, "error": str(fault)},
            )
            if ctrl is not None:
                try:
                    self._send_stop(ctrl, p["decel_rad_s2"])
                except Exception as stop_exc:
                    raise Fault(f"{fault}; then the stop failed: {stop_exc}", fault.kind) from exc
                note = self.stop_note
                if note is not None and note not in str(fault):
                    fault = Fault(f"{fault}; {note}", fault.kind)
            raise fault from None if fault is exc else exc
        finally:
            self.stopped.set()
            self.servoing = False
            if ctrl is not None:
                self.ctrl = None
                for call in (ctrl.stopScript, ctrl.disconnect):
                    with contextlib.suppress(Exception):
                        call()

    def _send_stop(self, ctrl: Any, decel: float) -> None:
        # speedStop ends the script's speedj thread (stopJ alone leaves it running), servoStop
        # its servoj thread; stopJ also ends a moveJ. Each returns at once when the program is
        # no longer running.
        failed: Exception | None = None
        try:
            if self.servoing:
                ctrl.servoStop(decel)
            else:
                ctrl.speedStop(decel)
            ctrl.stopJ(decel, False)
        except Exception as exc:  # a lost connection: whether the arm stands is seen below
            failed = exc
        # Confirmed from the packages, not from the commands' answers (drivers.ur_rtde.worker.
        # escalation): an arm seen moving on is stopped by the controller's protective stop.
        speed = motion_after(self.recv, CONFIRM_S) if self.recv is not None else None
        if not speed:  # at rest, or cannot be seen: the driver's timeout, then the watchdog
            if failed is not None:
                raise failed
            self.stopped.set()
            return
        self.stop_note = protective_stop(ctrl, self.recv, self.host, self.dashboard_port, speed)
        self.stopped.set()

    def _commanding(self, p: dict[str, Any]) -> None:
        """About to command motion: from now on a stop request waits for the stop to be sent."""
        self._check_running(p)
        self.stopped.clear()
        self.motion_commanded = True

    def _move(self, ctrl: Any, q: list[float], p: dict[str, Any]) -> None:
        r = self.recv
        self._commanding(p)
        if not ctrl.moveJ(q, p["move_speed_rad_s"], p["move_accel_rad_s2"], True):
            raise Fault("the controller refused moveJ", FaultKind.ABORT)
        dist = max(abs(a - b) for a, b in zip(q, r.getActualQ(), strict=True))
        deadline = time.monotonic() + 5.0 + 2.0 * dist / p["move_speed_rad_s"]
        last_ts, since, kicked = r.getTimestamp(), time.monotonic(), 0.0
        while True:
            self._check_running(p)
            now = time.monotonic()
            if now - kicked > _KICK_S:
                ctrl.kickWatchdog()
                kicked = now
            ts = self._wait_new(last_ts, since, p["stale_after_s"])
            if ts is not None:
                last_ts, since = ts, now
                self._check_sample(r.getRobotMode(), r.getSafetyStatusBits(), r.getRuntimeState())
                if not ctrl.getAsyncOperationProgressEx().isAsyncOperationRunning():
                    break
            if now > deadline:
                raise Fault("moveJ did not finish in time", FaultKind.ABORT)
            time.sleep(0.002)
        miss = max(abs(a - b) for a, b in zip(q, r.getActualQ(), strict=True))
        if miss > 1e-3:
            raise Fault(f"moveJ ended {miss:.4f} rad from its target", FaultKind.ABORT)

    def _reader(self) -> StreamReader:
        return StreamReader(self.recvs, self.frequency_hz, self.rt_priority, self.cpus)

    def _capture(self, ctrl: Any, p: dict[str, Any]) -> list[Row]:
        """Every package from the motion start to the end of the window, or a Fault."""
        j, need, speed = p["index"], p["n_pre"] + p["n_out"], p["speed_rad_s"]
        # After the run-up the target speed is the commanded one: anything else (a program
        # that took over, the speed slider) would make a capture of some other motion.
        run_up = math.ceil(abs(speed) / p["accel_rad_s2"] * self.frequency_hz) + 1
        rows: list[Row] = []
        prev: Row | None = None
        gaps = self.gaps = self._gaps(p)
        kicked = time.monotonic()
        start_by = kicked + p["start_timeout_s"]
        with self._reader() as reader:
            while len(rows) < need:
                self._check_running(p)
                now = time.monotonic()
                if now - kicked > _KICK_S:
                    ctrl.kickWatchdog()
                    kicked = now
                try:
                    got = reader.next_row(_WAIT_S)
                except StreamError as exc:
                    raise Fault(str(exc)) from None
                if got is None:
                    self._silence(reader, p["stale_after_s"])
                    if not rows and now > start_by:
                        raise Fault("the joint did not start moving after speedJ", FaultKind.ABORT)
                    continue
                row, missed = got
                # The motion starts with the first package whose target_qd for the joint is
                # not 0; from the package before it on, none may be missing.
                moving = bool(rows) or abs(row[5][j]) > _MOVING_RAD_S
                self._check_sample(row[8], row[9], row[10])
                if moving and missed:
                    if prev is None or not rows:
                        # Lost right where the motion starts: whether the first of them was
                        # already moving cannot be told, so neither can where the capture
                        # window begins (bridged, it began a tick early and every sample
                        # after was off by one against the truth).
                        raise Fault(
                            f"{missed} RTDE package(s) missed at t = {row[0]:.3f} s, where the "
                            "motion starts"
                        )
                    try:
                        rows.extend(gaps.fill(prev, row, missed))
                    except StreamError as exc:
                        raise Fault(str(exc)) from None
                prev = row
                if moving:
                    rows.append(row)
                    if len(rows) > run_up and abs(row[5][j] - speed) > 1e-3 * abs(speed):
                        raise Fault(
                            f"the joint's target speed left {speed:.4f} rad/s "
                            f"({row[5][j]:.4f} rad/s at t = {row[0]:.3f} s)",
                            FaultKind.ABORT,
                        )
        return rows[p["n_pre"] : need]

    def _gaps(self, p: dict[str, Any]) -> GapFiller:
        return GapFiller(self.frequency_hz, p.get("gap_max_run", 0), p.get("gap_max_total", 0))

    def op_stream(self, duration_s: float, stale_after_s: float, **_: Any) -> dict[str, Any]:
        """Count packages for a while without moving anything (the benchmark)."""
        samples = missed = 0
        end = time.monotonic() + duration_s
        with self._reader() as reader:
            while time.monotonic() < end and not self.stop_requested.is_set():
                try:
                    got = reader.next_row(_WAIT_S)
                except StreamError as exc:
                    raise Fault(str(exc)) from None
                if got is None:
                    self._silence(reader, stale_after_s)
                    continue
                samples += 1
                missed += got[1] if samples > 1 else 0
            by_path = list(reader.missed_by_path)
        return {
            "samples": samples,
            "missed": missed,
            "seconds": duration_s,
            "missed_by_path": by_path,
        }
