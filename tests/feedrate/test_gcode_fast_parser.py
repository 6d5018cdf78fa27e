"""The filter's fast parser (agent.feedrate.filter.fast) obeys the lexer's limits: numbers of at
most 32 characters, values of at most 1e9. Reproducers of the lines it used to take, and a
differential fuzz test: random lines (long numbers, huge values, comments, spaces, letter case,
frame changes) through FastModalState and ModalState give equal Blocks or the same error.
"""

from __future__ import annotations

import random
import re

import pytest

from agent.feedrate.filter.fast import FastModalState
from agent.feedrate.gcode.lex import MAX_NUMBER_CHARS, GcodeError
from agent.feedrate.gcode.parser import ModalState
from tests.support.summary import counted

LONG_31 = "1" * 31


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("G1 X2000000000 Y0 F100\n", "value of word X is 2000000000, expected magnitude <= 1e+09"),
        (f"G1 X{LONG_31} Y0 F100\n", "value of word X is 1111111111111111111111111111111"),
        ("G1 X" + "9" * 400 + " F100\n", "number of word X has 400 characters, expected at most"),
        ("G1 X1 Y-" + "0" * 40 + "1 F100\n", "number of word Y has 42 characters"),
        ("G1 X1 F5000000000\n", "value of word F is 5000000000"),
    ],
)
def test_fast_path_refuses_what_the_lexer_refuses(line: str, problem: str) -> None:
    with pytest.raises(GcodeError, match=re.escape(problem)) as fast:
        FastModalState().apply(line, 7)
    with pytest.raises(GcodeError) as slow:
        ModalState().apply(line, 7)
    assert str(fast.value) == str(slow.value)


def test_fast_path_takes_numbers_at_the_limits() -> None:
    at_limit = "1" + "0" * 9 + "." + "0" * (MAX_NUMBER_CHARS - 11)  # 1e9, 32 characters
    assert len(at_limit) == MAX_NUMBER_CHARS
    block = FastModalState().apply(f"G1 X{at_limit} F100\n", 1)
    assert block.end_mm == (1e9, 0.0, 0.0)


# ------------------------------------------------------------------------------- fuzzing


def _number(rng: random.Random, letter: str) -> str:
    kind = rng.randrange(10)
    if kind == 0:  # long: around the 32-character limit, or far over it
        digits = rng.choice([30, 31, 32, 33, 40, 320, 400])
        body = "".join(rng.choice("0123456789") for _ in range(digits))
        return rng.choice(["", "-", "+"]) + body
    if kind == 1:  # huge: around 1e9
        return rng.choice(["999999999", "1000000000", "1000000000.0", "1000000001", "2e9"])
    if kind == 2:  # long with a fraction, and leading zeros
        return "0" * rng.randrange(40) + "1." + "5" * rng.randrange(35)
    if kind == 3:
        return rng.choice(["1.", ".5", "-.25", "+3", "0", "1.2.3", ".", "-", "1e3", "00012"])
    if letter == "F":
        return f"{rng.uniform(0.0, 5000.0):.{rng.randrange(5)}f}"
    return f"{rng.uniform(-500.0, 500.0):.{rng.randrange(6)}f}"


_OTHER = (
    "G91",
    "G90",
    "G20",
    "G21",
    "G93",
    "G94",
    "G55",
    "G92 X0 Y0",
    "G43 H1",
    "G49",
    "G10 L2 P1 X5",
    "M3 S1000",
    "(comment)",
    "G4 P0.5",
    "",
    "N10 G1 X1",
    "G2 X10 Y0 I5 J0 F300",
)


def random_line(rng: random.Random) -> str:
    if rng.randrange(5) == 0:
        line = rng.choice(_OTHER)
    else:
        words = []
        motion = rng.choice(["", "G1", "G0", "G01", "G00", "G1", "G2"])
        if motion:
            words.append(motion)
        for letter in "XYZ":
            if rng.random() < 0.6:
                words.append(letter + _number(rng, letter))
        if rng.random() < 0.4:
            words.append("F" + _number(rng, "F"))
        sep = rng.choice([" ", " ", "", "  ", "\t"])
        line = sep.join(words)
    if rng.random() < 0.15:
        line = line.lower()
    if rng.random() < 0.15:
        line += rng.choice([" (a comment)", " ; note", "(x)", " "])
    if rng.random() < 0.1:
        line = " " + line
    return line + rng.choice(["\n", "\n", "\r\n", ""])


def test_fast_and_slow_parsers_agree_on_random_lines() -> None:
    tally = counted("fuzzing", "gcode fast vs slow parser")
    rng = random.Random(20240517)
    disagreements: list[str] = []
    for _ in range(300):
        slow, fast = ModalState(), FastModalState()
        for i in range(1, 31):
            line = random_line(rng)
            tally.case()
            try:
                expected = slow.apply(line, i)
            except GcodeError as exc:
                try:
                    fast.apply(line, i)
                except GcodeError as exc2:
                    if str(exc2) != str(exc):
                        disagreements.append(f"{line!r}: {exc2} != {exc}")
                        tally.crash(disagreements[-1])
                else:
                    disagreements.append(f"{line!r}: fast path took it, parser said {exc}")
                    tally.crash(disagreements[-1])
                continue  # a refused line leaves both states as they were
            got = fast.apply(line, i)
            if got != expected or fast.position_mm != slow.position_mm:
                disagreements.append(f"{line!r}: {got} != {expected}")
                tally.crash(disagreements[-1])
                break
    assert tally.cases > 1000
    assert disagreements == []
