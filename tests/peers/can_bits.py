"""Exact length on the wire of classic CAN data frames (standard 11-bit ids): bit stuffing included.

The peer's virtual bus uses it to time frames as a 1 Mbit/s bus would carry them. After five
equal bits in SOF..CRC the transmitter inserts one of the opposite value (which counts towards
the next run); CRC delimiter, ACK, EOF and the 3-bit interframe space are not stuffed.
`frame_bits` works on many frames at once (numpy, one column of bits at a time);
`frame_bits_reference` is the plain one-frame version the tests compare it with.
`pack_intel` builds the encoder frames of a whole capture at once.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from drivers.can.dbc import CanProtocol, encode

CRC15_POLY = 0x4599
_UNSTUFFED_TAIL = 1 + 2 + 7 + 3  # CRC delimiter, ACK slot + delimiter, EOF, interframe space


def _header_bits(can_id: int, dlc: int) -> list[int]:
    if not 0 <= can_id < 0x800:
        raise ValueError(f"standard CAN id must be 0..0x7FF, got {can_id:#x}")
    if not 0 <= dlc <= 8:
        raise ValueError(f"classic CAN frames carry 0..8 bytes, got {dlc}")
    ident = [(can_id >> (10 - i)) & 1 for i in range(11)]
    return [0, *ident, 0, 0, 0] + [(dlc >> (3 - i)) & 1 for i in range(4)]  # SOF id RTR IDE r0 DLC


def frame_bits_reference(can_id: int, data: bytes) -> int:
    bits = _header_bits(can_id, len(data))
    for byte in data:
        bits += [(byte >> (7 - i)) & 1 for i in range(8)]
    crc = 0
    for b in bits:
        nxt = b ^ ((crc >> 14) & 1)
        crc = (crc << 1) & 0x7FFF
        if nxt:
            crc ^= CRC15_POLY
    bits += [(crc >> (14 - i)) & 1 for i in range(15)]
    stuffed, run, last = 0, 0, -1
    for b in bits:
        if b == last:
            run += 1
        else:
            last, run = b, 1
        if run == 5:
            stuffed += 1
            last, run = 1 - b, 1  # the stuff bit starts the next run
    return len(bits) + stuffed + _UNSTUFFED_TAIL


def frame_bits(can_id: int, data: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """Wire length in bits of each row of `data` (frames of one id and one length)."""
    data = np.atleast_2d(np.asarray(data, dtype=np.uint8))
    n, dlc = data.shape
    header = np.array(_header_bits(can_id, dlc), dtype=np.uint8)
    payload = np.unpackbits(data, axis=1)  # MSB first, as CAN sends each byte
    bits = np.concatenate([np.broadcast_to(header, (n, header.size)), payload], axis=1)
    crc = np.zeros(n, dtype=np.uint16)
    for col in bits.T:
        nxt = col.astype(np.uint16) ^ ((crc >> 14) & 1)
        crc = ((crc << 1) & 0x7FFF) ^ (nxt * np.uint16(CRC15_POLY))
    crc_bits = ((crc[:, None] >> np.arange(14, -1, -1, dtype=np.uint16)) & 1).astype(np.uint8)
    bits = np.concatenate([bits, crc_bits], axis=1)
    stuffed = np.zeros(n, dtype=np.int64)
    run = np.zeros(n, dtype=np.int64)
    last = np.full(n, 2, dtype=np.int64)  # no previous bit
    for col in bits.T.astype(np.int64):
        same = col == last
        run = np.where(same, run + 1, 1)
        last = col.copy()
        full = run == 5
        stuffed += full
        last = np.where(full, 1 - col, last)
        run = np.where(full, 1, run)
    return bits.shape[1] + stuffed + _UNSTUFFED_TAIL


class VirtualBus:
    """One CAN bus in virtual time: frames wait for it, the lowest id wins arbitration, one frame
    is on the wire at a time, each for its exact bit length at the bitrate. The stream (encoder)
    frames queue in a transmit FIFO of limited depth: when the bus cannot keep up the FIFO fills
    and new samples are lost, as on a controller whose stream outruns its bus."""

    def __init__(self, bitrate: int, stream_fifo: int = 64) -> None:
        self.bitrate = bitrate
        self.stream_fifo = stream_fifo
        self.free_at = float("-inf")
        self._pending: list[tuple[float, int, int, bytes, int, bool]] = []
        self._seq = 0
        self.stream_pending = 0
        self.busy_bits = 0
        self.frames = 0
        self.overruns = 0

    def submit(
        self, release_s: float, can_id: int, data: bytes, bits: int, stream: bool = False
    ) -> bool:
        """Queue a frame ready at release_s; False when the stream FIFO is full (frame lost)."""
        if stream and self.stream_pending >= self.stream_fifo:
            self.overruns += 1
            return False
        self._pending.append((release_s, can_id, self._seq, data, bits, stream))
        self._seq += 1
        self.stream_pending += stream
        return True

    def flush_stream(self) -> int:
        """Drop the queued stream frames (the controller clears its FIFO on STOP)."""
        before = len(self._pending)
        self._pending = [p for p in self._pending if not p[5]]
        self.stream_pending = 0
        return before - len(self._pending)

    def run_until(self, now_s: float) -> list[tuple[float, int, bytes]]:
        """Frames whose transmission has ended by now_s: (end time, id, data), in bus order."""
        out = []
        while self._pending:
            start = max(self.free_at, min(p[0] for p in self._pending))
            ready = [p for p in self._pending if p[0] <= start]
            winner = min(ready, key=lambda p: (p[1], p[2]))
            end = start + winner[4] / self.bitrate
            if end > now_s:
                break
            self._pending.remove(winner)
            self.stream_pending -= winner[5]
            self.free_at = end
            self.busy_bits += winner[4]
            self.frames += 1
            out.append((end, winner[1], winner[3]))
        return out


def pack_intel(
    proto: CanProtocol, columns: dict[str, npt.NDArray[np.int64]]
) -> npt.NDArray[np.uint8]:
    """Encoder payloads of many samples at once (little-endian signals), checked with cantools."""
    msg = proto.encoder
    word = np.zeros(len(next(iter(columns.values()))), dtype=np.uint64)
    for name, values in columns.items():
        sig = msg.get_signal_by_name(name)
        if sig.byte_order != "little_endian" or sig.start + sig.length > 64:
            raise ValueError(f"peer packs little-endian signals only, {name} is not one")
        mask = np.uint64((1 << sig.length) - 1)
        word |= (values.astype(np.uint64) & mask) << np.uint64(sig.start)
    payload = word.astype("<u8").view(np.uint8).reshape(-1, 8)[:, : msg.length].copy()
    first = {name: int(v[0]) for name, v in columns.items()}
    if bytes(payload[0]) != encode(msg, first):
        raise AssertionError("vectorised packing disagrees with cantools")
    return payload
