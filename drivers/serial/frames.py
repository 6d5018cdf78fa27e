"""Wire format of the encoder interface board (`driver: serial`): frames, CRC, resynchronisation.

Pure functions and one stateful stream decoder; no I/O. The board's firmware and our peer
(tests/peers/serial_board.py) speak exactly this; docs/drivers/serial.md repeats it for people.

Frame (every message, both directions; multi-byte fields little-endian except the CRC)::

    offset  size  field
    0       2     sync word A5 5A
    2       1     type (FrameType)
    3       1     L: payload length, 0..255; each type has a fixed length (or a fixed step)
    4       L     payload
    4+L     2     CRC-16/CCITT-FALSE of bytes 2 .. 3+L (type, L, payload), big-endian

CRC-16/CCITT-FALSE: poly 0x1021, init 0xFFFF, not reflected, no final xor; check value of
b"123456789" = 0x29B1. Sent big-endian, so the CRC over type..CRC is 0 for an intact frame.

Payloads (T = the tag a command carries; its replies echo it so a late reply is never taken for
the answer to a newer question)::

    SAMPLE      01  board->agent  counter u32, timestamp_us u32, status u8,
                                   then `channels` counts of ceil(bits/8) bytes each
    STATUS_Q    10  agent->board  T
    INFO_Q      11  agent->board  T
    START       12  agent->board  T, joint_index u8, motor_speed_rad_s f64, settle_s f64,
                                   duration_s f64, sample_rate_hz f64, test_pose_rad f64,
                                   watchdog_ms u16 (0 is refused: BAD_ARGUMENT)
    STOP        13  agent->board  T
    HEARTBEAT   14  agent->board  T of the running START (no reply)
    STATUS      90  board->agent  T, status u8, override_pct u8, alarm u16, clock_us u32,
                                   n u8, then n joint positions i32 in microradians (index 1..n)
    INFO        91  board->agent  T, version u8, channels u8, bits u8, then per channel
                                   joint_index u8 and side u8 (0 motor, 1 link, 255 unused)
    START_ACK   92  board->agent  T, result u8 (StartResult), first_counter u32, n_frames u32
    STOP_ACK    93  board->agent  T, was_moving u8, frames_sent u32
    CYCLE_DONE  94  board->agent  T of the START, result u8 (CycleResult), first_counter u32,
                                   frames_sent u32

Liveness watchdog (protocol 2): from START until the cycle ends the agent sends HEARTBEAT with
the START's tag every heartbeat interval; a board that hears none for watchdog_ms stops the
joint as on STOP and ends the cycle with CycleResult WATCHDOG. So an agent that dies (SIGKILL,
OOM) or hangs mid-cycle stops the motion within watchdog_ms, with nobody left to send STOP.

The counter counts every sample the board takes (u32, wraps); a capture is the n_frames
consecutive counters from first_counter, so a lost frame anywhere, the first and the last
included, is a missing counter. The capture's time base is counter / sample rate (the board
samples on its own fixed clock); timestamp_us is the board clock at the sample, used to check
the rate the board really sampled at.

Resynchronisation: the decoder looks for the sync word; a candidate whose type is unknown, whose
length is not the type's, or whose CRC fails costs one byte (the search resumes at the next byte),
so a good frame right after garbage, a truncated frame or a corrupt frame is still found. Every
byte outside a good frame is counted as garbage, every rejected candidate as a bad header or a
bad CRC. A CRC-16 lets a random candidate through with probability 2**-16: the frame counter,
the fixed lengths and the value checks of decode_samples are the further guards.
"""

from __future__ import annotations

import binascii
import enum
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from drivers.serial.decoder import (
    AGENT_TO_BOARD,
    BOARD_TO_AGENT,
    DecoderStats,
    FrameDecoder,
    length_rule,
)
from drivers.serial.wire import (
    CRC16_TABLE,
    CRC_BYTES,
    HEADER_BYTES,
    MAX_JOINTS,
    MAX_PAYLOAD_BYTES,
    PROTOCOL_VERSION,
    SAMPLE_HEADER,
    SYNC,
    ChannelSide,
    CycleResult,
    Frame,
    FrameError,
    FrameType,
    Layout,
    StartResult,
    StatusBits,
    crc16_ccitt_false,
    crc16_fast,
    encode_frame,
)

__all__ = [
    "AGENT_TO_BOARD",
    "BOARD_TO_AGENT",
    "CRC16_TABLE",
    "CRC_BYTES",
    "HEADER_BYTES",
    "MAX_JOINTS",
    "MAX_PAYLOAD_BYTES",
    "PROTOCOL_VERSION",
    "SAMPLE_HEADER",
    "SYNC",
    "ChannelSide",
    "CycleDone",
    "CycleResult",
    "DecoderStats",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "FrameType",
    "InfoReply",
    "Layout",
    "SampleBlock",
    "StartAck",
    "StartCommand",
    "StartResult",
    "StatusBits",
    "StatusReply",
    "StopAck",
    "crc16_ccitt_false",
    "crc16_fast",
    "decode_samples",
    "encode_frame",
    "encode_query",
    "encode_samples",
    "length_rule",
    "reply_tag",
]


# --- sample frames --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SampleBlock:
    """Sample frames decoded into columns (n frames)."""

    counter: npt.NDArray[np.int64]  # raw u32 counters
    timestamp_us: npt.NDArray[np.int64]  # raw u32 board clock
    status: npt.NDArray[np.uint8]
    counts: npt.NDArray[np.int64]  # (n, channels)

    def __len__(self) -> int:
        return int(self.counter.size)


def encode_samples(
    layout: Layout,
    counter: npt.ArrayLike,
    timestamp_us: npt.ArrayLike,
    status: npt.ArrayLike,
    counts: npt.ArrayLike,
) -> list[bytes]:
    """Whole SAMPLE frames, one per row of counts (n, channels); counters wrap at 2**32."""
    c = np.asarray(counts, dtype=np.int64)
    if c.ndim != 2 or c.shape[1] != layout.channels:
        raise ValueError(f"counts must be (n, {layout.channels}), got {c.shape}")
    if np.any(c < 0) or np.any(c >= 1 << layout.count_bits):
        raise ValueError(f"counts must lie in 0..2**{layout.count_bits}-1")
    n = c.shape[0]
    rows = np.empty((n, layout.sample_payload_bytes), dtype=np.uint8)
    rows[:, 0:4] = _le_bytes(np.asarray(counter, dtype=np.int64) % (1 << 32), 4)
    rows[:, 4:8] = _le_bytes(np.asarray(timestamp_us, dtype=np.int64) % (1 << 32), 4)
    rows[:, 8] = np.broadcast_to(np.asarray(status, dtype=np.uint8), (n,))
    w = layout.count_bytes
    rows[:, SAMPLE_HEADER.size :] = _le_bytes(c, w).reshape(n, layout.channels * w)
    head = SYNC + bytes((FrameType.SAMPLE, layout.sample_payload_bytes))
    out = []
    for row in rows:
        payload = row.tobytes()
        body = head[2:] + payload
        out.append(head + payload + binascii.crc_hqx(body, 0xFFFF).to_bytes(2, "big"))
    return out


def _le_bytes(values: npt.NDArray[np.int64], width: int) -> npt.NDArray[np.uint8]:
    """Little-endian bytes of each value: shape (..., width)."""
    shifts = np.arange(width, dtype=np.int64) * 8
    return ((values[..., None] >> shifts) & 0xFF).astype(np.uint8)


def decode_samples(payloads: Sequence[bytes], layout: Layout) -> SampleBlock:
    """Columns of SAMPLE payloads; FrameError names the first frame holding an impossible count."""
    n = len(payloads)
    size = layout.sample_payload_bytes
    raw = np.frombuffer(b"".join(payloads), dtype=np.uint8)
    if raw.size != n * size:
        raise FrameError(f"sample payloads must be {size} bytes each")
    rows = raw.reshape(n, size).astype(np.int64)
    shifts4 = np.arange(4, dtype=np.int64) * 8
    counter = (rows[:, 0:4] << shifts4).sum(axis=1)
    timestamp = (rows[:, 4:8] << shifts4).sum(axis=1)
    w = layout.count_bytes
    counts = (
        rows[:, SAMPLE_HEADER.size :].reshape(n, layout.channels, w)
        << (np.arange(w, dtype=np.int64) * 8)
    ).sum(axis=2)
    too_big = counts >= 1 << layout.count_bits
    if np.any(too_big):
        k, ch = (int(v) for v in np.argwhere(too_big)[0])
        raise FrameError(
            f"sample frame {k} (counter {int(counter[k])}): channel {ch} holds {int(counts[k, ch])}"
            f", beyond {layout.count_bits} bits"
        )
    return SampleBlock(
        counter=counter, timestamp_us=timestamp, status=rows[:, 8].astype(np.uint8), counts=counts
    )


# --- commands and replies -------------------------------------------------------------------------


def _unpack(fmt: struct.Struct, payload: bytes, what: str) -> tuple[Any, ...]:
    if len(payload) < fmt.size:
        raise FrameError(f"{what} payload has {len(payload)} bytes, expected {fmt.size}")
    return fmt.unpack_from(payload)


_TAG = struct.Struct("<B")
_STATUS = struct.Struct("<BBBHIB")
_INFO = struct.Struct("<BBBB")


def encode_query(frame_type: FrameType, tag: int) -> bytes:
    """STATUS_QUERY, INFO_QUERY, STOP or HEARTBEAT: the tag is their whole payload."""
    return encode_frame(frame_type, _TAG.pack(tag))


def reply_tag(frame: Frame) -> int:
    """The tag every non-sample frame starts with."""
    if not frame.payload:
        raise FrameError(f"frame type {frame.type:#04x} has no tag")
    return frame.payload[0]


class _Fixed:
    """A message whose payload is one struct: its fields in declaration order."""

    FRAME: ClassVar[FrameType]
    FORMAT: ClassVar[struct.Struct]
    ENUMS: ClassVar[Mapping[int, type[enum.IntEnum]]] = {}  # field position -> its enum

    def encode(self) -> bytes:
        values = [getattr(self, f.name) for f in fields(self)]  # type: ignore[arg-type]
        return encode_frame(self.FRAME, self.FORMAT.pack(*values))

    @classmethod
    def decode(cls, payload: bytes) -> Any:
        values = list(_unpack(cls.FORMAT, payload, cls.FRAME.name))
        for pos, tp in cls.ENUMS.items():
            try:
                values[pos] = tp(values[pos])
            except ValueError:
                name = fields(cls)[pos].name  # type: ignore[arg-type]
                allowed = [m.value for m in tp]
                raise FrameError(
                    f"{cls.FRAME.name} {name}: {values[pos]} is not one of {allowed}"
                ) from None
        return cls(*values)


@dataclass(frozen=True)
class StartCommand(_Fixed):
    FRAME: ClassVar[FrameType] = FrameType.START
    FORMAT: ClassVar[struct.Struct] = struct.Struct("<BBdddddH")
    tag: int
    joint_index: int
    motor_speed_rad_s: float
    settle_s: float
    duration_s: float
    sample_rate_hz: float
    test_pose_rad: float
    watchdog_ms: int  # the board stops the joint after this long without a HEARTBEAT


@dataclass(frozen=True)
class StartAck(_Fixed):
    FRAME: ClassVar[FrameType] = FrameType.START_ACK
    FORMAT: ClassVar[struct.Struct] = struct.Struct("<BBII")
    ENUMS: ClassVar[Mapping[int, type[enum.IntEnum]]] = {1: StartResult}
    tag: int
    result: StartResult
    first_counter: int
    n_frames: int


@dataclass(frozen=True)
class StopAck(_Fixed):
    FRAME: ClassVar[FrameType] = FrameType.STOP_ACK
    FORMAT: ClassVar[struct.Struct] = struct.Struct("<BBI")
    tag: int
    was_moving: int  # 1 when the STOP halted a cycle
    frames_sent: int


@dataclass(frozen=True)
class CycleDone(_Fixed):
    FRAME: ClassVar[FrameType] = FrameType.CYCLE_DONE
    FORMAT: ClassVar[struct.Struct] = struct.Struct("<BBII")
    ENUMS: ClassVar[Mapping[int, type[enum.IntEnum]]] = {1: CycleResult}
    tag: int  # the START's
    result: CycleResult
    first_counter: int
    frames_sent: int


@dataclass(frozen=True)
class StatusReply:
    tag: int
    status: StatusBits
    override_pct: int
    alarm: int
    clock_us: int
    joint_positions_urad: tuple[int, ...] = ()  # joint index k at position k - 1

    def encode(self) -> bytes:
        n = len(self.joint_positions_urad)
        if n > MAX_JOINTS:
            raise ValueError(f"at most {MAX_JOINTS} joints fit in a STATUS frame, got {n}")
        head = _STATUS.pack(
            self.tag, int(self.status), self.override_pct, self.alarm, self.clock_us % (1 << 32), n
        )
        return encode_frame(
            FrameType.STATUS, head + struct.pack(f"<{n}i", *self.joint_positions_urad)
        )

    @classmethod
    def decode(cls, payload: bytes) -> StatusReply:
        tag, status, override, alarm, clock, n = _unpack(_STATUS, payload, "STATUS")
        if len(payload) != _STATUS.size + 4 * n:
            raise FrameError(f"STATUS announces {n} joints but holds {len(payload)} bytes")
        positions = struct.unpack_from(f"<{n}i", payload, _STATUS.size)
        return cls(tag, StatusBits(status), override, alarm, clock, positions)


@dataclass(frozen=True)
class InfoReply:
    tag: int
    version: int
    layout: Layout
    # One (joint_index, side) per channel; side UNUSED for a channel no joint feeds.
    channel_map: tuple[tuple[int, ChannelSide], ...] = ()

    def encode(self) -> bytes:
        head = _INFO.pack(self.tag, self.version, self.layout.channels, self.layout.count_bits)
        body = b"".join(bytes((j, int(side))) for j, side in self.channel_map)
        return encode_frame(FrameType.INFO, head + body)

    @classmethod
    def decode(cls, payload: bytes) -> InfoReply:
        tag, version, channels, bits = _unpack(_INFO, payload, "INFO")
        if len(payload) != _INFO.size + 2 * channels:
            raise FrameError(f"INFO announces {channels} channels but holds {len(payload)} bytes")
        try:
            layout = Layout(channels, bits)
            mapping = tuple(
                (payload[k], ChannelSide(payload[k + 1]))
                for k in range(_INFO.size, len(payload), 2)
            )
        except ValueError as exc:
            raise FrameError(f"INFO: {exc}") from None
        return cls(tag, version, layout, mapping)
