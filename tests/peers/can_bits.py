"""Exact length on the wire of classic CAN data frames (standard 11-bit ids): bit stuffing included.

The peer's virtual bus uses it to time frames as a 1 Mbit/s bus would carry them. After five
equal bits in SOF..CRC the transmitter inserts one of the opposite value (which counts towards
the next run); CRC delimiter, ACK, EOF and the 3-bit interframe space are not stuffed.
`frame_bits` works on many frames at once (numpy, one column of bits at a time);
`frame_bits_reference` is the plain one-frame version the tests compare it with.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

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
        crc = (crc << 1) & 0x7FFF
        crc ^= nxt * CRC15_POLY
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
