"""A controller on a virtual CAN bus, for the CAN driver's peers (socketcand, udp_multicast).

It speaks the frames of the agent's DBC (drivers/can/dbc.py, docs/drivers/can.md): after ENABLE
it sends a status frame and one joint-position frame every status period; it takes CycleSetup,
CycleLength and START_CYCLE, rejects what it must (not stopped, no permission, unknown joint,
bad parameters, a stream the bus cannot carry), runs the cycle's physics with
drivers.sim.backlash.simulate_backlash_capture (the simulated fake's physics, same seeds), and
streams one encoder frame per sample in real time through a virtual bus that times every frame
to its stuffed bit length (tests/peers/can_bits.py). STOP ends motion at once; without a command
frame carrying the cycle's counter (the agent's heartbeat) for `watchdog_s` it stops by itself.

Faults (`kind@cycle:sample[xcount]`, cycle counted from 1) play the plant's part:
  drop        count encoder frames never sent (a counter gap)
  badframe    an encoder-id frame of 2 bytes instead of the sample
  garbage     bytes that are no protocol at all (not even ASCII), written on the transport
  badtext     a protocol element that does not parse (`< frame zz ... >` on socketcand)
  foreign     an unrelated frame (id 0x7FF) on the bus: harmless traffic
  stall       no output at all (commands still read) for count seconds (no count: for good)
  disconnect  the transport drops the agent (the controller keeps going)
  kill        the peer process dies (SIGKILL) at that sample
  production  the controller leaves the stopped state for production, still streaming
  mute        encoder frames stop for count seconds (no count: for good) while the status
              frames go on saying CAPTURING: the link is up, the samples do not come
  flood       from this sample on the samples leave count times faster than the cycle's rate
              (as far as the bus carries them)
  burst       count samples held back, then queued at once: the bus carries them back to back
  dup         this sample's frame sent count more times (1 without a count), byte for byte
  swap        this sample's frame sent after the next one's (out of order)

The cycle's state and its physics are tests/peers/can_controller_cycle.py's; this module is the
controller's protocol, status frames, faults and pacing on the bus.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.config.model import JointSettings
from drivers.can.dbc import CanProtocol, Command, CycleState, decode_numbers, encode

from .can_bits import VirtualBus, frame_bits
from .can_controller_cycle import CycleRun, Fault, prepare

FAULT_KINDS = (
    "drop",
    "badframe",
    "garbage",
    "badtext",
    "foreign",
    "stall",
    "disconnect",
    "kill",
    "production",
    "mute",
    "flood",
    "burst",
    "dup",
    "swap",
)
MODE_CODES = {"production": 0, "stopped": 1, "test_cycle": 2, "manual": 3, "fault": 4}
REJECT = {
    "not_stopped": 1,
    "no_permission": 2,
    "unknown_joint": 3,
    "bad_parameters": 4,
    "bus_load": 5,
    "busy": 6,
    "alarm": 7,
}
GARBAGE = b"\x00\xff\xfe<<< not socketcand \x9c >>>\n"
BADTEXT = b"< frame zz 0.000000 0102 >"
_ACCEL_RAD_S2 = 4000.0  # ConstantSpeedTest's default run-up


@dataclass
class Out:
    """What the transport must do: deliver a frame (at wall time `t`), or a transport fault."""

    kind: str  # frame | garbage | disconnect | kill
    can_id: int = 0
    data: bytes = b""
    t: float = 0.0


class Controller:
    def __init__(
        self,
        proto: CanProtocol,
        joints: tuple[JointSettings, ...],
        *,
        backlash: dict[str, float],
        seed: int = 0,
        noise_counts: float = 1.0,
        bitrate: int = 1_000_000,
        status_period_s: float = 0.02,
        watchdog_s: float = 0.5,
        faults: tuple[Fault, ...] = (),
        mode: str = "stopped",
        permission: bool = True,
        emit: Callable[[dict[str, Any]], None] = lambda e: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proto = proto
        self.joints = {j.index: j for j in joints}
        self.backlash = backlash
        self.seed = seed
        self.noise = noise_counts
        self.bitrate = bitrate
        self.status_period_s = status_period_s
        self.watchdog_s = watchdog_s
        self.faults = faults
        self.mode = MODE_CODES[mode]
        self.permission = permission
        self.emit = emit
        self.clock = clock
        self.t0 = clock()
        self.wall_offset = time.time() - self.t0
        self.bus = VirtualBus(bitrate)
        self.poses = {j.index: j.test_pose_rad for j in joints}
        self.enabled = False
        self.next_status = self.t0
        self.alive = 0
        self.position_turn = 0
        self.setups: dict[int, dict[str, float]] = {}
        self.lengths: dict[int, dict[str, float]] = {}
        self.cycle: CycleRun | None = None
        self.cycles_started = 0
        self.last_counter = 0
        self.last_state = CycleState.IDLE
        self.reject_reason = 0
        self.stalled_until: float | None = None
        self.last_agent_frame = self.t0
        self.stops = 0
        self._pending_out: list[Out] = []
        self.last_step = self.t0
        self.max_step_gap_s = 0.0

    # --- frames from the agent ----------------------------------------------------------------
    def on_frame(self, can_id: int, data: bytes) -> None:
        p = self.proto
        try:
            if can_id == p.command.frame_id:
                v = decode_numbers(p.command, data)
                if self.cycle is not None and int(v["CycleCounter"]) == self.cycle.counter:
                    self.last_agent_frame = self.clock()  # the agent that runs the cycle lives
                self._command(int(v["Command"]), int(v["CycleCounter"]))
            elif can_id == p.cycle_setup.frame_id:
                v = decode_numbers(p.cycle_setup, data)
                self.setups[int(v["CycleCounter"])] = v
            elif can_id == p.cycle_length.frame_id:
                v = decode_numbers(p.cycle_length, data)
                self.lengths[int(v["CycleCounter"])] = v
        except Exception as exc:  # a frame that does not decode is ignored, as a controller would
            self.emit({"event": "bad_command_frame", "id": can_id, "error": str(exc)})

    def _command(self, command: int, counter: int) -> None:
        if command == Command.ENABLE:
            if not self.enabled:
                self.emit({"event": "enabled"})
            self.enabled = True
        elif command == Command.STOP:
            self.stops += 1
            c = self.cycle
            state = "idle" if c is None else c.state.name.lower()
            self.emit({"event": "stop", "cycle_state": state, "sample": c.next_sample if c else 0})
            if c is not None and c.state in (
                CycleState.PREPARING,
                CycleState.SETTLING,
                CycleState.CAPTURING,
            ):
                self._end_cycle(CycleState.ABORTED)
        elif command == Command.START_CYCLE:
            self._start(counter)

    def _reject(self, counter: int, reason: str) -> None:
        self.last_counter, self.last_state = counter, CycleState.REJECTED
        self.reject_reason = REJECT[reason]
        self.emit({"event": "rejected", "counter": counter, "reason": reason})

    def _start(self, counter: int) -> None:
        if self.cycle is not None and self.cycle.state not in (CycleState.DONE, CycleState.ABORTED):
            return self._reject(counter, "busy")
        if self.mode != MODE_CODES["stopped"]:
            return self._reject(counter, "not_stopped")
        if not self.permission:
            return self._reject(counter, "no_permission")
        setup, length = self.setups.get(counter), self.lengths.get(counter)
        if setup is None or length is None:
            return self._reject(counter, "bad_parameters")
        joint = self.joints.get(int(setup["JointIndex"]))
        if joint is None:
            return self._reject(counter, "unknown_joint")
        rate, samples = float(setup["SampleRate"]), int(length["SampleCount"])
        if rate <= 0 or samples < 2 or float(setup["MotorSpeed"]) == 0:
            return self._reject(counter, "bad_parameters")
        # Nominal (unstuffed) bits: a stream beyond the bus is refused rather than mangled.
        if rate * (47 + 8 * self.proto.encoder.length) > self.bitrate:
            return self._reject(counter, "bus_load")
        self.cycles_started += 1
        c = CycleRun(
            number=self.cycles_started,
            counter=counter,
            joint=joint,
            rate_hz=rate,
            samples=samples,
            settle_s=float(length["Settle"]),
            speed_rad_s=float(setup["MotorSpeed"]),
            start_pose_rad=self.poses[joint.index],
        )
        self.cycle = c
        self.max_step_gap_s = 0.0
        self.last_agent_frame = self.clock()
        self.last_counter, self.last_state, self.reject_reason = counter, c.state, 0
        self.mode = MODE_CODES["test_cycle"]
        seed = self.seed * 1000 + (c.number - 1)  # the simulated fake's seeds
        self.emit(
            {
                "event": "cycle_start",
                "cycle": c.number,
                "joint": joint.name,
                "samples": samples,
                "rate_hz": rate,
                "seed": seed,
            }
        )
        args = (c, self.proto, self.faults, self.backlash, self.noise, seed)
        threading.Thread(target=prepare, args=args, daemon=True).start()

    def _end_cycle(self, state: CycleState) -> None:
        c = self.cycle
        assert c is not None
        c.state = state
        self.last_state = state
        flushed = self.bus.flush_stream() if state == CycleState.ABORTED else 0
        if self.mode == MODE_CODES["test_cycle"]:
            self.mode = MODE_CODES["stopped"]
        self.poses[c.joint.index] = c.start_pose_rad  # back at the test pose
        stream_s = c.next_sample / c.rate_hz
        self.emit(
            {
                "event": "cycle_done" if state == CycleState.DONE else "cycle_aborted",
                "cycle": c.number,
                "samples": c.samples,
                "sent": c.sent,
                "dropped": c.dropped,
                "flushed": flushed,
                "overruns": self.bus.overruns,
                "error": c.error,
                "stream_s": stream_s,
                "max_step_gap_s": self.max_step_gap_s,
                "bus_load": self.bus.busy_bits / (self.bitrate * stream_s)
                if stream_s > 0
                else None,
            }
        )

    # --- what goes on the bus ------------------------------------------------------------------
    def _fault_at(self, c: CycleRun, k: int) -> list[Fault]:
        return [f for f in self.faults if f.cycle == c.number and f.sample == k]

    def _status_frames(self, now: float) -> None:
        if not self.enabled or now < self.next_status:
            return
        self.next_status = max(self.next_status + self.status_period_s, now)
        self.alive = (self.alive + 1) % 16
        ms = int((now - self.t0) * 1000) % 65536
        status = encode(
            self.proto.status,
            {
                "Mode": self.mode,
                "Permission": int(self.permission),
                "AlarmActive": 0,
                "CycleState": self.last_state,
                "AliveCounter": self.alive,
                "SpeedOverride": 1.0,
                "AlarmCode": 0,
                "CycleCounter": self.last_counter,
                "RejectReason": self.reject_reason,
                "ControllerTime": ms / 1000,
            },
        )
        self._submit(now, self.proto.status.frame_id, status)
        indexes = sorted(self.joints)
        index = indexes[self.position_turn % len(indexes)]
        self.position_turn += 1
        pose = self.poses[index]
        c = self.cycle
        if c is not None and c.state == CycleState.CAPTURING and c.joint.index == index:
            assert c.link_rad is not None
            pose = float(c.link_rad[min(c.next_sample, c.samples - 1)])
        position = encode(self.proto.joint_position, {"JointIndex": index, "Position": pose})
        self._submit(now, self.proto.joint_position.frame_id, position)

    def _submit(
        self,
        release: float,
        can_id: int,
        data: bytes,
        bits: int | None = None,
        stream: bool = False,
    ) -> bool:
        if bits is None:
            bits = int(frame_bits(can_id, np.frombuffer(data, dtype=np.uint8))[0])
        # The bus runs up to this frame's release first: a late tick must not find the
        # transmit FIFO full of frames the bus would long have sent.
        self._drain(release)
        return self.bus.submit(release, can_id, data, bits, stream)

    def _drain(self, until: float) -> None:
        for end, can_id, data in self.bus.run_until(until):
            self._pending_out.append(Out("frame", can_id, data, end + self.wall_offset))

    def _advance_cycle(self, now: float) -> None:
        c = self.cycle
        if c is None:
            return
        active = (CycleState.PREPARING, CycleState.SETTLING, CycleState.CAPTURING)
        if c.state in active and now - self.last_agent_frame > self.watchdog_s:
            # The agent fell silent (link lost, agent dead): nobody could stop this motion.
            self.emit({"event": "watchdog", "cycle": c.number, "sample": c.next_sample})
            self._end_cycle(CycleState.ABORTED)
            return
        if c.state == CycleState.PREPARING:
            if c.error is not None:
                self._end_cycle(CycleState.ABORTED)
            elif c.payload is not None:
                c.state = self.last_state = CycleState.SETTLING
                c.settle_end = now + abs(c.speed_rad_s) / _ACCEL_RAD_S2 + c.settle_s
        if c.state == CycleState.SETTLING and now >= c.settle_end:
            c.state = self.last_state = CycleState.CAPTURING
            c.capture_t0 = now
            self.emit({"event": "capturing", "cycle": c.number})
        if c.state != CycleState.CAPTURING:
            return
        assert c.payload is not None and c.bits is not None
        while c.next_sample < c.samples:
            k = c.next_sample
            start = c.capture_t0 if c.anchor_t is None else c.anchor_t
            release = start + (k - c.anchor_k) / (c.rate_hz * c.pace)
            if release > now:
                break
            c.next_sample += 1
            for fault in self._fault_at(c, k):
                self._apply(fault, c, release)
            if c.skip:
                c.skip -= 1
                c.dropped += 1
                continue
            if c.muted_until is not None and release < c.muted_until:
                c.dropped += 1
                continue
            if c.swap_next:
                c.swap_next = False
                c.swapped.append(k)  # goes out right after the next sample
                continue
            if c.hold:
                c.hold -= 1
                c.held.append(k)  # the burst goes out with the first sample not held
                continue
            for j in [*c.held, k, *c.swapped]:
                self._send_sample(c, j, release)
            c.held, c.swapped = [], []
            if self.cycle is not c or c.state != CycleState.CAPTURING:
                return
        if c.next_sample >= c.samples and self.bus.stream_pending == 0 and not c.held:
            self._end_cycle(CycleState.DONE)  # the last sample has left the bus

    def _send_sample(self, c: CycleRun, k: int, release: float) -> None:
        assert c.payload is not None and c.bits is not None
        enc_id = self.proto.encoder.frame_id
        copies = 1
        if c.duplicates:
            copies, c.duplicates = 1 + c.duplicates, 0
        for _ in range(copies):
            if self._submit(release, enc_id, bytes(c.payload[k]), int(c.bits[k]), stream=True):
                c.sent += 1
            else:
                c.dropped += 1

    def _apply(self, fault: Fault, c: CycleRun, release: float) -> None:
        self.emit(
            {"event": "fault", "kind": fault.kind, "cycle": c.number, "sample": c.next_sample - 1}
        )
        if fault.kind == "drop":
            c.skip += fault.count or 1
        elif fault.kind == "badframe":
            self._submit(release, self.proto.encoder.frame_id, b"\x01\x02")
        elif fault.kind == "foreign":
            self._submit(release, 0x7FF, bytes(range(8)))
        elif fault.kind == "production":
            self.mode = MODE_CODES["production"]
        elif fault.kind == "stall":
            self.stalled_until = math.inf if fault.count is None else self.clock() + fault.count
        elif fault.kind == "mute":
            c.muted_until = math.inf if fault.count is None else release + fault.count
        elif fault.kind == "flood":
            c.anchor_t, c.anchor_k, c.pace = release, c.next_sample - 1, float(fault.count or 10)
        elif fault.kind == "burst":
            c.hold = fault.count or 10
        elif fault.kind == "dup":
            c.duplicates = fault.count or 1
        elif fault.kind == "swap":
            c.swap_next = True
        else:  # garbage, badtext, disconnect, kill: the transport's part, after what is due
            self._drain(release)
            self._pending_out.append(Out(fault.kind))

    def step(self) -> list[Out]:
        """Advance to now; what the transport must do, in order."""
        now = self.clock()
        if self.cycle is not None and self.cycle.state == CycleState.CAPTURING:
            # How late this process ran while streaming: a starved peer, not a slow agent.
            self.max_step_gap_s = max(self.max_step_gap_s, now - self.last_step)
        self.last_step = now
        self._advance_cycle(now)
        self._status_frames(now)
        self._drain(now)
        outs, self._pending_out = self._pending_out, []
        if self.stalled_until is not None:
            if now < self.stalled_until:
                return [o for o in outs if o.kind == "kill"]
            self.stalled_until = None
        return outs
