"""G-code fuzz inputs (programs of real and mutated words and numbers) and the parser's
property; used by tests/fuzz/test_fuzz_gcode.py and tests/fuzz/atheris/gcode.py."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from agent.feedrate.gcode.blocks import ParserOptions
from agent.feedrate.gcode.lex import GcodeError, checksum
from agent.feedrate.gcode.parser import ModalState
from tests.fuzz.harness import Oracle

PROGRAM = (
    "%",
    "(fuzz seed program)",
    "G21 G90 G17 G94",
    "N10 G0 X0 Y0 Z5",
    "N20 G1 Z-1 F300",
    "G1 X10 Y0 F1200 ; line",
    "G2 X20 Y0 I5 J0",
    "G3 X10 Y0 R5",
    "G91 G1 X-5 Y5",
    "G90",
    "G18 G2 X0 Z0 I-5 K0",
    "G17",
    "/G1 X1 Y1",
    "G4 P0.5",
    "G93 G1 X5 Y5 F30",
    "G94 F600",
    "G20 G1 X1 Y1",
    "G21",
    "M3 S12000 T1",
    "G1 X0 Y0*71",
    "M30",
    "%",
)


WORDS = (
    "X",
    "Y",
    "Z",
    "I",
    "J",
    "K",
    "R",
    "F",
    "S",
    "T",
    "P",
    "N",
    "G",
    "M",
    "E",
    "Q",
    "G0",
    "G1",
    "G2",
    "G3",
    "G4",
    "G17",
    "G18",
    "G19",
    "G20",
    "G21",
    "G28",
    "G61.1",
    "G90",
    "G91",
    "G93",
    "G94",
    "M2",
    "M30",
)


NUMBERS = (
    "0",
    "-0",
    "1",
    "-1",
    ".5",
    "5.",
    "1e3",
    "1E-3",
    "1e308",
    "-1e308",
    "9" * 320,
    "0.000001",
    "+1",
    "--1",
    "1.2.3",
    "nan",
    "inf",
    "",
    "1_0",
    "٣",
    "  7",
    "0x10",
)


NOISE = ("(", ")", ";", "*", "*256", "/", "%", "N", " ", "\t", "\r", "\x00", "é", "\ufeff", "**")


@st.composite
def programs(draw: st.DrawFn) -> list[str]:
    start = draw(st.integers(0, len(PROGRAM) - 1))
    lines = list(PROGRAM[start : start + draw(st.integers(1, 12))])
    for _ in range(draw(st.integers(1, 5))):
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        op = draw(st.sampled_from(("word", "number", "noise", "dup", "case", "checksum")))
        pos = draw(st.integers(0, len(line)))
        if op == "word":
            word = draw(st.sampled_from(WORDS)) + draw(st.sampled_from(NUMBERS))
            lines[i] = f"{line[:pos]} {word} {line[pos:]}"
        elif op == "number":
            lines[i] = line[:pos] + draw(st.sampled_from(NUMBERS)) + line[pos:]
        elif op == "noise":
            lines[i] = line[:pos] + draw(st.sampled_from(NOISE) | st.text(max_size=4)) + line[pos:]
        elif op == "dup":
            lines.insert(i, line)
        elif op == "case":
            lines[i] = line.lower()
        else:
            base = line.split("*")[0]
            lines[i] = f"{base}*{checksum(base)}"
    return lines


CASES = st.one_of(
    programs(),
    programs(),
    programs(),
    st.lists(st.text(max_size=60), min_size=1, max_size=4),
)


def _finite(*xs: object) -> bool:
    return all(x is None or math.isfinite(float(x)) for x in xs)  # type: ignore[arg-type]


def gcode_case(lines: list[str], oracle: Oracle, block_delete: bool) -> None:
    state = ModalState(options=ParserOptions(block_delete=block_delete), source="fuzz.nc")
    for line_no, text in enumerate(lines, 1):
        try:
            block = state.apply(text, line_no)
        except GcodeError as exc:
            oracle.check(exc.line_no == line_no, f"error names line {exc.line_no}, not {line_no}")
            oracle.check(f"fuzz.nc:{line_no}" in str(exc), f"error without its place: {exc}")
            continue
        oracle.check(block.line_no == line_no, "block of another line")
        oracle.check(_finite(*block.start_mm, *block.end_mm), f"position not finite: {text!r}")
        oracle.check(
            _finite(block.length_mm, block.feed_mm_s, block.dwell_s), f"not finite: {text!r}"
        )
        oracle.check(block.length_mm >= 0, f"negative length: {text!r}")
        # A zero-length G93 move takes 60/F seconds to go nowhere: its derived feed is 0.
        oracle.check(
            block.feed_mm_s is None or block.feed_mm_s > 0 or block.length_mm == 0,
            f"feed <= 0 on a move: {text!r}",
        )
        if block.arc is not None:
            a = block.arc
            oracle.check(_finite(*a.centre, a.radius, a.sweep_rad), f"arc not finite: {text!r}")
        duration = block.duration_s
        oracle.check(
            duration is None or (math.isfinite(duration) and duration >= 0),
            f"duration {duration!r} not finite or negative: {text!r}",
        )
        block.to_dict()
        oracle.check(_finite(*state.position_mm), f"state position not finite after {text!r}")


# Found by this fuzzer: a number word of more than 308 digits read as float('inf') and the line
# was accepted with an infinite end point, feed or dwell (e.g. `G1 X999...9 F1200` ended at
# X=inf). Now refused with the line's place; the minimal inputs stay as regressions.
HUGE = "9" * 400


OVERFLOWS = (f"G1 X{HUGE} F100", f"G1 X1 F{HUGE}", f"G4 P{HUGE}", f"G{HUGE}", "G1 X2e9 F100")
