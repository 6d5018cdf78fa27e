"""The child process that runs ur_rtde's C++ clients for drivers.ur_rtde.driver.UrRtdeDriver.

Started as `python -m drivers.ur_rtde.worker --fd N` (drivers/ur_rtde/link.py). ur_rtde can abort
the whole process (a std::length_error on a garbled RTDE stream, an exception escaping its
reconnect thread after a broken pipe). Running it here keeps the daemon alive: the driver sees
this process die and reports a DriverError. It also gives the 500 Hz capture loop a process of
its own, so no estimator or event loop in the daemon can make it miss a package. It imports
nothing of the agent: only drivers.ur_rtde.wire and this package.

Protocol on the socket passed as `--fd`: drivers.ur_rtde.wire (requests by Op, failed replies by
FaultKind). While a cycle runs, the ABORTING event announces an abort before the stop is sent,
and the driver sends Op.BEAT from its event loop every heartbeat_interval_s: the cycle thread
stops the arm when none came for agent_timeout_s (drivers.ur_rtde.worker.cycle).

Threads: the main thread reads requests, notes heartbeats and serves stop and close at once; a
request thread serves connect and status reads (dashboard and receive interface) in turn; a
cycle thread owns the control interface (drivers.ur_rtde.worker.cycle) and merges the capture
from the pollers of the receive paths (drivers.ur_rtde.worker.stream). ur_rtde releases the GIL
in its blocking calls, so a slow dashboard answer delays neither a stop nor the capture.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from drivers.ur_rtde.wire import Fault, FaultKind, Op, recv_msg, tell
from drivers.ur_rtde.worker.escalation import CONFIRM_S, motion_after, protective_stop
from drivers.ur_rtde.worker.servo import ExcitationOps
from drivers.ur_rtde.worker.stream import path_cpus, realtime, threads

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
_SWITCH_S = 0.0005  # GIL switch interval with real-time threads (Python's default is 5 ms)
# After the driver is gone: time for the cycle thread's speedStop, stopJ and stop script (each
# returns at once on a controller that no longer runs the script; the ramps take < 1 s).
_EOF_STOP_S = 5.0


def _ask(call: Callable[[], str], request: str) -> str:
    try:
        return call()
    except UnicodeDecodeError as exc:  # pybind11 cannot make a str of the answer
        raise Fault(f"dashboard answered {exc.object!r} to {request!r}") from None


def _after(answer: str, prefix: str, request: str) -> str:
    if not answer.startswith(prefix) or not answer[len(prefix) :].strip().isidentifier():
        raise Fault(f"dashboard answered {answer!r} to {request!r}")
    return answer[len(prefix) :].strip()


class Worker(ExcitationOps):
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.recv: Any = None  # path 0: status reads and moves
        self.recvs: list[Any] = []
        self.cpus: list[int | None] = []
        self.dash: Any = None
        self.ctrl: Any = None
        self.host = ""
        self.dashboard_port = 29999
        self.frequency_hz = 500.0
        self.rt_priority = 0
        self.version: tuple[int, ...] = ()
        self.cycle: threading.Thread | None = None
        self.stop_requested = threading.Event()
        self.stopped = threading.Event()
        self.motion_commanded = False
        self.servoing = False
        self.beat_at = time.monotonic()
        self.beat_gap_max_s = 0.0
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
            if op == Op.BEAT:
                # The agent's event loop is alive; the cycle thread watches this clock.
                now = time.monotonic()
                self.beat_gap_max_s = max(self.beat_gap_max_s, now - self.beat_at)
                self.beat_at = now
            elif op in (Op.CYCLE, Op.EXCITE, Op.STREAM, Op.MOVE):
                self.start_thread(msg)
            elif op in (Op.STOP, Op.CLOSE, Op.PROTECTIVE_STOP):
                self.reply(msg["id"], getattr(self, "op_" + str(op)), msg)
                if op == Op.CLOSE:
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
            out = {"id": msg_id, "ok": False, "kind": FaultKind.DRIVER, "error": f"{exc}"}
        tell(self.sock, self.lock, out)

    def op_connect(
        self, host: str, dashboard_port: int, frequency_hz: float, rt_priority: int, paths: int
    ) -> dict[str, Any]:
        import dashboard_client
        import rtde_receive

        # Loaded now rather than at the first motion: loading a C++ extension holds the GIL for
        # tens of ms on a slow machine, long enough for the pollers to lose a package.
        importlib.import_module("rtde_control")
        self.host, self.frequency_hz, self.rt_priority = host, frequency_hz, rt_priority
        self.dashboard_port = dashboard_port
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
            return self.stop_note or "stopped"
        if self.ctrl is not None:
            self.stop_note = None
            self._send_stop(self.ctrl, 10.0)
            return self.stop_note or "stopped"
        return "stopped"

    def op_protective_stop(self, timeout_s: float) -> str:
        """The agent's last step when the arm still moved after its stop (agent.service.
        standstill): the cycle thread's stop first (it escalates itself when it sees the arm
        run on), then triggerProtectiveStop here if the packages still show motion."""
        cycle = self.cycle
        running = cycle is not None and cycle.is_alive()
        if running:
            # One thread at a time on the control interface: the cycle thread stops first.
            self.stop_requested.set()
            self.stopped.wait(timeout_s)
        recv = self.recv
        if recv is None:
            raise Fault("not connected")
        speed = motion_after(recv, CONFIRM_S)
        if not speed:
            if running and self.stop_note is not None:  # that stop escalated by itself
                return self.stop_note
            return "the arm stands: no protective stop needed"
        ctrl = self.ctrl
        if ctrl is None:
            raise Fault(
                f"the arm moves at {speed:.3f} rad/s and no control script runs to carry "
                "triggerProtectiveStop; the controller's RTDE watchdog ends whatever it left"
            )
        return protective_stop(ctrl, recv, self.host, self.dashboard_port, speed)

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
                    "kind": FaultKind.DRIVER,
                    "error": "a cycle is already running",
                },
            )
            return
        self.stop_requested.clear()
        self.stopped.clear()
        self.motion_commanded = False
        self.beat_at = time.monotonic()  # the driver's beats start with its request
        self.beat_gap_max_s = 0.0
        msg = dict(msg, request_id=msg["id"])
        fn = {Op.CYCLE: self.op_cycle, Op.EXCITE: self.op_excite, Op.MOVE: self.op_move}.get(
            msg["op"], self.op_stream
        )
        self.cycle = threading.Thread(target=self._run_thread, args=(msg, fn), daemon=True)
        self.cycle.start()

    def _run_thread(self, msg: dict[str, Any], fn: Callable[..., Any]) -> None:
        if self.rt_priority > 0:
            # The capture loop must see every package: a real-time thread is not delayed by
            # the machine's other work (it sleeps between polls, so it cannot starve it).
            realtime(0, self.rt_priority)
        self.reply(msg["id"], fn, msg)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m drivers.ur_rtde.worker")
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
