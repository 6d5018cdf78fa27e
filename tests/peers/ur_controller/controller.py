"""The controller: state, one cycle every 2 ms (8 ms for a CB3), and the plant's faults.

Each cycle runs, under one lock: the RTDE watchdog, armed fault triggers, one iteration of the
running control script, one step of the arm, then one data package to every started RTDE client.
The cycle keeps its period on one grid of the monotonic clock; a late cycle is run at once and
counted (`overruns`), never skipped, so the controller timestamp advances by exactly one period per
package, as on a real controller; the following cycles make up a delay of up to 20 ms at most at
4/3 of the rate, so two packages never leave less than 1.5 ms apart at 500 Hz (a longer stall,
the host's, is not made up). How far the package clock fell behind the wall clock at worst is in
the state (`behind_max_s`): the machine's lateness, which moves it against the clock a driver
streams servoJ targets on.

Modes and codes are the RTDE/dashboard ones: robot mode RUNNING (7), safety mode NORMAL (1),
runtime state PLAYING (2) and so on; the status bit words follow the RTDE guide.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.peers.ur_controller.joint_model import N_JOINTS, Arm, PhysicsConfig
from tests.peers.ur_controller.rigid_arm import DynamicsConfig
from tests.peers.ur_controller.rtde_server import OUTPUT_TYPES, RtdeServer
from tests.peers.ur_controller.script_sink import (
    CMD_NAMES,
    ControlScript,
    is_rtde_control_script,
    register_offset,
)

log = logging.getLogger("ur_controller")

ROBOT_MODES = {
    "NO_CONTROLLER": -1,
    "DISCONNECTED": 0,
    "CONFIRM_SAFETY": 1,
    "BOOTING": 2,
    "POWER_OFF": 3,
    "POWER_ON": 4,
    "IDLE": 5,
    "BACKDRIVE": 6,
    "RUNNING": 7,
}
SAFETY_MODES = {
    "NORMAL": 1,
    "REDUCED": 2,
    "PROTECTIVE_STOP": 3,
    "RECOVERY": 4,
    "SAFEGUARD_STOP": 5,
    "SYSTEM_EMERGENCY_STOP": 6,
    "ROBOT_EMERGENCY_STOP": 7,
    "VIOLATION": 8,
    "FAULT": 9,
}
# safety_status_bits: 0 normal, 1 reduced, 2 protective stopped, 3 recovery, 4 safeguard stopped,
# 5 system emergency stopped, 6 robot emergency stopped, 7 emergency stopped, 8 violation,
# 9 fault, 10 stopped due to safety.
_SAFETY_BITS = {
    "NORMAL": 1 << 0,
    "REDUCED": 1 << 1,
    "PROTECTIVE_STOP": (1 << 2) | (1 << 10),
    "RECOVERY": 1 << 3,
    "SAFEGUARD_STOP": (1 << 4) | (1 << 10),
    "SYSTEM_EMERGENCY_STOP": (1 << 5) | (1 << 7) | (1 << 10),
    "ROBOT_EMERGENCY_STOP": (1 << 6) | (1 << 7) | (1 << 10),
    "VIOLATION": (1 << 8) | (1 << 10),
    "FAULT": (1 << 9) | (1 << 10),
}
RUNTIME_STATES = {"STOPPED": 1, "PLAYING": 2, "PAUSED": 4}
_STOP_DECEL_RAD_S2 = 20.0  # category-2 stop of a protective stop or a stopped program
_JOINT_RUNNING, _JOINT_POWER_OFF = 253, 239
_MIN_SPACING = 0.75  # of a period, between two data packages
CATCH_UP_MAX_S = 0.02  # a cycle later than this is a stall of the host: not made up


class Controller:
    def __init__(
        self,
        *,
        version: tuple[int, int, int, int],
        controller_hz: float,
        q0: list[float],
        physics: PhysicsConfig | None,
        dynamics: DynamicsConfig | None = None,
        program_state: str = "STOPPED",
        remote_control: bool = True,
    ) -> None:
        self.lock = threading.RLock()
        self.version = version
        self.hz = controller_hz
        self.robot_mode = "RUNNING"
        self.safety_mode = "NORMAL"
        self.remote_control = remote_control
        self.loaded_program = "production.urp"
        self.program_state = program_state
        self.program_kind: str | None = "production" if program_state == "PLAYING" else None
        self.script: ControlScript | None = None
        self.input_int = [0] * 48
        self.input_double = [0.0] * 48
        self.output_int = [0] * 48
        self.output_double = [0.0] * 48
        self.speed_fraction = 1.0
        self.digital_inputs = 0
        self.arm = Arm(q0, 1.0 / controller_hz, physics, dynamics)
        self.tick_count = 0
        self.overruns = 0
        # The most the cycle ran behind its grid (s): its clock, which stamps the packages, then
        # lags the wall clock the driver streams servoJ targets on by as much, a lateness of the
        # machine (a busy host, a stolen virtual CPU) that a tracking check must allow for.
        self.behind_max_s = 0.0
        self._restart_grid = False
        self._last_input_tick: dict[str, int] = {}
        self._watchdogs: dict[str, float] = {}
        self.rtde: RtdeServer | None = None
        # Faults the tests switch on.
        self.rtde_stall = False
        self.stops_ignored = False  # the script's stop commands do not stop the arm
        # When the latest protective stop happened (time.monotonic()): the dashboard unlocks it
        # only 5 s later, as a real controller does.
        self.protective_stop_at: float | None = None
        self.drop_packets = 0
        self.dropped_packets = 0
        # Sample faults of the RTDE stream (stream_fault): counts of packages still to spoil.
        self.clock_lag_ticks = 0  # the timestamp runs this many ticks behind the cycle count
        self.repeat_timestamp = 0  # packages that repeat the previous timestamp (clock stalls)
        self.duplicate_packets = 0  # packages sent twice, byte for byte
        self.burst_packets = 0  # packages held back, then sent in one write with the next
        self.flood_ticks = 0  # cycles that send `flood_factor` packages each
        self.flood_factor = 1
        self.stream_faults: dict[str, int] = {}  # what was done, for the tests
        self._stamp = 0.0
        self.dashboard_fault: str | None = None
        self._triggers: list[dict[str, Any]] = []
        # What happened, for the tests to assert on.
        self.commands: list[tuple[float, str]] = []
        self.events: list[str] = []
        self.uploads = 0
        self.production_interrupted = 0
        self.watchdog_trips = 0
        self._stop = threading.Event()
        self._fixed: dict[str, Any] = {}
        self._fixed_tick = -1

    # Plant side ----------------------------------------------------------------------------
    def event(self, text: str) -> None:
        log.info("event: %s", text)
        self.events.append(f"{self.tick_count / self.hz:.3f} {text}")

    def log_command(self, cmd: int) -> None:
        self.commands.append((self.tick_count / self.hz, CMD_NAMES.get(cmd, str(cmd))))

    def stop_program(self, why: str) -> None:
        with self.lock:
            if self.program_state != "STOPPED":
                self.event(f"program stopped: {why}")
            self.script = None
            self.program_state = "STOPPED"
            self.program_kind = None
            self._watchdogs.clear()
            if self.arm.moving:
                self.arm.stopj(_STOP_DECEL_RAD_S2)

    def play_production(self) -> None:
        with self.lock:
            if self.script is not None:
                self.stop_program("production program started")  # its motion ends with it
            self.program_state, self.program_kind = "PLAYING", "production"

    def set_robot_mode(self, mode: str) -> None:
        with self.lock:
            self.robot_mode = mode
            if mode != "RUNNING":
                self.arm.halt()
                self.stop_program(f"robot mode {mode}")

    def set_safety_mode(self, mode: str) -> None:
        with self.lock:
            self.safety_mode = mode
            if mode in ("PROTECTIVE_STOP", "SAFEGUARD_STOP"):
                if mode == "PROTECTIVE_STOP":
                    self.protective_stop_at = time.monotonic()
                self.arm.stopj(_STOP_DECEL_RAD_S2)
                if self.program_state == "PLAYING":
                    self.program_state = "PAUSED"
            elif mode not in ("NORMAL", "REDUCED"):
                self.arm.halt()
                self.stop_program(f"safety {mode}")

    def protective_stop(self, why: str) -> None:
        """A protective stop (category 2: the arm brakes on its path, power stays on): safety
        mode PROTECTIVE_STOP, the program paused, unlocked from the dashboard after 5 s."""
        with self.lock:
            self.event(f"protective stop: {why}")
            self.set_safety_mode("PROTECTIVE_STOP")

    def set_watchdog(self, name: str, min_hz: float) -> None:
        self._watchdogs[name] = min_hz
        self._last_input_tick[name] = self.tick_count

    def on_input(self, values: dict[str, Any]) -> None:
        with self.lock:
            for name, v in values.items():
                self._last_input_tick[name] = self.tick_count
                kind, _, idx = name.rpartition("_")
                if kind == "input_int_register":
                    self.input_int[int(idx)] = int(v)
                elif kind == "input_double_register":
                    self.input_double[int(idx)] = float(v)

    def load_script(self, text: str, name: str) -> None:
        with self.lock:
            self.uploads += 1
            if self.program_kind == "production":
                self.production_interrupted += 1
                self.event("production program interrupted by a script upload")
            self.script = None
            if not is_rtde_control_script(text):
                self.event(f"unsupported script {name!r} ignored")
                self.program_state, self.program_kind = "STOPPED", None
                return
            if self.robot_mode != "RUNNING" or self.safety_mode not in ("NORMAL", "REDUCED"):
                self.event("control script refused: robot not running normally")
                return
            self.script = ControlScript(self, register_offset(text))
            self.program_state, self.program_kind = "PLAYING", "script"
            self.event("rtde_control script started")
            # How late the cycle ran before (the emulator's own start-up: a real controller runs
            # long before a client connects) is no lateness of the motion: the grid restarts.
            self._restart_grid = True

    def arm_trigger(
        self, when: str, delay_s: float, action: dict[str, Any], repeat: bool = False
    ) -> None:
        """Run `action` `delay_s` after the next `when` ('motion': the physics joint starts,
        'servo': a servoj stream starts, 'movej': a movej is commanded); with `repeat`, after
        every one from then on."""
        with self.lock:
            self._triggers.append(
                {
                    "when": when,
                    "delay_s": delay_s,
                    "action": action,
                    "runs": self._runs(when),
                    "repeat": repeat,
                }
            )

    def _runs(self, when: str) -> int:
        if when == "movej":
            return self.arm.movej_runs
        return self.arm.servo_runs if when == "servo" else self.arm.physics_runs

    # The cycle -----------------------------------------------------------------------------
    def run(self, apply_action: Callable[[dict[str, Any]], Any], rt_priority: int = 0) -> None:
        if rt_priority > 0:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(rt_priority))
            except OSError as exc:
                log.warning("no realtime priority for the controller cycle: %s", exc)
        period = 1.0 / self.hz
        # When each cycle is due: one grid, as a real controller's clock. A cycle late by up to
        # CATCH_UP_MAX_S is run at once and the grid caught up at most at 4/3 of the rate:
        # packages never leave close together, which a client could read as one and drop the
        # older of (ur_rtde keeps only the newest package it has read). (Re-anchoring the grid at
        # every late cycle, as this loop did, never made even 1 ms up: on a 2-core VM the package
        # clock fell 20-30 ms behind the wall clock servoJ targets are sent on, in every run.) A
        # longer stall is the host's, not a controller's: making it up would be a burst the
        # client loses packages in, so the grid restarts there and the package clock keeps that
        # lag (`lag_s`). behind_max_s: how far it ran behind the wall clock at worst.
        due = earliest = time.perf_counter()
        lag_s = 0.0
        while not self._stop.is_set():
            if self._restart_grid:
                self._restart_grid, self.behind_max_s, lag_s = False, 0.0, 0.0
                due = earliest = time.perf_counter()
            wait = max(due, earliest) - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            now = time.perf_counter()
            behind = now - due
            if wait <= 0 and behind > period:
                self.overruns += 1
            if behind > CATCH_UP_MAX_S:
                lag_s, due, behind = lag_s + behind, now, 0.0
            self.behind_max_s = max(self.behind_max_s, lag_s + behind)
            self.tick(apply_action)
            due += period
            earliest = time.perf_counter() + _MIN_SPACING * period

    def shutdown(self) -> None:
        self._stop.set()

    def tick(self, apply_action: Callable[[dict[str, Any]], Any]) -> None:
        with self.lock:
            self.tick_count += 1
            self._check_watchdogs()
            self._fire_triggers(apply_action)
            if (
                self.script is not None
                and self.program_state == "PLAYING"
                and not self.script.tick()
            ):
                self.stop_program("control script terminated (stop script)")
            self.arm.step()
            if self.rtde is None or self.rtde_stall:
                return
            if self.drop_packets > 0:
                self.drop_packets -= 1
                self.dropped_packets += 1
                return
            self._publish(self.rtde)

    def stream_fault(self, kind: str, n: int, factor: int = 5) -> None:
        """Spoil the next `n` packages (or cycles) of the RTDE stream the way `kind` says."""
        if n < 1:
            raise ValueError(f"stream_fault {kind}: n must be >= 1, got {n}")
        with self.lock:
            if kind == "repeat_timestamp":
                self.repeat_timestamp += n
            elif kind == "clock_back":
                self.clock_lag_ticks += n  # the clock jumps back n periods and runs on from there
                self._count(kind, n)
            elif kind == "duplicate":
                self.duplicate_packets += n
            elif kind == "burst":
                self.burst_packets += n
            elif kind == "flood":
                if factor < 2:
                    raise ValueError(f"stream_fault flood: factor must be >= 2, got {factor}")
                self.flood_ticks, self.flood_factor = n, factor
            else:
                raise ValueError(f"unknown stream fault {kind!r}")

    def _count(self, kind: str, n: int = 1) -> None:
        self.stream_faults[kind] = self.stream_faults.get(kind, 0) + n

    def _publish(self, rtde: RtdeServer) -> None:
        """This cycle's data package(s), spoilt as the armed stream faults say."""
        if self.repeat_timestamp > 0:
            # The clock stalls for this package (the data moves on) and stays behind after.
            self.repeat_timestamp -= 1
            self.clock_lag_ticks += 1
            self._count("repeat_timestamp")
        stamp = (self.tick_count - self.clock_lag_ticks) / self.hz
        if self.flood_ticks > 0:
            # Many packages a period, on timestamps between the ticks: a controller streaming
            # far faster than the recipe's frequency.
            self.flood_ticks -= 1
            for j in range(self.flood_factor):
                self._stamp = stamp + j / (self.flood_factor * self.hz)
                rtde.publish(self.tick_count, self.value)
            self._count("flood", self.flood_factor)
            return
        self._stamp = stamp
        copies, hold = 1, False
        if self.duplicate_packets > 0:
            self.duplicate_packets -= 1
            copies = 2
            self._count("duplicate")
        if self.burst_packets > 0:
            self.burst_packets -= 1
            hold = True
            self._count("burst")
        rtde.publish(self.tick_count, self.value, copies=copies, hold=hold)

    def _check_watchdogs(self) -> None:
        for name, min_hz in list(self._watchdogs.items()):
            silent_s = (self.tick_count - self._last_input_tick.get(name, 0)) / self.hz
            if silent_s > 1.0 / min_hz:
                self.watchdog_trips += 1
                self.event(f"RTDE watchdog on {name}: no update for {silent_s:.3f} s")
                self.stop_program("RTDE watchdog")

    def _fire_triggers(self, apply_action: Callable[[dict[str, Any]], Any]) -> None:
        for trig in list(self._triggers):
            if "start_tick" not in trig:
                if self._runs(trig["when"]) > trig["runs"]:
                    trig["start_tick"] = self.tick_count
                continue
            if (self.tick_count - trig["start_tick"]) / self.hz >= trig["delay_s"]:
                self._triggers.remove(trig)
                self.event(f"trigger fires: {trig['action']}")
                apply_action(trig["action"])
                if trig["repeat"]:
                    self.arm_trigger(trig["when"], trig["delay_s"], trig["action"], repeat=True)

    # What RTDE reports ---------------------------------------------------------------------
    def value(self, name: str) -> Any:
        if name == "timestamp":
            return self._stamp
        if self._fixed_tick != self.tick_count:
            self._fixed = self._fixed_values()
            self._fixed_tick = self.tick_count
        if name in self._fixed:
            return self._fixed[name]
        kind, _, idx = name.rpartition("_")
        if kind == "output_int_register":
            return self.output_int[int(idx)]
        if kind == "output_double_register":
            return self.output_double[int(idx)]
        if kind == "input_int_register":
            return self.input_int[int(idx)]
        if kind == "input_double_register":
            return self.input_double[int(idx)]
        t = OUTPUT_TYPES[name]
        if t.startswith("VECTOR"):
            return [0.0 if t.endswith("D") else 0] * int(t[6])
        return False if t == "BOOL" else (0.0 if t == "DOUBLE" else 0)

    def _fixed_values(self) -> dict[str, Any]:
        arm = self.arm
        running = self.robot_mode == "RUNNING"
        return {
            "timestamp": self.tick_count / self.hz,
            "actual_q": arm.q,
            "actual_qd": arm.qd,
            "target_q": arm.target_q,
            "target_qd": arm.target_qd,
            "actual_current": arm.current,
            "target_current": arm.target_current,
            "joint_temperatures": arm.temperature_c,
            "robot_mode": ROBOT_MODES[self.robot_mode],
            "safety_mode": SAFETY_MODES[self.safety_mode],
            "safety_status": SAFETY_MODES[self.safety_mode],
            "safety_status_bits": _SAFETY_BITS[self.safety_mode],
            "runtime_state": RUNTIME_STATES[self.program_state],
            "robot_status_bits": int(running) | (2 if self.program_state == "PLAYING" else 0),
            "joint_mode": [_JOINT_RUNNING if running else _JOINT_POWER_OFF] * N_JOINTS,
            "speed_scaling": self.speed_fraction,
            "target_speed_fraction": self.speed_fraction,
            "speed_scaling_combined": self.speed_fraction,
            "actual_digital_input_bits": self.digital_inputs,
            "actual_tool_accelerometer": [0.0, 0.0, 9.81],
            "actual_main_voltage": 48.0,
            "actual_robot_voltage": 48.0,
            "actual_joint_voltage": [48.0] * N_JOINTS,
        }

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "timestamp": self.tick_count / self.hz,
                "ticks": self.tick_count,
                "robot_mode": self.robot_mode,
                "safety_mode": self.safety_mode,
                "program_state": self.program_state,
                "program_kind": self.program_kind,
                "script_running": self.script is not None,
                "q": list(self.arm.q),
                "qd": list(self.arm.qd),
                "moving": self.arm.moving,
                "physics_runs": self.arm.physics_runs,
                "commands": [c for _, c in self.commands],
                "events": list(self.events),
                "uploads": self.uploads,
                "production_interrupted": self.production_interrupted,
                "watchdog_trips": self.watchdog_trips,
                "packets_sent": self.rtde.packets_sent if self.rtde else 0,
                "dropped_packets": self.dropped_packets,
                "stream_faults": dict(self.stream_faults),
                "clock_lag_ticks": self.clock_lag_ticks,
                "overruns": self.overruns,
                "behind_max_s": self.behind_max_s,
                "rtde_clients": len(self.rtde.connections) if self.rtde else 0,
            }


def die() -> None:
    """Be killed mid-cycle: the kernel resets every connection, as when the box loses power."""
    os.kill(os.getpid(), signal.SIGKILL)
