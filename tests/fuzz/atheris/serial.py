"""atheris target `serial_frames`: the serial encoder board's byte stream, frames and payloads.

The first input byte picks what the rest is:
  0: a frame list, each record `type, n, n payload bytes` encoded by the protocol's own
     encode_frame (so the CRC holds and coverage guidance works on what is inside the frames:
     the reply decoders, the sample counters, the capture assembly); a record of type 0xFF is
     raw bytes put between frames (noise, half frames);
  1: the raw stream as the port delivers it (sync search, CRC refusals, resynchronisation);
  2: one payload straight into a decoder (byte 1 the frame type), past the CRC that screens it.
The stream is fed to FrameDecoder in chunks of 1..64 bytes, the replies decoded, the sample
frames assembled into a capture as drivers/serial/driver.py does, under both lost-frame policies.

Property (tests/fuzz/test_fuzz_serial.py states the same): the decoder never raises and its
byte counts add up; a payload decodes or raises FrameError; the capture is valid or a
DriverError naming the joint; never another exception.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from drivers.serial.frames import (
    BOARD_TO_AGENT,
    FrameError,
    FrameType,
    StartAck,
    StartResult,
    encode_frame,
    encode_samples,
)
from tests.fuzz.atheris.oracle import Target, check, guarded
from tests.fuzz.cases.serial import LAYOUT, decoder_case, serial_case

RAW = 0xFF


class _Checks:
    """The hypothesis oracle's `check`, failing the atheris input instead."""

    def check(self, ok: bool, what: str) -> None:
        check(ok, what)


def _frames(body: bytes) -> bytes:
    out = bytearray()
    pos = 0
    while pos + 2 <= len(body):
        kind, n = body[pos], body[pos + 1]
        payload = body[pos + 2 : pos + 2 + n]
        pos += 2 + n
        out += payload if kind == RAW else encode_frame(kind, payload)
    return bytes(out)


def _serial(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, body = data[0] % 3, data[1:]
    if mode == 2:
        kinds = sorted(BOARD_TO_AGENT)
        try:
            decoder_case((kinds[body[0] % len(kinds)], body[1:], body[0] // len(kinds)))
        except FrameError as exc:
            check(bool(str(exc).strip()), "FrameError without a message")
        return
    stream = _frames(body) if mode == 0 else body
    first = int.from_bytes(data[-4:], "little")
    sent = data[1] % 32
    serial_case((stream, first, sent), _Checks())  # type: ignore[arg-type]


def _record(kind: int, payload: bytes) -> bytes:
    return bytes((kind, len(payload))) + payload


def seeds() -> Iterator[bytes]:
    """A cycle's frames as the board peer sends them, in the three input forms."""
    k = np.arange(12, dtype=np.int64)
    counts = np.stack([(k * 2621 + 77) % 2**19, (k * 65 + 1000) % 2**19], axis=1)
    frames = encode_samples(LAYOUT, 7 + k, 1000 * k, 0, counts)
    ack = StartAck(3, StartResult.OK, 7, 12).encode()
    done = encode_frame(
        FrameType.CYCLE_DONE, bytes((3, 0)) + (7).to_bytes(4, "little") + (12).to_bytes(4, "little")
    )
    stream = ack + b"".join(frames) + done
    records = b"".join(_record(f[2], f[4:-2]) for f in (ack, *frames, done))
    yield b"\x00" + records
    yield b"\x01" + stream
    yield b"\x01" + stream[5:-3] + b"\xa5\x5a\x10"
    yield b"\x02\x00" + frames[0][4:-2]
    yield b"\x02\x01" + bytes(10)


TARGET = Target("serial_frames", guarded(_serial), seeds, doc=__doc__ or "")
