"""The test cycle of the serial board peer (tests/peers/serial_board.py): the scenario it
plays, the joint physics turned into SAMPLE frames, and the faults injected into that stream.

Board (serial_board.py: the protocol, the UART and the watchdog) inherits CycleStream; the
names CycleStream declares below are Board's.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.capture.encoder import angle_to_counts
from agent.config.model import ControllerSettings, JointSettings
from drivers.base import BacklashCycle
from drivers.serial.frames import (
    SYNC,
    CycleDone,
    CycleResult,
    FrameType,
    Layout,
    StartCommand,
    StatusBits,
    crc16_fast,
    encode_samples,
)
from drivers.sim.backlash import simulate_backlash_capture


@dataclass
class Scenario:
    seed: int = 0
    noise_counts: float = 1.0
    backlash_rad: dict[str, float] | None = None
    poses_rad: dict[str, float] | None = None
    mode: str = "stopped"
    permission: bool = True
    alarm: int = 0
    override_pct: int = 100
    time_scale: float = 0.0
    baud: int = 921_600
    overrun: str = "wait"
    tx_queue_bytes: int = 8192
    first_counter: int = 0
    channel_map: list[list[int]] | None = None
    rate_error: float = 0.0
    faults: list[dict[str, Any]] | None = None
    ignore_watchdog: bool = False


class CycleStream:
    """Board's cycle: frames_of (physics -> frames), run_cycle (paced, with faults)."""

    ctrl: ControllerSettings
    sc: Scenario
    layout: Layout
    channels: dict[str, tuple[int, int | None]]
    poses: dict[int, float]
    mode: str
    counter: int
    cycles_run: int
    stop_event: asyncio.Event
    watchdog_tripped: bool
    heartbeats: int
    stalled: bool
    garbage_replies: bool
    out: bytearray
    out_space: asyncio.Event
    rng: np.random.Generator
    t_boot: float
    frames_sent: int
    frames_overrun: int
    done: asyncio.Event
    stream_t0: float | None

    def log(self, event: str, **fields: Any) -> None:
        raise NotImplementedError  # Board's

    def send(self, data: bytes) -> None:
        raise NotImplementedError  # Board's

    def status_bits(self) -> StatusBits:
        raise NotImplementedError  # Board's

    def close_master(self) -> None:
        raise NotImplementedError  # Board's

    def frames_of(self, cmd: StartCommand, joint: JointSettings, seed: int) -> list[bytes]:
        cycle = BacklashCycle(
            controller=self.ctrl.name,
            joint=joint.name,
            joint_index=joint.index,
            motor_speed_rad_s=cmd.motor_speed_rad_s,
            gear_ratio=joint.gear_ratio,
            duration_s=cmd.duration_s,
            settle_s=cmd.settle_s,
            sample_rate_hz=cmd.sample_rate_hz,
            encoder_bits=joint.encoder_bits,
            test_pose_rad=cmd.test_pose_rad,
        )
        backlash = (self.sc.backlash_rad or {}).get(joint.name, 0.0)
        cap = simulate_backlash_capture(
            joint,
            cycle,
            backlash,
            noise_counts=self.sc.noise_counts,
            seed=seed,
            machine=self.ctrl.name,
        )
        n = len(cap)
        counts = np.zeros((n, self.layout.channels), dtype=np.int64)
        for j in self.ctrl.joints:  # the other joints stand still at their poses
            motor, link = self.channels[j.name]
            pose = self.poses[j.index]
            counts[:, motor] = angle_to_counts(np.array([pose * j.gear_ratio]), j.encoder_bits)[0]
            if link is not None:
                counts[:, link] = angle_to_counts(np.array([pose]), j.encoder_bits)[0]
        motor, link = self.channels[joint.name]
        counts[:, motor] = cap.channel("motor_counts").astype(np.int64)
        if link is not None:
            counts[:, link] = angle_to_counts(cap.channel("link_pos_rad"), joint.encoder_bits)
        clock0 = int((time.monotonic() - self.t_boot) * 1e6)
        stamps = clock0 + np.rint(cap.time_s * 1e6 * (1.0 + self.sc.rate_error)).astype(np.int64)
        counters = self.counter + np.arange(n, dtype=np.int64)
        return encode_samples(self.layout, counters, stamps, 0, counts)

    async def run_cycle(self, cmd: StartCommand, joint: JointSettings, n: int) -> None:
        seed = self.sc.seed * 1000 + self.cycles_run
        cycle_no = self.cycles_run
        self.cycles_run += 1
        first = self.counter
        loop = asyncio.get_running_loop()
        settle = asyncio.ensure_future(asyncio.sleep(cmd.settle_s * self.sc.time_scale))
        frames = await asyncio.to_thread(self.frames_of, cmd, joint, seed)
        await settle
        assert len(frames) == n, (len(frames), n)
        faults: dict[int, list[dict[str, Any]]] = {}
        for f in self.sc.faults or []:
            if "at_frame" in f and f.get("cycle", 0) == cycle_no:
                faults.setdefault(int(f["at_frame"]), []).append(f)
        self.stream_t0 = None
        period_s = self.sc.time_scale / cmd.sample_rate_hz
        t0 = loop.time()
        skip = corrupt = 0
        shift = 0  # extra counters a flood consumed: later frames carry higher counters
        held: bytes | None = None  # a frame held back by reorder, sent after the next one
        period_us = 1e6 / cmd.sample_rate_hz
        for k, frame in enumerate(frames):
            if self.stop_event.is_set():
                break
            truncate = False
            burst: list[bytes] = []
            copy: bytes | None = None
            for fault in faults.get(k, ()):
                self.log("fault", **fault)
                if await self.apply(fault, k):
                    return
                kind = fault["kind"]
                skip = int(fault.get("count", 1)) if kind == "drop" else skip
                corrupt = int(fault.get("count", 1)) if kind == "bad_crc" else corrupt
                truncate = truncate or kind == "truncate"
                if kind == "stall_samples":
                    await self.stop_event.wait()  # the joint moves on, the stream is dead
                elif kind == "flood":
                    count, factor = int(fault.get("count", 20)), float(fault.get("factor", 10))
                    stamp0 = sample_stamp(frames[k - 1]) if k else sample_stamp(frame) - period_us
                    step_us = period_us / factor
                    burst = [
                        restamp(frame, first + k + shift + i, stamp0 + (i + 1) * step_us)
                        for i in range(count)
                    ]
                    shift += count
                elif kind == "reorder":
                    held = frame
                elif kind == "duplicate":
                    twin = frame
                    if not fault.get("identical", True) and k + 1 < len(frames):
                        # This frame's counter and time with the next sample's counts.
                        twin = restamp(
                            frame[:13] + frames[k + 1][13:],
                            sample_counter(frame),
                            sample_stamp(frame),
                        )
                    copy = twin
            if self.stop_event.is_set():
                break
            if period_s > 0:
                due = t0 + k * period_s
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
            else:
                while len(self.out) >= self.sc.tx_queue_bytes // 2:
                    self.out_space.clear()
                    await self.out_space.wait()
            for extra in burst:
                self.send(with_status(extra, self.status_bits()))
            if k == 0:
                self.log("streaming", joint=cmd.joint_index, frames=n)
            self.counter += 1 + len(burst)
            self.frames_sent = k + 1 + shift
            if shift:
                frame = restamp(frame, first + k + shift, sample_stamp(frame))
            frame = with_status(frame, self.status_bits())
            if skip:
                skip -= 1
                continue
            if corrupt:
                corrupt -= 1
                frame = frame[:-1] + bytes([frame[-1] ^ 0xFF])
            if truncate:
                frame = frame[: len(frame) // 2]
            if len(self.out) + len(frame) > self.sc.tx_queue_bytes:
                self.frames_overrun += 1  # the board's own queue is full: the sample is lost
                continue
            if held is not None and held is frames[k]:
                continue  # goes out after the next frame
            self.send(frame)
            if copy is not None:
                self.send(with_status(copy, self.status_bits()))
            if held is not None:
                self.send(with_status(held, self.status_bits()))
                held = None
        result = CycleResult.COMPLETE
        if self.stop_event.is_set():
            result = CycleResult.WATCHDOG if self.watchdog_tripped else CycleResult.STOPPED
        elif self.mode != "stopped":
            result = CycleResult.LEFT_STOPPED
        self.log(
            "cycle_done",
            result=result.name,
            frames_sent=self.frames_sent,
            heartbeats=self.heartbeats,
        )
        self.send(CycleDone(cmd.tag, result, first % (1 << 32), self.frames_sent).encode())

    async def apply(self, fault: dict[str, Any], k: int) -> bool:
        """Act on a fault at frame k; True when the cycle ends here."""
        kind = fault["kind"]
        if kind == "garbage":
            self.send(self.garbage(int(fault.get("bytes", 64))))
        elif kind == "leave_stopped":
            self.mode = fault.get("mode", "production")
        elif kind == "stall":
            self.stalled = True
            await asyncio.Event().wait()  # forever: the board hangs with the pty open
        elif kind == "garbage_replies":
            self.garbage_replies = True
        elif kind == "disconnect":
            self.log("disconnect", at_frame=k)
            self.close_master()
            self.done.set()
            return True
        return False

    def garbage(self, n: int) -> bytes:
        """Random bytes salted with sync words and plausible headers, the worst kind of noise."""
        out = bytearray(self.rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        for pos in self.rng.integers(0, max(1, n - 4), max(1, n // 16)):
            header = SYNC + bytes((FrameType.SAMPLE, self.layout.sample_payload_bytes))
            out[pos : pos + 4] = header
        return bytes(out[:n])


def sample_counter(frame: bytes) -> int:
    return int.from_bytes(frame[4:8], "little")


def sample_stamp(frame: bytes) -> int:
    return int.from_bytes(frame[8:12], "little")


def restamp(frame: bytes, counter: int, stamp_us: float) -> bytes:
    """The SAMPLE frame with another counter and board timestamp (and its CRC recomputed)."""
    body = bytearray(frame[2:-2])
    struct.pack_into("<II", body, 2, counter % (1 << 32), round(stamp_us) % (1 << 32))
    return SYNC + bytes(body) + crc16_fast(bytes(body)).to_bytes(2, "big")


def with_status(frame: bytes, status: StatusBits) -> bytes:
    """The frame with its status byte set (and its CRC recomputed)."""
    body = bytearray(frame[2:-2])
    body[2 + 8] = int(status)
    return SYNC + bytes(body) + crc16_fast(bytes(body)).to_bytes(2, "big")
