"""Run the emulator: `python -m tests.peers.ur_controller --host 127.0.0.5 [options]`.

It listens on the fixed UR ports of that address (dashboard 29999, script 30003, RTDE 30004)
plus a control port for the tests (JSON lines, ephemeral), announced on stdout as `READY <port>`.
Control requests (one JSON object per line, answered with one JSON line):
  {"op": "state"}                          snapshot of modes, joints, command log, counters
  {"op": "set", "robot_mode": "POWER_OFF"} also safety_mode, program_state, remote_control,
                                           speed_fraction, digital_inputs, dashboard_fault
                                           ("stall" | "garbage" | null), rtde_stall (bool),
                                           stops_ignored (bool: the script's stops do not
                                           stop the arm)
  {"op": "drop_packets", "n": 3}           skip the next n data packages (a gap in timestamps)
  {"op": "stream_fault", "kind": K, "n": N} spoil the next N data packages: K is
                                           repeat_timestamp (the clock stalls, data moves on),
                                           clock_back (timestamps jump back N periods),
                                           duplicate (each sent twice), burst (held back, then
                                           sent in one write), flood (N cycles of "factor"
                                           packages each, between the ticks; "factor": 5)
  {"op": "garbage_rtde"}                   write bytes that break the RTDE framing
  {"op": "die"}                            SIGKILL itself
  {"op": "on_motion", "delay_s": 0.5, "action": {...}}  run an action that long after the
                                           physics joint next starts moving ("repeat": true:
                                           after every start from then on; "when": "servo":
                                           after a servoj stream starts, "movej": after a
                                           movej is commanded)
  {"op": "shutdown"}
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import socket
import sys
import threading
from typing import Any

from tests.peers.ur_controller.controller import Controller, die
from tests.peers.ur_controller.dashboard_server import DashboardServer
from tests.peers.ur_controller.joint_model import PhysicsConfig
from tests.peers.ur_controller.rigid_arm import DynamicsConfig
from tests.peers.ur_controller.rtde_server import RtdeServer, package
from tests.peers.ur_controller.script_sink import ScriptSink


def _physics(args: argparse.Namespace, controller_hz: float) -> PhysicsConfig | None:
    if not args.config:
        return None
    from agent.config.load import load_config
    from drivers.sim.backlash import joint_physics

    config = load_config(args.config)
    ctrl = next(c for c in config.controllers if c.name == args.controller)
    joint = next(j for j in ctrl.joints if j.name == args.joint)
    return PhysicsConfig(
        index=joint.index - 1,
        physics=joint_physics(joint, args.backlash),
        encoder_bits=joint.encoder_bits,
        noise_counts=args.noise_counts,
        seed=args.seed,
        sample_rate_hz=controller_hz,
    )


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(","))


def _dynamics(args: argparse.Namespace) -> DynamicsConfig | None:
    if not args.robot:
        return None
    return DynamicsConfig(
        robot_path=args.robot,
        coulomb_nm=_floats(args.coulomb_nm),
        viscous_nm_s_rad=_floats(args.viscous_nm_s_rad),
        torque_constants_nm_a=_floats(args.torque_constants_nm_a),
        current_noise_a=args.current_noise_a,
        seed=args.seed,
    )


def _garbage() -> bytes:
    rng = random.Random(42)
    # A data package too short for any recipe, then noise with no valid header in it.
    return package("U", b"\x07\xff\xff\xff") + bytes(rng.randrange(256) for _ in range(61))


class Emulator:
    def __init__(self, args: argparse.Namespace) -> None:
        version = tuple(int(x) for x in args.version.split("."))
        assert len(version) == 4, "--version is major.minor.bugfix.build"
        hz = args.hz or (125.0 if version[0] < 5 else 500.0)
        q0 = [float(x) for x in args.q0.split(",")]
        self.controller = Controller(
            version=version,  # type: ignore[arg-type]
            controller_hz=hz,
            q0=q0,
            physics=_physics(args, hz),
            dynamics=_dynamics(args),
            program_state=args.program_state,
            remote_control=not args.local,
        )
        c = self.controller
        self.rtde = RtdeServer(args.host, version=c.version, controller_hz=hz, on_input=c.on_input)
        c.rtde = self.rtde
        self.dashboard = DashboardServer(args.host, c)
        self.scripts = ScriptSink(args.host, c)
        self.control = socket.create_server((args.host, 0))
        self.done = threading.Event()
        self.rt_priority = args.rt_priority
        self.exit_with_stdin = args.exit_with_stdin

    def apply(self, req: dict[str, Any]) -> Any:
        c = self.controller
        op = req.get("op")
        if op == "state":
            return c.snapshot()
        if op == "set":
            with c.lock:
                for key, value in req.items():
                    if key == "op":
                        continue
                    if key == "robot_mode":
                        c.set_robot_mode(value)
                    elif key == "safety_mode":
                        c.set_safety_mode(value)
                    elif key == "program_state":
                        if value == "PLAYING":
                            c.play_production()
                        elif value == "STOPPED":
                            c.stop_program("operator")
                        else:
                            c.program_state = value
                    elif key in (
                        "remote_control",
                        "speed_fraction",
                        "digital_inputs",
                        "dashboard_fault",
                        "rtde_stall",
                        "stops_ignored",
                    ):
                        setattr(c, key, value)
                    else:
                        raise ValueError(f"cannot set {key!r}")
            return "ok"
        if op == "drop_packets":
            with c.lock:
                c.drop_packets += int(req["n"])
            return "ok"
        if op == "stream_fault":
            c.stream_fault(str(req["kind"]), int(req["n"]), int(req.get("factor", 5)))
            return "ok"
        if op == "garbage_rtde":
            self.rtde.broadcast(_garbage())
            return "ok"
        if op == "die":
            die()
        if op == "on_motion":
            repeat = bool(req.get("repeat", False))
            when = str(req.get("when", "motion"))
            c.arm_trigger(when, float(req["delay_s"]), dict(req["action"]), repeat)
            return "ok"
        if op == "shutdown":
            self.done.set()
            return "ok"
        raise ValueError(f"unknown op {op!r}")

    def _watch_stdin(self) -> None:
        sys.stdin.buffer.read()
        self.done.set()

    def _serve_control(self) -> None:
        while True:
            try:
                sock, _ = self.control.accept()
            except OSError:
                return
            threading.Thread(target=self._control_client, args=(sock,), daemon=True).start()

    def _control_client(self, sock: socket.socket) -> None:
        with sock, sock.makefile("rwb") as f:
            for line in f:
                try:
                    reply = {"ok": True, "result": self.apply(json.loads(line))}
                except Exception as exc:
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                f.write((json.dumps(reply) + "\n").encode())
                f.flush()

    def run(self) -> None:
        for server in (self.rtde, self.dashboard, self.scripts):
            server.start()
        threading.Thread(target=self._serve_control, daemon=True).start()
        if self.exit_with_stdin:
            # The test that started us may die without killing us: end when its pipe closes.
            threading.Thread(target=self._watch_stdin, daemon=True).start()
        cycle = threading.Thread(
            target=self.controller.run, args=(self.apply, self.rt_priority), daemon=True
        )
        cycle.start()
        print(f"READY {self.control.getsockname()[1]}", flush=True)
        self.done.wait()
        self.controller.shutdown()
        cycle.join(timeout=1.0)
        for server in (self.rtde, self.dashboard, self.scripts):
            server.close()
        self.control.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.peers.ur_controller")
    p.add_argument("--host", required=True, help="127.0.0.N: each emulator its own address")
    p.add_argument("--version", default="5.11.1.108318", help="URControl major.minor.bugfix.build")
    p.add_argument("--hz", type=float, default=0.0, help="controller rate (500 e-Series, 125 CB3)")
    p.add_argument("--q0", default="0,-1.5708,1.5708,0,1.5708,0", help="initial joints, rad")
    p.add_argument("--config", help="agent config holding the physics joint's model")
    p.add_argument("--controller", default="", help="controller name in --config")
    p.add_argument("--joint", default="", help="joint name in --config that carries the physics")
    p.add_argument("--backlash", type=float, default=0.0, help="true backlash delta, rad")
    p.add_argument("--seed", type=int, default=0, help="seeds run k with seed * 1000 + k")
    p.add_argument("--noise-counts", type=float, default=1.0)
    p.add_argument("--robot", help="robot file: servoj joints draw its rigid-body currents")
    p.add_argument("--coulomb-nm", default="0,0,0,0,0,0", help="true Coulomb friction per joint")
    p.add_argument("--viscous-nm-s-rad", default="0,0,0,0,0,0", help="true viscous friction")
    p.add_argument("--torque-constants-nm-a", default="0.1,0.1,0.1,0.1,0.1,0.1")
    p.add_argument("--current-noise-a", type=float, default=0.0, help="current noise std")
    p.add_argument("--program-state", default="STOPPED", choices=("STOPPED", "PLAYING"))
    p.add_argument("--local", action="store_true", help="pendant in local mode")
    p.add_argument("--rt-priority", type=int, default=0, help="SCHED_FIFO for the cycle, 0: off")
    p.add_argument("--exit-with-stdin", action="store_true", help="shut down at stdin EOF")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr)
    if args.rt_priority > 0:
        # All threads real-time (they inherit it): one holding the GIL must not be held up by
        # the machine's other work while the controller cycle waits for the GIL.
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.rt_priority))
        except OSError as exc:
            logging.warning("no real-time priority: %s", exc)
        sys.setswitchinterval(0.0005)
    Emulator(args).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
