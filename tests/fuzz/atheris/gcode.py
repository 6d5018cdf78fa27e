"""atheris target `gcode`: a program's bytes through the lexer, the modal parser and the emitter.

The input is a G-code file (any bytes: read the way `jha feedrate` reads them, UTF-8 with
surrogate escapes). Every line goes through ModalState.apply; a line that parses is also
re-emitted by the Marlin dialect's emitter (renumbered, checksummed), and the emitted line must
parse again to the same end point, feed and motion: renumbering must never change a move.

Property: a Block of finite numbers, or GcodeError naming `fuzz.nc:<line>`; never another
exception (tests/fuzz/harness.py states the same for the hypothesis target).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from agent.feedrate.gcode.blocks import Block, ParserOptions
from agent.feedrate.gcode.dialect import DIALECTS
from agent.feedrate.gcode.emit import GcodeEmitter
from agent.feedrate.gcode.lex import GcodeError
from agent.feedrate.gcode.parser import ModalState
from tests.fuzz.atheris.oracle import Target, check, expect_place, guarded
from tests.support.paths import ROOT

SOURCE = "fuzz.nc"
MAX_LINES = 64  # a program this long reaches every modal combination; more only costs time


def _finite(*xs: float | None) -> bool:
    return all(x is None or math.isfinite(x) for x in xs)


def _check_block(block: Block, line_no: int) -> None:
    check(block.line_no == line_no, f"block of line {block.line_no}, not {line_no}")
    check(_finite(*block.start_mm, *block.end_mm), f"position not finite: {block.text!r}")
    check(_finite(block.length_mm, block.feed_mm_s, block.dwell_s), f"not finite: {block.text!r}")
    check(block.length_mm >= 0, f"negative length: {block.text!r}")
    if block.arc is not None:
        a = block.arc
        check(_finite(*a.centre, a.radius, a.sweep_rad), f"arc not finite: {block.text!r}")
    duration = block.duration_s
    check(
        duration is None or (math.isfinite(duration) and duration >= 0),
        f"duration {duration!r}: {block.text!r}",
    )
    block.to_dict()


def _same_move(a: Block, b: Block) -> bool:
    return (
        a.end_mm == b.end_mm
        and a.motion == b.motion
        and a.feed_mm_s == b.feed_mm_s
        and a.skipped == b.skipped
    )


def _lines(data: bytes) -> Iterator[str]:
    for raw in data.splitlines(keepends=True)[:MAX_LINES]:
        yield raw.decode("utf-8", "surrogateescape")


def _gcode(data: bytes) -> None:
    block_delete = bool(data[:1]) and data[0] & 1 == 1
    options = ParserOptions(block_delete=block_delete)
    state = ModalState(options=options, source=SOURCE)
    again = ModalState(options=options, source="emitted.nc")
    emitter = GcodeEmitter(DIALECTS["marlin"])
    for line_no, text in enumerate(_lines(data), 1):
        try:
            block = state.apply(text, line_no)
        except GcodeError as exc:
            check(exc.line_no == line_no, f"error names line {exc.line_no}, not {line_no}")
            expect_place(exc, f"{SOURCE}:{line_no}")
            continue
        _check_block(block, line_no)
        check(_finite(*state.position_mm), f"state position not finite after {text!r}")
        out = emitter.passthrough(block)
        if not out:  # a '%' tape mark or an empty line has no place in a numbered stream
            continue
        try:
            echo = again.apply(out, line_no)
        except GcodeError as exc:
            raise AssertionError(f"emitted {out!r} of {text!r} does not parse: {exc}") from None
        check(_same_move(block, echo), f"emitted {out!r} moves otherwise than {text!r}")


def seeds() -> Iterator[bytes]:
    """The G-code the repository holds: the fuzz program, the feedrate examples, test files."""
    from tests.fuzz.cases.gcode import PROGRAM

    yield "\n".join(PROGRAM).encode()
    for path in sorted(ROOT.glob("tests/**/*.nc")) + sorted(ROOT.glob("config/**/*.nc")):
        yield path.read_bytes()[:4096]


TARGET = Target("gcode", guarded(_gcode), seeds, doc=__doc__ or "")
