"""The encoder board's byte stream cut back into frames: which (type, length) pairs one side
accepts, and a decoder that resynchronises on the sync word after garbage, truncation or a bad
CRC, counting what it throws away (the rules are in drivers/serial/frames.py's docstring).
"""

from __future__ import annotations

import binascii
from collections.abc import Callable
from dataclasses import dataclass

from drivers.serial.wire import CRC_BYTES, HEADER_BYTES, SYNC, Frame, FrameType, Layout

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
