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
import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

SYNC = b"\xa5\x5a"
HEADER_BYTES = 4
CRC_BYTES = 2
MAX_PAYLOAD_BYTES = 255
PROTOCOL_VERSION = 2  # 2: the START watchdog and HEARTBEAT
SAMPLE_HEADER = struct.Struct("<IIB")
MAX_JOINTS = 61  # a STATUS payload of 10 + 4 n bytes must fit in 255


class FrameError(ValueError):
    """A frame passed its CRC but its content is not what the protocol allows."""


class FrameType(enum.IntEnum):
    SAMPLE = 0x01
    STATUS_QUERY = 0x10
    INFO_QUERY = 0x11
    START = 0x12
    STOP = 0x13
    HEARTBEAT = 0x14
    STATUS = 0x90
    INFO = 0x91
    START_ACK = 0x92
    STOP_ACK = 0x93
    CYCLE_DONE = 0x94


class StatusBits(enum.IntFlag):
    NONE = 0
    MOVING = 0x01  # the controller executes our test cycle
    CAPTURING = 0x02  # sample frames are being streamed
    FAULT = 0x04  # alarm, protective stop, e-stop
    PERMISSION = 0x08  # the plant's "agent may move the machine" signal
    PRODUCTION = 0x10  # the production program runs
    MANUAL = 0x20  # teach / jog mode
    OVERRUN = 0x40  # the board dropped samples at the source


class StartResult(enum.IntEnum):
    OK = 0
    BUSY = 1
    NOT_STOPPED = 2
    NO_PERMISSION = 3
    BAD_ARGUMENT = 4
    FAULT = 5


class CycleResult(enum.IntEnum):
    COMPLETE = 0
    STOPPED = 1  # on our STOP
    FAULT = 2
    LEFT_STOPPED = 3  # production or manual mode took over
    WATCHDOG = 4  # no HEARTBEAT for watchdog_ms: the agent is gone or hung


class ChannelSide(enum.IntEnum):
    MOTOR = 0
    LINK = 1
    UNUSED = 255


# --- CRC-16/CCITT-FALSE ---------------------------------------------------------------------------


def _crc16_table(poly: int) -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ poly) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


CRC16_TABLE = _crc16_table(0x1021)


def crc16_ccitt_false(data: bytes | bytearray | memoryview, crc: int = 0xFFFF) -> int:
    """Table-driven CRC-16/CCITT-FALSE (what the board's firmware runs; the reference here)."""
    table = CRC16_TABLE
    for b in bytes(data):
        crc = ((crc << 8) & 0xFFFF) ^ table[(crc >> 8) ^ b]
    return crc


def crc16_fast(data: bytes | bytearray | memoryview, crc: int = 0xFFFF) -> int:
    """The same CRC computed in C by the standard library (binascii.crc_hqx), for the hot path."""
    return binascii.crc_hqx(data, crc)


# --- frames ---------------------------------------------------------------------------------------


class Frame(NamedTuple):
    type: int
    payload: bytes


def encode_frame(frame_type: int, payload: bytes) -> bytes:
    if not 0 <= frame_type <= 0xFF:
        raise ValueError(f"frame type must be a byte, got {frame_type}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    body = bytes((frame_type, len(payload))) + payload
    return SYNC + body + crc16_fast(body).to_bytes(2, "big")


@dataclass(frozen=True)
class Layout:
    """What every sample frame of one board holds: `channels` counts of `count_bits` bits."""

    channels: int
    count_bits: int

    def __post_init__(self) -> None:
        if not 12 <= self.count_bits <= 32:
            raise ValueError(f"count_bits must be 12..32, got {self.count_bits}")
        if self.channels < 1 or self.sample_payload_bytes > MAX_PAYLOAD_BYTES:
            most = (MAX_PAYLOAD_BYTES - SAMPLE_HEADER.size) // self.count_bytes
            raise ValueError(
                f"channels must be 1..{most} for {self.count_bits}-bit counts, got {self.channels}"
            )

    @property
    def count_bytes(self) -> int:
        return math.ceil(self.count_bits / 8)

    @property
    def sample_payload_bytes(self) -> int:
        return SAMPLE_HEADER.size + self.channels * self.count_bytes

    @property
    def sample_frame_bytes(self) -> int:
        return HEADER_BYTES + self.sample_payload_bytes + CRC_BYTES


# Allowed payload lengths: (base, step) means base + k * step for k >= 0; step 0 means exactly base.
_FIXED_LENGTHS: dict[int, tuple[int, int]] = {
    FrameType.STATUS_QUERY: (1, 0),
    FrameType.INFO_QUERY: (1, 0),
    FrameType.START: (44, 0),
    FrameType.STOP: (1, 0),
    FrameType.HEARTBEAT: (1, 0),
    FrameType.STATUS: (10, 4),
    FrameType.INFO: (4, 2),
    FrameType.START_ACK: (10, 0),
    FrameType.STOP_ACK: (6, 0),
    FrameType.CYCLE_DONE: (10, 0),
}
_B2A = ("SAMPLE", "STATUS", "INFO", "START_ACK", "STOP_ACK", "CYCLE_DONE")
BOARD_TO_AGENT = frozenset(FrameType[n] for n in _B2A)
AGENT_TO_BOARD = frozenset(
    FrameType[n] for n in ("STATUS_QUERY", "INFO_QUERY", "START", "STOP", "HEARTBEAT")
)


def length_rule(layout: Layout, accept: frozenset[FrameType]) -> Callable[[int, int], bool]:
    """A predicate (type, length) -> bool accepting only the frames one side should receive."""
    table: dict[int, tuple[int, int]] = {
        t: (layout.sample_payload_bytes, 0) if t == FrameType.SAMPLE else _FIXED_LENGTHS[t]
        for t in accept
    }

    def ok(frame_type: int, length: int) -> bool:
        rule = table.get(frame_type)
        if rule is None:
            return False
        base, step = rule
        return length == base if step == 0 else length >= base and (length - base) % step == 0

    return ok


@dataclass
class DecoderStats:
    """Running counts of one stream; garbage_bytes counts every byte outside a good frame."""

    frames: int = 0
    bytes_in: int = 0
    garbage_bytes: int = 0
    bad_header: int = 0
    bad_crc: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "frames": self.frames,
            "bytes_in": self.bytes_in,
            "garbage_bytes": self.garbage_bytes,
            "bad_header": self.bad_header,
            "bad_crc": self.bad_crc,
        }


class FrameDecoder:
    """Byte stream -> good frames, resynchronising on the sync word after anything else."""

    def __init__(self, accepts: Callable[[int, int], bool]) -> None:
        self._accepts = accepts
        self._buf = bytearray()
        self.stats = DecoderStats()

    @property
    def pending_bytes(self) -> int:
        """Bytes held back as the possible start of a frame not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        buf = self._buf
        buf += data
        self.stats.bytes_in += len(data)
        out: list[Frame] = []
        pos = 0
        size = len(buf)
        stats = self.stats
        while True:
            i = buf.find(SYNC, pos)
            if i < 0:
                # A trailing first sync byte may be half of the next sync word: keep it.
                keep = 1 if size > pos and buf[-1] == SYNC[0] else 0
                stats.garbage_bytes += size - pos - keep
                pos = size - keep
                break
            stats.garbage_bytes += i - pos
            pos = i
            if size - i < HEADER_BYTES:
                break
            frame_type, length = buf[i + 2], buf[i + 3]
            if not self._accepts(frame_type, length):
                stats.bad_header += 1
                stats.garbage_bytes += 1
                pos = i + 1
                continue
            end = i + HEADER_BYTES + length + CRC_BYTES
            if end > size:
                break
            # Over type..CRC the remainder is 0 for an intact frame (CRC sent big-endian).
            if binascii.crc_hqx(memoryview(buf)[i + 2 : end], 0xFFFF) != 0:
                stats.bad_crc += 1
                stats.garbage_bytes += 1
                pos = i + 1
                continue
            out.append(Frame(frame_type, bytes(buf[i + HEADER_BYTES : end - CRC_BYTES])))
            stats.frames += 1
            pos = end
        del buf[:pos]
        return out


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
