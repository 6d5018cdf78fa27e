"""Peer: a controller with an encoder interface board, on the master side of a pty pair.

Run as a process (the tests and the bench do):

    python -P tests/peers/serial_board.py --config CFG.yaml --controller NAME --link PATH \
        [--scenario JSON] [--events FILE]

It opens a pty pair (os.openpty), links PATH to the slave device (as `socat pty,link=PATH`
would) and prints `READY <slave>` on stdout. The agent's serial driver opens PATH. The board
speaks drivers/serial/frames.py: it answers INFO / STATUS / START / STOP and, for a START,
runs the constant-speed cycle on the joint model of drivers/sim/backlash.py (the same physics and
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


The cycle (physics to frames, faults in the stream) and the scenario are
tests/peers/serial_board_cycle.py's; this module is the board's protocol and line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import tty
from typing import Any

import numpy as np

from agent.config.load import load_config
from agent.config.model import ControllerSettings, JointSettings
from drivers.serial.frames import (
    AGENT_TO_BOARD,
    PROTOCOL_VERSION,
    ChannelSide,
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
    length_rule,
)
from drivers.serial.settings import resolve_channels

# The cycle lives beside this file; `python -P` does not put this directory on the path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serial_board_cycle import CycleStream, Scenario

_MODE_BITS = {
    "stopped": StatusBits.NONE,
    "production": StatusBits.PRODUCTION,
    "manual": StatusBits.MANUAL,
    "fault": StatusBits.FAULT,
}


class Board(CycleStream):
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
