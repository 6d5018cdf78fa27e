"""Fuzz the G-code parser: programs of real lines, mutated word by word, through ModalState.

Near-valid input is a short program in the dialects the parser reads (G0-G3 with I/J/K or R,
G17-G19 planes, G20/G21, G90/G91, G93/G94, G4 dwell, N numbers, *NN checksums, comments, block
delete, % marks) with words replaced, numbers pushed to extremes, characters inserted; raw
garbage is mixed in. Property: every line yields a Block whose numbers are finite (positions,
length, feed, arc) or raises GcodeError naming the line; the state keeps going after an error.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from agent.feedrate.gcode.blocks import ParserOptions
from agent.feedrate.gcode.lex import GcodeError
from agent.feedrate.gcode.parser import ModalState
from tests.fuzz.cases.gcode import CASES, OVERFLOWS, gcode_case
from tests.fuzz.harness import Oracle, fuzz


@pytest.mark.parametrize("line", OVERFLOWS, ids=("axis", "feed", "dwell", "code", "huge-axis"))
def test_gcode_number_overflow_is_refused_with_its_place(line: str) -> None:
    state = ModalState(options=ParserOptions(), source="fuzz.nc")
    with pytest.raises(GcodeError, match=r"fuzz\.nc:3"):
        state.apply(line, 3)


def test_fuzz_gcode_lines() -> None:
    oracle = Oracle(
        "G-code lines",
        expected=(),
    )
    fuzz(oracle, st.tuples(CASES, st.booleans()), lambda case: gcode_case(case[0], oracle, case[1]))
