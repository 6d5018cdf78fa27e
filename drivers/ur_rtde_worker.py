"""The child process that runs ur_rtde's C++ clients for drivers.ur_rtde.UrRtdeDriver.

ur_rtde can abort the whole process (a std::length_error on a garbled RTDE stream, an exception
escaping its reconnect thread after a broken pipe). Running it here keeps the daemon alive: the
driver sees this process die and reports a DriverError. It also gives the 500 Hz capture loop a
process of its own, so no estimator or event loop in the daemon can make it miss a package.

Protocol on the socket passed as `--fd`: length-prefixed pickles (uint32 big-endian + payload),
both ways, between two processes of the same installation. Requests `{"id", "op", **args}`;
replies `{"id", "ok": True, "result"}` or `{"id", "ok": False, "kind", "error"}` where kind is
"abort" (the controller refused or stopped the motion) or "driver" (communication failed). While a
cycle runs, `{"id", "event": "aborting", "error"}` announces an abort before the stop is sent.

Threads: the main thread reads requests and serves stop and close at once; a request thread
serves connect and status reads (dashboard and receive interface) in turn; a cycle thread owns the
control interface and merges the capture from the pollers of the receive paths
(drivers.ur_rtde_stream). ur_rtde releases the GIL in its blocking calls, so a slow dashboard
answer delays neither a stop nor the capture.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pickle
import queue
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from drivers.ur_rtde_stream import (
    Row,
    StreamError,
    StreamReader,
    path_cpus,
    realtime,
    threads,
)

_LEN = struct.Struct(">I")
# Output recipe of the receive interface: the capture channels and the interlock signals.
VARIABLES = [
    "timestamp",
    "actual_q",
    "actual_qd",
    "actual_current",
    "target_q",
    "target_qd",
    "target_current",
    "joint_temperatures",
    "robot_mode",
    "safety_mode",
    "safety_status_bits",
    "robot_status_bits",
    "runtime_state",
    "target_speed_fraction",
    "actual_digital_input_bits",
]
ROBOT_MODE_RUNNING = 7
RUNTIME_PLAYING = 2
# safety_status_bits that mean the arm is stopped by safety: protective, safeguard, emergency
# (system, robot, any), violation, fault, "stopped due to safety".
SAFETY_STOP_BITS = sum(1 << b for b in (2, 4, 5, 6, 7, 8, 9, 10))
_WAIT_S = 0.002  # longest wait for the next package before checking stop, kicks, silence
_KICK_S = 0.05
_SWITCH_S = 0.0005  # GIL switch interval with real-time threads (Python's default is 5 ms)
_MOVING_RAD_S = 1e-4  # target joint speed above which the speedJ run-up has begun
# After the driver is gone: time for the cycle thread's speedStop, stopJ and stop script (each
# returns at once on a controller that no longer runs the script; the ramps take < 1 s).
_EOF_STOP_S = 5.0


class Fault(Exception):
    """Ends a request: kind 'abort' (controller stopped or refused) or 'driver' (link failed)."""

    def __init__(self, message: str, kind: str = "driver") -> None:
        super().__init__(message)
        self.kind = kind


def send_msg(sock: socket.socket, lock: threading.Lock, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    with lock:
        sock.sendall(_LEN.pack(len(data)) + data)


def tell(sock: socket.socket, lock: threading.Lock, obj: Any) -> None:
    """send_msg to a driver that may be gone (killed): nobody is left to tell, and what the
    worker does next (stop the arm) must not depend on it."""
    with contextlib.suppress(OSError):
        send_msg(sock, lock, obj)


def recv_msg(sock: socket.socket) -> Any:
    def exact(n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    head = exact(_LEN.size)
    if head is None:
        return None
    body = exact(_LEN.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def _ask(call: Callable[[], str], request: str) -> str:
    try:
        return call()
    except UnicodeDecodeError as exc:  # pybind11 cannot make a str of the answer
        raise Fault(f"dashboard answered {exc.object!r} to {request!r}") from None


def _after(answer: str, prefix: str, request: str) -> str:
    if not answer.startswith(prefix) or not answer[len(prefix) :].strip().isidentifier():
        raise Fault(f"dashboard answered {answer!r} to {request!r}")
    return answer[len(prefix) :].strip()


class Worker:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.recv: Any = None  # path 0: status reads and moves
        self.recvs: list[Any] = []
        self.cpus: list[int | None] = []
        self.dash: Any = None
        self.ctrl: Any = None
        self.host = ""
        self.frequency_hz = 500.0
        self.rt_priority = 0
        self.version: tuple[int, ...] = ()
        self.cycle: threading.Thread | None = None
        self.stop_requested = threading.Event()
        self.stopped = threading.Event()
        self.motion_commanded = False
        self._seen = (math.nan, 0.0)

    # Requests ------------------------------------------------------------------------------
    def serve(self) -> None:
        """Stop requests are served at once; status reads queue on their own thread."""
        requests: queue.Queue[dict[str, Any] | None] = queue.Queue()

        def serial() -> None:
            while (msg := requests.get()) is not None:
                self.reply(msg["id"], getattr(self, "op_" + str(msg.get("op")), None), msg)

        threading.Thread(target=serial, name="requests", daemon=True).start()
        while True:
            msg = recv_msg(self.sock)
            if msg is None:
                break
            op = msg.get("op")
            if op in ("cycle", "stream"):
                self.start_thread(msg)
            elif op in ("stop", "close"):
                self.reply(msg["id"], getattr(self, "op_" + op), msg)
                if op == "close":
                    break
            else:
                requests.put(msg)
        requests.put(None)

    def reply(self, msg_id: int, fn: Callable[..., Any] | None, msg: dict[str, Any]) -> None:
        args = {k: v for k, v in msg.items() if k not in ("id", "op")}
        try:
            if fn is None:
                raise Fault(f"unknown request {msg.get('op')!r}")
            out = {"id": msg_id, "ok": True, "result": fn(**args)}
        except Fault as exc:
            out = {"id": msg_id, "ok": False, "kind": exc.kind, "error": str(exc)}
        except Exception as exc:  # ur_rtde raises RuntimeError with its own message
            out = {"id": msg_id, "ok": False, "kind": "driver", "error": f"{exc}"}
        tell(self.sock, self.lock, out)

    def op_connect(
        self, host: str, dashboard_port: int, frequency_hz: float, rt_priority: int, paths: int
    ) -> dict[str, Any]:
        import dashboard_client
        import rtde_receive

        self.host, self.frequency_hz, self.rt_priority = host, frequency_hz, rt_priority
        if rt_priority > 0:
            # Every thread of the worker real-time (threads started later inherit it): a thread
            # holding the GIL must not wait behind the machine's other work while the pollers
            # wait for the GIL; a short switch interval bounds how long they wait for it.
            realtime(os.getpid(), rt_priority)
            realtime(0, rt_priority)
            sys.setswitchinterval(_SWITCH_S)
        self.dash = dashboard_client.DashboardClient(host, dashboard_port)
        self.dash.connect()
        if not self.dash.isConnected():
            raise Fault(f"no dashboard server at {host}:{dashboard_port}")
        text = self.dash.polyscopeVersion()
        try:
            self.version = tuple(int(x) for x in text.split("."))
        except ValueError:
            raise Fault(f"dashboard answered {text!r} to 'PolyscopeVersion'") from None
        if self.version[0] < 5 and frequency_hz > 125.0:
            raise Fault(
                f"a CB3 controller ({text}) streams RTDE at 125 Hz at most, not {frequency_hz:g}"
            )
        self.recvs = []
        for cpu in path_cpus(paths):
            before = threads()
            self.recvs.append(
                rtde_receive.RTDEReceiveInterface(
                    host, frequency_hz, VARIABLES, False, False, rt_priority
                )
            )
            if rt_priority > 0:
                # ur_rtde raises its receive thread's priority only on a PREEMPT_RT kernel;
                # elsewhere a descheduled receive thread reads two packages at once and keeps
                # only the newer, so the priority is set here on the threads it just started.
                for tid in threads() - before:
                    realtime(tid, rt_priority, cpu)
        self.recv = self.recvs[0]
        self.cpus = path_cpus(paths)
        return {"version": text}

    def op_status(self, stale_after_s: float) -> dict[str, Any]:
        r, d = self.recv, self.dash
        if r is None or d is None:
            raise Fault("not connected")
        if not r.isConnected():
            raise Fault("RTDE connection to the controller lost")
        ts, now = r.getTimestamp(), time.monotonic()
        if not math.isfinite(ts):
            raise Fault(f"RTDE stream is garbled (timestamp {ts})")
        if ts != self._seen[0]:
            self._seen = (ts, now)
        elif now - self._seen[1] > stale_after_s:
            raise Fault(
                f"RTDE data stale: timestamp {ts:.3f} s unchanged for {now - self._seen[1]:.2f} s"
            )
        if not d.isConnected():
            d.connect()
        robot = _after(_ask(d.robotmode, "robotmode"), "Robotmode: ", "robotmode")
        safety = _after(_ask(d.safetystatus, "safetystatus"), "Safetystatus: ", "safetystatus")
        state, _, program = _ask(d.programState, "programState").partition(" ")
        if state not in ("STOPPED", "PLAYING", "PAUSED"):
            raise Fault(f"dashboard answered {state + ' ' + program!r} to 'programState'")
        remote = d.isInRemoteControl() if self.version[:2] >= (5, 6) else None
        return {
            "robot_mode": robot,
            "safety": safety,
            "program_state": state,
            "program": program,
            "remote": remote,
            "timestamp": ts,
            "q": list(r.getActualQ()),
            "rtde_robot_mode": r.getRobotMode(),
            "safety_bits": r.getSafetyStatusBits(),
            "runtime_state": r.getRuntimeState(),
            "speed_fraction": r.getTargetSpeedFraction(),
            "digital_inputs": r.getActualDigitalInputBits(),
        }

    def op_stop(self, timeout_s: float) -> str:
        self.stop_requested.set()
        cycle = self.cycle
        if cycle is not None and cycle.is_alive():
            if not self.motion_commanded:
                return "nothing moving"
            if not self.stopped.wait(timeout_s):
                raise Fault("stop not confirmed by the controller in time")
            return "stopped"
        if self.ctrl is not None:
            self._send_stop(self.ctrl, 10.0)
        return "stopped"

    def op_close(self) -> str:
        self.op_stop(1.0)
        for client in (self.ctrl, self.recv, self.dash):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.disconnect()
        return "closed"

    def start_thread(self, msg: dict[str, Any]) -> None:
        if self.cycle is not None and self.cycle.is_alive():
            tell(
                self.sock,
                self.lock,
                {
                    "id": msg["id"],
                    "ok": False,
                    "kind": "driver",
                    "error": "a cycle is already running",
                },
            )
            return
        self.stop_requested.clear()
        self.stopped.clear()
        self.motion_commanded = False
        msg = dict(msg, request_id=msg["id"])
        fn = self.op_cycle if msg["op"] == "cycle" else self.op_stream
        self.cycle = threading.Thread(target=self._run_thread, args=(msg, fn), daemon=True)
        self.cycle.start()

    def _run_thread(self, msg: dict[str, Any], fn: Callable[..., Any]) -> None:
        if self.rt_priority > 0:
            # The capture loop must see every package: a real-time thread is not delayed by
            # the machine's other work (it sleeps between polls, so it cannot starve it).
            realtime(0, self.rt_priority)
        self.reply(msg["id"], fn, msg)

    # Stream checks -------------------------------------------------------------------------
    def _check_sample(self, robot_mode: int, safety_bits: int, runtime: int | None) -> None:
        if safety_bits & SAFETY_STOP_BITS:
            raise Fault(
                f"protective or emergency stop (safety status bits {safety_bits:#x})", "abort"
            )
        if robot_mode != ROBOT_MODE_RUNNING:
            raise Fault(f"robot mode left RUNNING (RTDE robot mode {robot_mode})", "abort")
        if runtime is not None and runtime != RUNTIME_PLAYING:
            raise Fault(f"control program no longer PLAYING (runtime state {runtime})", "abort")

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

    # The cycle -----------------------------------------------------------------------------
    def op_cycle(self, **p: Any) -> dict[str, Any]:
        import rtde_control

        r = self.recv
        if r is None:
            raise Fault("not connected")
        ctrl = None
        try:
            self._check_sample(r.getRobotMode(), r.getSafetyStatusBits(), None)
            if r.getRuntimeState() == RUNTIME_PLAYING:
                # Uploading the control script would stop whatever program is running.
                raise Fault("a program is running on the controller: not taking control", "abort")
            ctrl = rtde_control.RTDEControlInterface(self.host, self.frequency_hz)
            self.ctrl = ctrl
            if not ctrl.setWatchdog(p["watchdog_hz"]):
                raise Fault("the control script did not accept the RTDE watchdog", "abort")
            q_start = list(r.getActualQ())
            q_test = list(q_start)
            q_test[p["index"]] = p["test_pose_rad"]
            self._move(ctrl, q_test, p)
            qd = [0.0] * 6
            qd[p["index"]] = p["speed_rad_s"]
            self._commanding()
            if not ctrl.speedJ(qd, p["accel_rad_s2"], 0.0):
                raise Fault("the controller refused speedJ", "abort")
            rows = self._capture(ctrl, p)
            self._send_stop(ctrl, p["decel_rad_s2"])
            if p["return_to_start"]:
                self._move(ctrl, q_start, p)
            return {"rows": rows, "version": ".".join(map(str, self.version))}
        except Exception as exc:
            # A Fault, or ur_rtde's own exception (a lost connection raises RuntimeError).
            fault = exc if isinstance(exc, Fault) else Fault(str(exc))
            tell(
                self.sock,
                self.lock,
                {"id": p.get("request_id"), "event": "aborting", "error": str(fault)},
            )
            if ctrl is not None:
                try:
                    self._send_stop(ctrl, p["decel_rad_s2"])
                except Exception as stop_exc:
                    raise Fault(f"{fault}; then the stop failed: {stop_exc}", fault.kind) from exc
            raise fault from None if fault is exc else exc
        finally:
            self.stopped.set()
            if ctrl is not None:
                self.ctrl = None
                for call in (ctrl.stopScript, ctrl.disconnect):
                    with contextlib.suppress(Exception):
                        call()

    def _send_stop(self, ctrl: Any, decel: float) -> None:
        # speedStop ends the script's speedj thread (stopJ alone leaves it running); stopJ also
        # ends a moveJ. Each returns at once when the program is no longer running.
        ctrl.speedStop(decel)
        ctrl.stopJ(decel, False)
        self.stopped.set()

    def _commanding(self) -> None:
        """About to command motion: from now on a stop request waits for the stop to be sent."""
        if self.stop_requested.is_set():
            raise Fault("stop requested", "abort")
        self.stopped.clear()
        self.motion_commanded = True

    def _move(self, ctrl: Any, q: list[float], p: dict[str, Any]) -> None:
        r = self.recv
        self._commanding()
        if not ctrl.moveJ(q, p["move_speed_rad_s"], p["move_accel_rad_s2"], True):
            raise Fault("the controller refused moveJ", "abort")
        dist = max(abs(a - b) for a, b in zip(q, r.getActualQ(), strict=True))
        deadline = time.monotonic() + 5.0 + 2.0 * dist / p["move_speed_rad_s"]
        last_ts, since, kicked = r.getTimestamp(), time.monotonic(), 0.0
        while True:
            if self.stop_requested.is_set():
                raise Fault("stop requested", "abort")
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
                raise Fault("moveJ did not finish in time", "abort")
            time.sleep(0.002)
        miss = max(abs(a - b) for a, b in zip(q, r.getActualQ(), strict=True))
        if miss > 1e-3:
            raise Fault(f"moveJ ended {miss:.4f} rad from its target", "abort")

    def _reader(self) -> StreamReader:
        return StreamReader(self.recvs, self.frequency_hz, self.rt_priority, self.cpus)

    def _silence(self, reader: StreamReader, stale_after_s: float) -> None:
        silent = time.monotonic() - reader.last_new_at
        if silent > stale_after_s:
            if not reader.connected():
                raise Fault("RTDE connection to the controller lost during the cycle")
            raise Fault(f"RTDE data stale: no new package for {silent:.2f} s")

    def _capture(self, ctrl: Any, p: dict[str, Any]) -> list[Row]:
        """Every package from the motion start to the end of the window, or a Fault."""
        j, need, speed = p["index"], p["n_pre"] + p["n_out"], p["speed_rad_s"]
        # After the run-up the target speed is the commanded one: anything else (a program
        # that took over, the speed slider) would make a capture of some other motion.
        run_up = math.ceil(abs(speed) / p["accel_rad_s2"] * self.frequency_hz) + 1
        rows: list[Row] = []
        kicked = time.monotonic()
        start_by = kicked + p["start_timeout_s"]
        with self._reader() as reader:
            while len(rows) < need:
                if self.stop_requested.is_set():
                    raise Fault("stop requested", "abort")
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
                        raise Fault("the joint did not start moving after speedJ", "abort")
                    continue
                row, missed = got
                # The motion starts with the first package whose target_qd for the joint is
                # not 0; from the package before it on, none may be missing.
                moving = bool(rows) or abs(row[5][j]) > _MOVING_RAD_S
                if moving and missed:
                    raise Fault(f"{missed} RTDE package(s) missed at t = {row[0]:.3f} s")
                self._check_sample(row[8], row[9], row[10])
                if moving:
                    rows.append(row)
                    if len(rows) > run_up and abs(row[5][j] - speed) > 1e-3 * abs(speed):
                        raise Fault(
                            f"the joint's target speed left {speed:.4f} rad/s "
                            f"({row[5][j]:.4f} rad/s at t = {row[0]:.3f} s)",
                            "abort",
                        )
        return rows[p["n_pre"] :]

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drivers.ur_rtde_worker")
    p.add_argument("--fd", type=int, required=True, help="socket inherited from the driver")
    args = p.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    worker = Worker(sock)
    try:
        worker.serve()
    finally:
        # The driver closed us or died: never leave motion of ours running unattended. The
        # cycle thread sends the stop and ends the control script; exiting before it has would
        # leave the arm to the RTDE watchdog.
        worker.stop_requested.set()
        if worker.cycle is not None:
            worker.cycle.join(_EOF_STOP_S)
        sock.close()
        sys.stdout.flush()
    # ur_rtde's destructors can block on a dead controller; everything is closed already.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
