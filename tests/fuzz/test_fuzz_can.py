"""Fuzz the CAN driver's receive path: socketcand ASCII lines -> frames -> status and capture.

Near-valid input is what the socketcand peer sends: `< frame ID SECS.USECS HEX >` lines of
real frames encoded with the DBC (status, joint position, the encoder stream of an armed
capture), then mutated (ids, data lengths, odd or non-hex data, broken framing) and shuffled
(lost, repeated, reordered frames); raw garbage is mixed in.

Each line goes through python-can's own socketcand parser (whatever it raises, python-can
turns into CanError inside recv, which BusLink counts) and every frame it returns through
BusLink's dispatch, the code the reader thread runs. Property: dispatch never raises; what it
keeps is valid (a status of finite numbers, finite positions, a capture recorder whose counts
fit the encoder and whose sample count never passes the request); a frame the DBC cannot
decode raises CanFrameError naming the message. A second target feeds random bytes straight
to the decoders.
"""

from __future__ import annotations

from hypothesis import strategies as st

from drivers.can.dbc import (
    CanFrameError,
)
from tests.fuzz.cases.can import STREAMS, can_case, decode_case
from tests.fuzz.harness import Oracle, fuzz


def test_fuzz_can_socketcand_lines() -> None:
    oracle = Oracle("CAN socketcand lines", expected=())
    fuzz(oracle, STREAMS, lambda lines: can_case(lines, oracle))


def test_fuzz_can_frame_decoders() -> None:
    roles = ("status", "joint_position", "encoder", "command", "cycle_setup", "cycle_length")
    oracle = Oracle(
        "CAN frame decoders",
        expected=(CanFrameError,),
        place=lambda e: "(id 0x" in str(e),
    )
    cases = st.tuples(st.sampled_from(roles), st.binary(max_size=16))
    fuzz(oracle, cases, decode_case, examples=(("status", b"\x01"), ("encoder", b"")))
