"""Fuzz the serial encoder protocol: byte stream -> frames -> replies and a capture.

Near-valid streams are real frames built by the protocol's own encoders (sample frames of a
cycle, STATUS / INFO / START_ACK / STOP_ACK / CYCLE_DONE replies) with byte flips, cuts,
insertions, duplicated and reordered frames; raw garbage is mixed in. The stream is fed to
FrameDecoder in chunks of random size; every frame is decoded as the driver does, and the
sample frames are assembled into a capture.

Property: the decoder never raises and its counts add up (every byte fed is a frame byte,
garbage, or pending); each frame decodes or raises FrameError naming the frame; the capture is
a valid Capture or a DriverError naming the joint.
"""

from __future__ import annotations

from hypothesis import strategies as st

from drivers.serial.frames import (
    FrameError,
    FrameType,
)
from tests.fuzz.cases.serial import REPLIES, STREAMS, decoder_case, serial_case
from tests.fuzz.harness import Oracle, fuzz


def test_fuzz_serial_stream() -> None:
    oracle = Oracle("serial frames", expected=())
    fuzz(oracle, STREAMS, lambda case: serial_case(case, oracle))


def test_fuzz_serial_reply_decoders() -> None:
    oracle = Oracle("serial payload decoders", expected=(FrameError,))
    kinds = st.sampled_from(sorted([FrameType.SAMPLE, *REPLIES]))
    cases = st.tuples(kinds, st.binary(max_size=40), st.integers(0, 2))
    fuzz(oracle, cases, decoder_case)
