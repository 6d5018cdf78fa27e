"""The serial board's fuzz inputs (a cycle's frame stream, mutated and chunked; replies to
the decoders) and the driver's property; used by tests/fuzz/test_fuzz_serial.py and
tests/fuzz/atheris/serial.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from agent.errors import DriverError
from drivers.base import BacklashCycle
from drivers.serial.capture import assemble_capture
from drivers.serial.frames import (
    BOARD_TO_AGENT,
    CRC_BYTES,
    HEADER_BYTES,
    ChannelSide,
    CycleDone,
    CycleResult,
    FrameDecoder,
    FrameError,
    FrameType,
    InfoReply,
    Layout,
    StartAck,
    StartResult,
    StatusBits,
    StatusReply,
    StopAck,
    decode_samples,
    encode_samples,
    length_rule,
)
from drivers.serial.settings import SerialSettings
from tests.fuzz.harness import Oracle

LAYOUT = Layout(channels=2, count_bits=19)


RATE_HZ = 1000.0


CYCLE = BacklashCycle(
    controller="board",
    joint="j1",
    joint_index=1,
    motor_speed_rad_s=2 * math.pi * 10,
    gear_ratio=40.0,
    duration_s=0.02,
    settle_s=0.0,
    sample_rate_hz=RATE_HZ,
    encoder_bits=19,
    test_pose_rad=0.0,
)


SETTINGS = [
    SerialSettings(port="/dev/null"),
    SerialSettings(port="/dev/null", lost_frames="interpolate", max_gap_frames=3),
]


REPLIES = {
    FrameType.STATUS: StatusReply.decode,
    FrameType.INFO: InfoReply.decode,
    FrameType.START_ACK: StartAck.decode,
    FrameType.STOP_ACK: StopAck.decode,
    FrameType.CYCLE_DONE: CycleDone.decode,
}


@st.composite
def cycle_stream(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """(stream bytes, first_counter, frames_sent) of a cycle with replies around it."""
    n = draw(st.integers(0, 25))
    first = draw(st.sampled_from((0, 7, 2**32 - 3)))
    k = np.arange(n, dtype=np.int64)
    counter = first + k
    ts_us = draw(st.integers(0, 2**32 - 1)) + k * 1000
    step = CYCLE.motor_speed_rad_s / RATE_HZ * 2**19 / (2 * math.pi)
    motor = (np.round(k * step) + draw(st.integers(0, 2**19 - 1))) % 2**19
    link = (np.round(k * step / 40) + 1000) % 2**19
    status = draw(st.sampled_from((0, 3, 0x42, 255)))
    frames = encode_samples(LAYOUT, counter, ts_us, status, np.stack([motor, link], axis=1))
    tag = draw(st.integers(0, 255))
    frames.insert(0, StartAck(tag, StartResult(draw(st.integers(0, 5))), first, n).encode())
    frames.append(CycleDone(tag, CycleResult(draw(st.integers(0, 3))), first, n).encode())
    if draw(st.booleans()):
        frames.insert(
            draw(st.integers(0, len(frames))),
            StatusReply(
                tag,
                StatusBits(draw(st.integers(0, 127))),
                100,
                0,
                123456,
                tuple(draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6))),
            ).encode(),
        )
    if draw(st.booleans()):
        frames.insert(
            draw(st.integers(0, len(frames))),
            InfoReply(tag, 1, LAYOUT, ((1, ChannelSide.MOTOR), (1, ChannelSide.LINK))).encode(),
        )
    if draw(st.booleans()):
        frames.insert(draw(st.integers(0, len(frames))), StopAck(tag, 1, n).encode())
    for _ in range(draw(st.integers(0, 3))):  # whole-frame faults: lost, repeated, reordered
        if not frames:
            break
        i = draw(st.integers(0, len(frames) - 1))
        what = draw(st.sampled_from(("drop", "dup", "move")))
        if what == "drop":
            del frames[i]
        elif what == "dup":
            frames.insert(i, frames[i])
        else:
            frames.insert(draw(st.integers(0, len(frames) - 1)), frames.pop(i))
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(0, 4))):  # byte faults: noise, cuts, bursts of garbage
        pos = draw(st.integers(0, len(data)))
        what = draw(st.sampled_from(("flip", "cut", "insert", "sync")))
        if what == "flip" and pos < len(data):
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif what == "cut":
            del data[pos : pos + draw(st.integers(1, 20))]
        elif what == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=12))
        else:
            data[pos:pos] = b"\xa5\x5a" + bytes([draw(st.sampled_from(sorted(BOARD_TO_AGENT)))])
    return bytes(data), first, n


STREAMS = st.one_of(
    cycle_stream(),
    cycle_stream(),
    cycle_stream(),
    st.binary(max_size=400).map(lambda b: (b, 0, 0)),
)


def _chunks(data: bytes, seed: int) -> list[bytes]:
    """The stream cut as a serial port read would (1..64 bytes at a time)."""
    rng = np.random.default_rng(seed)
    out, pos = [], 0
    while pos < len(data):
        n = int(rng.integers(1, 65))
        out.append(data[pos : pos + n])
        pos += n
    return out


def serial_case(case: tuple[bytes, int, int], oracle: Oracle) -> None:
    data, first, sent = case
    decoder = FrameDecoder(length_rule(LAYOUT, BOARD_TO_AGENT))
    frames = []
    for chunk in _chunks(data, len(data)):
        frames += decoder.feed(chunk)
    s = decoder.stats
    framed = sum(HEADER_BYTES + len(f.payload) + CRC_BYTES for f in frames)
    oracle.check(s.bytes_in == len(data), f"bytes_in {s.bytes_in} != {len(data)} fed")
    oracle.check(s.frames == len(frames), "frames counted != frames returned")
    oracle.check(
        framed + s.garbage_bytes + decoder.pending_bytes == len(data),
        f"bytes do not add up: {framed} framed + {s.garbage_bytes} garbage + "
        f"{decoder.pending_bytes} pending != {len(data)}",
    )
    accepts = length_rule(LAYOUT, BOARD_TO_AGENT)
    samples: list[bytes] = []
    done: CycleDone | None = None
    for f in frames:
        oracle.check(accepts(f.type, len(f.payload)), f"frame of type {f.type} let through")
        if f.type == FrameType.SAMPLE:
            samples.append(f.payload)
            continue
        try:
            reply: Any = REPLIES[FrameType(f.type)](f.payload)
        except FrameError as exc:
            oracle.check(bool(str(exc)), "FrameError without a message")
            continue
        if isinstance(reply, CycleDone):
            done = reply
    if done is None:
        done = CycleDone(0, CycleResult.COMPLETE, first, sent)
    for settings in SETTINGS:
        try:
            cap = assemble_capture(
                samples,
                done,
                CYCLE,
                layout=LAYOUT,
                channels=(0, 1),
                settings=settings,
                machine="board",
                link_stats=s.to_dict(),
            )
        except DriverError as exc:
            oracle.check("board/j1" in str(exc), f"DriverError not naming the joint: {exc}")
            continue
        t = cap.time_s
        oracle.check(bool(np.all(np.diff(t) > 0)), "capture time not increasing")
        oracle.check(len(t) <= max(sent, done.frames_sent), "more samples than frames sent")
        for name, v in cap.channels.items():
            oracle.check(bool(np.all(np.isfinite(v))), f"{name} not finite")


LAYOUTS = (LAYOUT, Layout(channels=1, count_bits=12), Layout(channels=3, count_bits=32))


def decoder_case(case: tuple[int, bytes, int]) -> None:
    """One payload straight into a decoder, past the CRC that normally screens it."""
    kind, payload, layout_index = case
    if kind == FrameType.SAMPLE:
        layout = LAYOUTS[layout_index % len(LAYOUTS)]
        block = decode_samples([payload, payload], layout)
        assert block.counts.shape == (2, layout.channels)
        assert bool(np.all((block.counts >= 0) & (block.counts < 1 << layout.count_bits)))
        return
    reply = REPLIES[FrameType(kind)](payload)
    if isinstance(reply, InfoReply):
        assert len(reply.channel_map) == reply.layout.channels
    if isinstance(reply, StatusReply):
        assert all(-(2**31) <= p < 2**31 for p in reply.joint_positions_urad)
