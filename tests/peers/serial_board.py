"""Peer: a controller with an encoder interface board, on the master side of a pty pair.

Run as a process (the tests and the bench do):

    python -P tests/peers/serial_board.py --config CFG.yaml --controller NAME --link PATH \
        [--scenario JSON] [--events FILE]

It opens a pty pair (os.openpty), links PATH to the slave device (as `socat pty,link=PATH`
would) and prints `READY <slave>` on stdout. The agent's serial driver opens PATH. The board
speaks drivers/serial_frames.py: it answers INFO / STATUS / START / STOP and, for a START,
runs the constant-speed cycle on the joint model of agent/simulation.py (the same physics and
seed rule as the simulated fake: seed * 1000 + cycles run) and streams its capture window as
SAMPLE frames, paced like a UART at `baud` (8N1: 10 bits a byte) and, with time_scale > 0,
in (scaled) real time.

The config file gives the joints (physics), the channel layout and the bit width; the scenario
(JSON) gives what the agent must find out or survive:
  seed, noise_counts, backlash_rad {joint: rad}, poses_rad {joint: rad}, mode
  (stopped|production|manual|fault), permission, alarm, override_pct, time_scale, baud,
  overrun ("wait": the pty's backpressure slows the board; "drop": bytes the pty does not take
  are lost, as in a UART receive overrun), tx_queue_bytes, first_counter, channel_map,
  rate_error (board clock off by this fraction), faults [...].
Faults, each {"kind": ..., "at_frame": k, "cycle": c (default 0)}:
  garbage (bytes: n, random bytes with sync words and fake headers, before frame k),
  drop (count: n frames never sent), bad_crc (count: n), truncate (half of frame k),
  stall (stop sending and answering, keep the pty open), disconnect (close the pty, exit),
  leave_stopped (mode: production|manual|fault, and stream on until STOP),
  garbage_replies (no at_frame: every command is answered with random bytes),
  stall_samples (the sample stream stops, the joint moves on and commands are still answered,
  until STOP or the watchdog), flood (count: n extra frames before frame k, sampled at
  `factor` times the rate, default 10; the counter runs on), reorder (frame k+1 goes out before
  frame k), duplicate (frame k goes out twice; identical: false sends the copy with the next
  sample's counts under the same counter).
Watchdog: from START the board expects a HEARTBEAT with the START's tag at least every
watchdog_ms of the START (ignore_watchdog: true disables it, a board without one); without it
the joint stops as on STOP and the cycle ends WATCHDOG (event `watchdog` with the time since
the last beat).
Events (start, stop, cycle_done, fault, watchdog, exit with byte counts; `t` is
time.monotonic() of the board) go as JSON lines to --events.
The peer exits on SIGTERM, when its stdin closes, or on a disconnect fault.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import struct
import sys
import time
import tty
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.config import ControllerSettings, JointSettings, load_config
from agent.encoder import angle_to_counts
from agent.simulation import simulate_backlash_capture
from drivers.base import BacklashCycle
from drivers.serial import resolve_channels
from drivers.serial_frames import (
    AGENT_TO_BOARD,
    PROTOCOL_VERSION,
    SYNC,
    ChannelSide,
    CycleDone,
    CycleResult,
    Frame,
    FrameDecoder,
    FrameType,
    InfoReply,
    Layout,
    StartAck,
    StartCommand,
    StartResult,
    StatusBits,
    StatusReply,
    StopAck,
    crc16_fast,
    encode_samples,
    length_rule,
)

_MODE_BITS = {
    "stopped": StatusBits.NONE,
    "production": StatusBits.PRODUCTION,
    "manual": StatusBits.MANUAL,
    "fault": StatusBits.FAULT,
}


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


class Board:
    def __init__(self, ctrl: ControllerSettings, sc: Scenario, master: int, events: Any) -> None:
        self.ctrl, self.sc, self.master, self.events = ctrl, sc, master, events
        s = ctrl.settings
        self.layout = Layout(s.channels, s.count_bits)
        self.channels = resolve_channels(s, ctrl.joints, ctrl.name)
        self.joints: dict[int, JointSettings] = {j.index: j for j in ctrl.joints}
        self.poses = {
            j.index: (sc.poses_rad or {}).get(j.name, j.test_pose_rad) for j in ctrl.joints
        }
        self.mode = sc.mode
        self.counter = sc.first_counter
        self.cycles_run = 0
        self.cycle_task: asyncio.Task[None] | None = None
        self.stop_event = asyncio.Event()
        # The running cycle's watchdog: its START tag, timeout and the last HEARTBEAT.
        self.cycle_tag = -1
        self.watchdog_s = 0.0
        self.last_beat = 0.0
        self.heartbeats = 0
        self.watchdog_tripped = False
        self.stalled = False
        self.garbage_replies = any(
            f["kind"] == "garbage_replies" and "at_frame" not in f for f in sc.faults or []
        )
        self.master_open = True
        self.decoder = FrameDecoder(length_rule(self.layout, AGENT_TO_BOARD))
        self.out = bytearray()
        self.out_ready = asyncio.Event()
        self.out_space = asyncio.Event()
        self.rng = np.random.default_rng(sc.seed + 99)
        self.t_boot = time.monotonic()
        self.bytes_sent = self.bytes_dropped = self.frames_sent = self.frames_overrun = 0
        self.done = asyncio.Event()
        # Span of the latest cycle's stream on the line: first to last byte written.
        self.stream_t0: float | None = None
        self.stream_t1 = 0.0

    def close_master(self) -> None:
        if self.master_open:
            self.master_open = False
            asyncio.get_running_loop().remove_reader(self.master)
            os.close(self.master)

    # --- output: a UART at `baud` feeding the pty ---------------------------------------------

    def log(self, event: str, **fields: Any) -> None:
        if self.events is not None:
            line = {"event": event, "t": time.monotonic(), **fields}
            self.events.write(json.dumps(line) + "\n")
            self.events.flush()

    def send(self, data: bytes) -> None:
        self.out += data
        self.out_ready.set()

    async def tx_loop(self) -> None:
        loop = asyncio.get_running_loop()
        rate = self.sc.baud / 10.0  # bytes per second, 8N1
        # A UART sends without pause; when this process wakes late it catches up on the line
        # time it missed (up to 50 ms), or the emulated line would run slower than its baud.
        burst = max(64.0, rate * 0.05)
        tokens, last = 0.0, loop.time()
        while True:
            if not self.out or self.stalled:
                self.out_space.set()
                self.out_ready.clear()
                await self.out_ready.wait()
                last = loop.time()
                continue
            now = loop.time()
            if rate > 0:
                tokens = min(burst, tokens + (now - last) * rate)
                last = now
                if tokens < 1.0:
                    await asyncio.sleep(max(0.001, (1.0 - tokens) / rate))
                    continue
                chunk = bytes(self.out[: int(tokens)])
            else:
                chunk = bytes(self.out[:65536])
            try:
                n = os.write(self.master, chunk)
            except BlockingIOError:
                n = 0
            except OSError:
                return
            taken = len(chunk) if self.sc.overrun == "drop" else n
            self.bytes_dropped += taken - n
            self.bytes_sent += n
            if n and self.cycle_task is not None:
                self.stream_t1 = time.monotonic()
                if self.stream_t0 is None:
                    self.stream_t0 = self.stream_t1
            del self.out[:taken]
            tokens -= taken
            if len(self.out) < self.sc.tx_queue_bytes // 2:
                self.out_space.set()
            if taken < len(chunk):  # the pty is full: wait until the agent reads
                await _writable(self.master)
            elif rate <= 0:
                await asyncio.sleep(0)

    # --- input: commands --------------------------------------------------------------------

    def readable(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # EIO while no one holds the slave: ignore, the agent may reconnect
            return
        if self.stalled:
            return
        for frame in self.decoder.feed(data):
            self.command(frame)

    def moving(self) -> bool:
        # A STOP halts the joint at once; the stream ends at the next sample.
        running = self.cycle_task is not None and not self.cycle_task.done()
        return running and not self.stop_event.is_set()

    def status_bits(self) -> StatusBits:
        bits = _MODE_BITS[self.mode]
        if self.sc.permission:
            bits |= StatusBits.PERMISSION
        if self.moving():
            bits |= StatusBits.MOVING | StatusBits.CAPTURING
        if self.frames_overrun:
            bits |= StatusBits.OVERRUN
        return bits

    def command(self, frame: Frame) -> None:
        tag = frame.payload[0]
        reply = b""
        if frame.type == FrameType.HEARTBEAT:
            if tag == self.cycle_tag:
                self.heartbeats += 1
                self.last_beat = time.monotonic()
            return  # never answered
        if frame.type == FrameType.INFO_QUERY:
            reply = InfoReply(tag, PROTOCOL_VERSION, self.layout, self.channel_map()).encode()
        elif frame.type == FrameType.STATUS_QUERY:
            n = max(self.joints, default=0)
            positions = tuple(round(self.poses.get(k, 0.0) * 1e6) for k in range(1, n + 1))
            clock = int((time.monotonic() - self.t_boot) * 1e6)
            bits = self.status_bits()
            status = StatusReply(tag, bits, self.sc.override_pct, self.sc.alarm, clock, positions)
            reply = status.encode()
        elif frame.type == FrameType.STOP:
            moving = self.moving()
            self.log("stop", moving=moving)
            self.stop_event.set()
            reply = StopAck(tag, int(moving), self.frames_sent).encode()
        elif frame.type == FrameType.START:
            reply = self.start(StartCommand.decode(frame.payload))
        # A confused board still acts on what it hears but answers noise.
        self.send(self.garbage(len(reply)) if self.garbage_replies else reply)

    def channel_map(self) -> tuple[tuple[int, ChannelSide], ...]:
        if self.sc.channel_map is not None:
            return tuple((j, ChannelSide(side)) for j, side in self.sc.channel_map)
        out = [(0, ChannelSide.UNUSED)] * self.layout.channels
        for j in self.ctrl.joints:
            motor, link = self.channels[j.name]
            out[motor] = (j.index, ChannelSide.MOTOR)
            if link is not None:
                out[link] = (j.index, ChannelSide.LINK)
        return tuple(out)

    def start(self, cmd: StartCommand) -> bytes:
        joint = self.joints.get(cmd.joint_index)
        if self.cycle_task is not None and not self.cycle_task.done():
            result = StartResult.BUSY
        elif self.mode == "fault" or self.sc.alarm:
            result = StartResult.FAULT
        elif self.mode != "stopped":
            result = StartResult.NOT_STOPPED
        elif not self.sc.permission:
            result = StartResult.NO_PERMISSION
        elif joint is None or not (
            cmd.sample_rate_hz > 0 and cmd.duration_s > 0 and cmd.watchdog_ms > 0
        ):
            result = StartResult.BAD_ARGUMENT
        else:
            result = StartResult.OK
        n = round(cmd.duration_s * cmd.sample_rate_hz) + 1 if result is StartResult.OK else 0
        self.log("start", joint=cmd.joint_index, result=result.name, n_frames=n)
        if result is StartResult.OK and joint is not None:
            self.stop_event.clear()
            self.cycle_tag, self.watchdog_s = cmd.tag, cmd.watchdog_ms / 1000.0
            self.last_beat, self.watchdog_tripped = time.monotonic(), False
            self.cycle_task = asyncio.ensure_future(self.run_cycle(cmd, joint, n))
        return StartAck(cmd.tag, result, self.counter % (1 << 32), n).encode()

    async def watchdog_loop(self) -> None:
        """The controller side of the liveness watchdog: no HEARTBEAT for watchdog_ms while
        the joint moves stops it, as STOP would."""
        while True:
            await asyncio.sleep(0.005)
            if self.sc.ignore_watchdog or self.stalled or not self.moving():
                continue
            silent_s = time.monotonic() - self.last_beat
            if silent_s > self.watchdog_s:
                self.watchdog_tripped = True
                self.stop_event.set()
                self.log(
                    "watchdog",
                    silent_s=silent_s,
                    frames_sent=self.frames_sent,
                    heartbeats=self.heartbeats,
                )

    # --- the cycle ----------------------------------------------------------------------------

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
                    stamp0 = _stamp(frames[k - 1]) if k else _stamp(frame) - period_us
                    step_us = period_us / factor
                    burst = [
                        _restamp(frame, first + k + shift + i, stamp0 + (i + 1) * step_us)
                        for i in range(count)
                    ]
                    shift += count
                elif kind == "reorder":
                    held = frame
                elif kind == "duplicate":
                    twin = frame
                    if not fault.get("identical", True) and k + 1 < len(frames):
                        # This frame's counter and time with the next sample's counts.
                        twin = _restamp(frame[:13] + frames[k + 1][13:], _counter(frame),
                                        _stamp(frame))
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
                self.send(_with_status(extra, self.status_bits()))
            if k == 0:
                self.log("streaming", joint=cmd.joint_index, frames=n)
            self.counter += 1 + len(burst)
            self.frames_sent = k + 1 + shift
            if shift:
                frame = _restamp(frame, first + k + shift, _stamp(frame))
            frame = _with_status(frame, self.status_bits())
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
                self.send(_with_status(copy, self.status_bits()))
            if held is not None:
                self.send(_with_status(held, self.status_bits()))
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


def _counter(frame: bytes) -> int:
    return int.from_bytes(frame[4:8], "little")


def _stamp(frame: bytes) -> int:
    return int.from_bytes(frame[8:12], "little")


def _restamp(frame: bytes, counter: int, stamp_us: float) -> bytes:
    """The SAMPLE frame with another counter and board timestamp (and its CRC recomputed)."""
    body = bytearray(frame[2:-2])
    struct.pack_into("<II", body, 2, counter % (1 << 32), round(stamp_us) % (1 << 32))
    return SYNC + bytes(body) + crc16_fast(bytes(body)).to_bytes(2, "big")


def _with_status(frame: bytes, status: StatusBits) -> bytes:
    """The frame with its status byte set (and its CRC recomputed)."""
    body = bytearray(frame[2:-2])
    body[2 + 8] = int(status)
    return SYNC + bytes(body) + crc16_fast(bytes(body)).to_bytes(2, "big")


async def _writable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


async def serve(ctrl: ControllerSettings, sc: Scenario, link: str, events: Any) -> None:
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    slave_path = os.ttyname(slave)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(slave_path, link)
    board = Board(ctrl, sc, master, events)
    loop = asyncio.get_running_loop()
    loop.add_reader(master, board.readable)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, board.done.set)

    def stdin_readable() -> None:  # the parent went away: so do we
        if not os.read(sys.stdin.fileno(), 4096):
            loop.remove_reader(sys.stdin.fileno())
            board.done.set()

    loop.add_reader(sys.stdin.fileno(), stdin_readable)
    tx = asyncio.ensure_future(board.tx_loop())
    watchdog = asyncio.ensure_future(board.watchdog_loop())
    print(f"READY {slave_path}", flush=True)
    try:
        await board.done.wait()
    finally:
        tx.cancel()
        watchdog.cancel()
        board.log(
            "exit",
            frames_sent=board.frames_sent,
            bytes_sent=board.bytes_sent,
            bytes_dropped=board.bytes_dropped,
            frames_overrun=board.frames_overrun,
            stream_s=board.stream_t1 - (board.stream_t0 or board.stream_t1),
            cycles=board.cycles_run,
        )
        board.close_master()
        os.close(slave)
        with contextlib.suppress(OSError):
            os.unlink(link)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--controller", required=True)
    p.add_argument("--link", required=True)
    p.add_argument("--scenario", default="{}", help="JSON text, or @file")
    p.add_argument("--events", default=None)
    args = p.parse_args(argv)
    text = args.scenario
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as f:
            text = f.read()
    sc = Scenario(**json.loads(text))
    config = load_config(args.config)
    ctrl = next(c for c in config.controllers if c.name == args.controller)
    events = open(args.events, "a", encoding="utf-8") if args.events else None  # noqa: SIM115
    try:
        asyncio.run(serve(ctrl, sc, args.link, events))
    finally:
        if events is not None:
            events.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
