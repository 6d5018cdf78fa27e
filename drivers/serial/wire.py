"""The encoder board's wire vocabulary: sizes, frame and result types, status bits, the
CRC-16/CCITT-FALSE, and one frame's encoding.

The format itself (the frame and payload tables) is described in drivers/serial/frames.py,
which gathers this module with the stream decoder (drivers/serial/decoder.py) and the
payload codecs.
"""

from __future__ import annotations

import binascii
import enum
import math
import struct
from dataclasses import dataclass
from typing import NamedTuple

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
