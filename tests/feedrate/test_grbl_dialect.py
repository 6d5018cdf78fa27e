"""The GRBL dialect says what GRBL 1.1 takes: each word is sent to the GRBL peer (built from
GRBL 1.1's g-code support list, tests/peers/grbl/gcode.py) and its answer, `ok` or `error:N`,
must match the dialect's accept or refuse (agent.feedrate.gcode.dialect)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.feedrate.gcode.dialect import validate_program_line
from agent.feedrate.gcode.lex import GcodeError
from agent.feedrate.streaming.serial_channel import FdChannel, open_serial
from tests.support.drivers.grbl import Peer

# Complete lines, each with the words its command needs.
ACCEPTED = [
    "G0 X1", "G1 X1 F100", "G91 G2 X2 Y0 I1 J0 F100", "G91 G3 X2 Y0 I1 J0 F100", "G4 P0.01",
    "G10 L2 P1 X0", "G10 L20 P1 X0", "G17", "G18", "G19", "G20", "G21", "G28", "G28.1",
    "G30", "G30.1", "G38.2 Z-1 F100", "G38.3 Z-1 F100", "G38.4 Z-1 F100", "G38.5 Z-1 F100",
    "G40", "G43.1 Z1", "G49", "G53 G0 X0", "G54", "G55", "G56", "G57", "G58", "G59", "G61",
    "G80", "G90", "G91", "G91.1", "G92 X0", "G92.1", "G93 G1 X1 F10", "G94", "M1", "M2",
    "M30", "M3 S1000", "M4 S1000", "M5", "M8", "M9", "T1", "N10 G0 X0",
    "G17 G40 G49 G80 G90",  # the usual CAM preamble
]  # fmt: skip
REFUSED = [
    "%", "M6", "T1 M6", "M7", "M56", "M62 P1", "G64", "G61.1", "G90.1", "G41", "G42",
    "G43 H1", "G81 X1 Y1 Z-1 R1", "G98", "G59.1", "G28.2", "G38.1 Z-1 F100", "G10 L1 P1 X0",
    "G1 X1 A1 F100", "G1 X1 F100 E2", "T256",
]  # fmt: skip


@pytest.fixture(scope="module")
def grbl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FdChannel]:
    """One peer for every word, reset (0x18) before each so that each starts from defaults."""
    tmp: Path = tmp_path_factory.mktemp("grbl")
    p = Peer(tmp, "--time-scale", "100")
    channel = open_serial(p.path)
    try:
        yield channel
    finally:
        channel.close()
        p.close()


def answer(channel: FdChannel, line: str) -> str:
    """Reset once the last word's motion is over (a reset in motion would lock the peer in
    ALARM:3), send `line`, return GRBL's answer to it ('ok' or 'error:N')."""
    deadline = time.monotonic() + 5.0
    buf = b""
    while b"<Idle" not in buf:
        assert time.monotonic() < deadline, buf
        channel.write(b"?", 1.0)
        buf = channel.read(0.05)
    channel.write(b"\x18", 1.0)
    buf = b""
    while b"Grbl " not in buf or not buf.endswith(b"\n"):
        assert time.monotonic() < deadline, buf
        buf += channel.read(0.05)
    channel.write(line.encode() + b"\n", 1.0)
    buf = b""
    while time.monotonic() < deadline:
        buf += channel.read(0.05)
        if line == "M0" and not buf:
            channel.write(b"~", 1.0)
        for reply in buf.decode().split():
            if reply == "ok" or reply.startswith("error:"):
                return reply
    raise AssertionError(f"no answer to {line!r}: {buf!r}")


def dialect_takes(line: str) -> bool:
    try:
        validate_program_line(line, "grbl", 1, compact=True)
    except GcodeError:
        return False
    return True


@pytest.mark.parametrize("line", ACCEPTED + REFUSED)
def test_the_grbl_dialect_accepts_what_grbl_accepts(grbl: FdChannel, line: str) -> None:
    reply = answer(grbl, line)
    assert dialect_takes(line) is (reply == "ok"), f"{line!r}: GRBL answers {reply}"
    assert (line in ACCEPTED) is (reply == "ok"), f"{line!r}: GRBL answers {reply}"
