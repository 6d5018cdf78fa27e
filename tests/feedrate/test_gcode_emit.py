"""G-code output: bytes passed through unchanged, renumbering and checksums per dialect,
number formats, blocks replaced by segments, G91 rounding carried, and a 200,000-line
pass-through in constant memory."""

from __future__ import annotations

import gc
import io
import math
import os
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.feedrate.gcode.blocks import Block, FeedMode, Motion
from agent.feedrate.gcode.dialect import (
    DIALECTS,
    Dialect,
    format_number,
    format_significant,
    validate_output_line,
)
from agent.feedrate.gcode.emit import GcodeEmitter, insert_motion_word
from agent.feedrate.gcode.lex import GcodeError, checksum, lex_line, strip_number_and_checksum
from agent.feedrate.gcode.parser import encode_line, parse_lines, read_lines
from tests.support.feedrate.gcode import parse

# -- text and bytes preserved ---------------------------------------------------------------------

SAMPLE = (
    "%\r\n"
    "(Part 42, op 1)\r\n"
    "N10 G21 G90 G17 G94\r\n"
    "N20 g0 x0 y0 ; go home\r\n"
    "N30 G1 X10.000 Y0 F600*91\r\n"
    "\r\n"
    "N40 G2 X20 Y0 I5 J0 (arc)\r\n"
    "/N50 M8\r\n"
    "N60 X30 Y0 I5 J0\r\n"
    "M30\r\n"
    "%"
)


def sample_with_valid_checksum() -> str:
    line = "N30 G1 X10.000 Y0 F600"
    return SAMPLE.replace("N30 G1 X10.000 Y0 F600*91", f"{line}*{checksum(line)}")


def test_passthrough_is_byte_identical() -> None:
    text = sample_with_valid_checksum()
    em = GcodeEmitter("grbl")
    out = "".join(em.passthrough(b) for b in parse(text)) + em.flush()
    assert out == text


def test_bytes_that_are_not_utf8_survive() -> None:
    raw = b"G21 (caf\xe9 \xff)\nG0 X1\n"
    lines = list(read_lines(io.BytesIO(raw)))
    blocks = list(parse_lines(lines))
    em = GcodeEmitter()
    assert b"".join(encode_line(em.passthrough(b)) for b in blocks) == raw


def test_renumbering_with_checksums_for_marlin() -> None:
    em = GcodeEmitter("marlin")
    out = "".join(em.passthrough(b) for b in parse(sample_with_valid_checksum()))
    lines = out.splitlines()
    assert lines[0] == f"N1 G21 G90 G17 G94*{checksum('N1 G21 G90 G17 G94')}"
    assert [lex_line(s, i).line_number for i, s in enumerate(lines, 1)] == list(range(1, 8))
    for i, s in enumerate(lines, 1):
        validate_output_line(s, "marlin", i)  # checksum verified by the lexer
    assert lines[4].startswith("/N5 M8*")
    assert all("(" not in s and ";" not in s for s in lines)


def test_strip_and_insert_keep_the_rest_of_the_line() -> None:
    assert strip_number_and_checksum("N120 G1 X1 (c) *33\n") == "G1 X1"
    assert strip_number_and_checksum("/ N5 G0 X1") == "/G0 X1"
    assert insert_motion_word("N7 X1 Y2\r\n", Motion.CW) == "N7 G2 X1 Y2\r\n"
    assert insert_motion_word("X1 Y2 I1", Motion.CCW) == "G3 X1 Y2 I1"
    line = "N8 X1 Y1"
    rewritten = insert_motion_word(f"{line}*{checksum(line)} ;c\n", Motion.CW)
    assert rewritten == f"N8 G2 X1 Y1*{checksum('N8 G2 X1 Y1')} ;c\n"
    assert lex_line(rewritten, 1).g == (20,)


# -- emitter --------------------------------------------------------------------------------------


def test_number_formats() -> None:
    assert format_number(10.0, 3) == "10"
    assert format_number(-0.00001, 3) == "0"
    assert format_number(1.23456, 3) == "1.235"
    assert format_number(-2.5, 0) == "-2"  # round half to even, as Python formats
    assert format_significant(1234.5678, 6) == "1234.57"
    assert format_significant(0.000123456789, 6) == "0.000123457"
    assert format_significant(0.0, 6) == "0"


def _replace_evenly(em: GcodeEmitter, block: Block, n: int, **rates: float) -> str:
    prim = block.primitive()
    assert prim is not None
    pts = [prim.point(prim.length * k / n) for k in range(1, n + 1)]
    kw = {key: [value] * n for key, value in rates.items()}
    return em.replace(block, pts, **kw)  # type: ignore[arg-type]


def test_replace_writes_g1_segments_and_restores_the_modal_feed() -> None:
    blocks = parse("G21 G90 G94\nG1 X0 Y0 F600\nG1 X10 Y0 M8\nX20\n")
    em = GcodeEmitter("grbl")
    out = em.passthrough(blocks[0]) + em.passthrough(blocks[1])
    out += _replace_evenly(em, blocks[2], 4, feeds_mm_s=2.0)
    out += em.passthrough(blocks[3])
    assert out.splitlines()[2:] == [
        "M8",
        "G1 X2.5 F120",
        "G1 X5 F120",
        "G1 X7.5 F120",
        "G1 X10 F120",
        "F600",
        "X20",
    ]


def test_replace_in_inverse_time_has_exact_durations_and_restores_g94() -> None:
    blocks = parse("G21 G91 G1 F300\nX10 Y10\nG0 X5\n")
    em = GcodeEmitter("linuxcnc", inverse_time=True)
    out = em.passthrough(blocks[0]) + _replace_evenly(em, blocks[1], 3, durations_s=0.7)
    out += em.passthrough(blocks[2])
    lines = out.splitlines()
    assert lines[1].startswith("G93 G1 ") and "G93" not in lines[2]
    assert lines[4] == "G94 F300"
    reparsed = parse(out)
    segs = [b for b in reparsed if b.motion is Motion.LINEAR]
    assert [b.duration_s for b in segs] == pytest.approx([0.7] * 3, rel=1e-6)
    assert reparsed[-1].end_mm == pytest.approx((15.0, 10.0, 0.0), abs=1e-4)
    assert reparsed[-1].modal.feed_mode is FeedMode.UNITS_PER_MIN
    assert reparsed[-1].modal.feed_mm_s == pytest.approx(5.0)


def test_replaced_arc_in_modal_g2_gets_its_motion_word_back() -> None:
    blocks = parse("G0 X0 Y0\nG2 X10 Y0 I5 J0 F600\nX20 Y0 I5 J0\n")
    em = GcodeEmitter()
    out = em.passthrough(blocks[0]) + _replace_evenly(em, blocks[1], 8, feeds_mm_s=5.0)
    out += em.passthrough(blocks[2])
    assert out.splitlines()[-2:] == ["F600", "G2 X20 Y0 I5 J0"]
    assert parse(out)[-1].arc is not None


def test_consecutive_replacements_words_before_and_after_and_rapid_mode() -> None:
    blocks = parse("G1 F100\nG0 X10 M5\nG1 X20 M30\n")
    em = GcodeEmitter()
    out = em.passthrough(blocks[0]) + _replace_evenly(em, blocks[1], 2, feeds_mm_s=50.0)
    out += _replace_evenly(em, blocks[2], 1, feeds_mm_s=50.0) + em.flush()
    assert out.splitlines()[1:] == [
        "M5",  # spindle words before the motion ...
        "G1 X5 F3000",
        "G1 X10 F3000",
        "G1 X20 F3000",
        "M30",  # ... program stops after it
        "F100",
    ]
    assert em.flush() == ""
    rapid = parse("G1 F100\nG0 X10\n")
    em = GcodeEmitter()
    em.replace(rapid[1], [(10.0, 0.0, 0.0)], feeds_mm_s=[5.0])
    assert em.flush() == "F100 G0\n"


def test_zero_length_segment_with_a_duration_is_a_dwell() -> None:
    blocks = parse("G1 X0 F100\nX10\n")
    em = GcodeEmitter()
    pts = [(5.0, 0.0, 0.0), (5.0, 0.0, 0.0), (10.0, 0.0, 0.0)]
    out = em.replace(blocks[1], pts, durations_s=[1.0, 0.25, 1.0])
    assert out.splitlines() == ["G1 X5 F300", "G4 P0.25", "G1 X10 F300"]


def test_g91_rounding_is_carried_not_accumulated() -> None:
    text = "G91 G1 F600\n" + "X0.33333\n" * 30
    blocks = parse(text)
    em = GcodeEmitter(Dialect("coarse", decimals=2))
    out = em.passthrough(blocks[0])
    for b in blocks[1:]:
        out += _replace_evenly(em, b, 3, feeds_mm_s=10.0)
    end = parse(out)[-1].end_mm[0]
    assert end == pytest.approx(30 * 0.33333, abs=0.005)  # within half a unit, after 90 segments


def test_an_absolute_end_point_s_rounding_is_owed_to_the_g91_moves_after_it() -> None:
    # Found by the random-program test: a replaced absolute move ends at its rounded end point
    # (X0.67 for X0.66666), and when the program then goes G91 that rounding must be carried
    # into the next increment, not added to its own (X0.34 would end 0.00668 off).
    blocks = parse("G21 G90 G1 F600\nX0.66666\nG91\nX0.33666\n")
    em = GcodeEmitter(Dialect("coarse", decimals=2))
    out = em.passthrough(blocks[0]) + _replace_evenly(em, blocks[1], 1, feeds_mm_s=10.0)
    out += em.passthrough(blocks[2]) + _replace_evenly(em, blocks[3], 1, feeds_mm_s=10.0)
    assert "X0.67" in out and "X0.33 " in out
    assert parse(out)[-1].end_mm[0] == pytest.approx(1.00332, abs=0.005)


@st.composite
def _incremental_programs(draw: st.DrawFn) -> tuple[int, list[tuple[float, float]], list[object]]:
    """(decimals, the program's G91 increments (mm, 4 decimals, many below the printed
    resolution), per move: None to pass it through or the sorted fractions of its length at
    which the replacement's segments end, repeats giving zero-length segments)."""
    decimals = draw(st.sampled_from([1, 2, 3]))
    step = st.integers(-300, 300).map(lambda k: k / 10_000.0)
    moves = draw(st.lists(st.tuples(step, step), min_size=1, max_size=25))
    cuts: list[object] = []
    for _ in moves:
        if draw(st.booleans()) and draw(st.booleans()):
            cuts.append(None)
            continue
        inner = draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.5, 0.9, 1.0]), max_size=6))
        cuts.append([*sorted(inner), 1.0])
    return decimals, moves, cuts


@settings(max_examples=200, deadline=None)
@given(_incremental_programs())
def test_g91_emitted_increments_sum_to_the_exact_end_point(
    case: tuple[int, list[tuple[float, float]], list[object]],
) -> None:
    decimals, moves, cuts = case
    text = "G21 G91 G1 F600\n" + "".join(f"X{dx:.4f} Y{dy:.4f}\n" for dx, dy in moves)
    blocks = parse(text)
    em = GcodeEmitter(Dialect("coarse", decimals=decimals))
    out = em.passthrough(blocks[0])
    for block, cut in zip(blocks[1:], cuts, strict=True):
        if cut is None:
            out += em.passthrough(block)
            continue
        s, e = block.start_mm, block.end_mm
        fractions = list(cut)  # type: ignore[call-overload]
        pts = [tuple(a + f * (b - a) for a, b in zip(s, e, strict=True)) for f in fractions]
        out += em.replace(block, pts, feeds_mm_s=[10.0] * len(pts))  # type: ignore[arg-type]
    out += em.flush()
    total = [0.0, 0.0]
    for n, line in enumerate(out.splitlines(), 1):
        values = lex_line(line, n).values
        for i, letter in enumerate("XY"):
            total[i] += values.get(letter, 0.0)
    exact = [sum(m[i] for m in moves) for i in range(2)]
    # The carry keeps every axis within half a unit of the last printed digit of the program.
    half_unit = 0.5 * 10.0**-decimals
    for i in range(2):
        assert abs(total[i] - exact[i]) <= half_unit + 1e-9, (i, total, exact, out)


def test_replace_rejects_bad_requests() -> None:
    blocks = parse("G1 X0 F100\nX10\nM5\n")
    em = GcodeEmitter()
    with pytest.raises(ValueError, match="makes no move"):
        em.replace(blocks[2], [(0.0, 0.0, 0.0)], feeds_mm_s=[1.0])
    with pytest.raises(ValueError, match="exactly one"):
        em.replace(blocks[1], [(10.0, 0.0, 0.0)])
    with pytest.raises(ValueError, match="not the block's end"):
        em.replace(blocks[1], [(9.0, 0.0, 0.0)], feeds_mm_s=[1.0])
    with pytest.raises(ValueError, match="> 0"):
        em.replace(blocks[1], [(10.0, 0.0, 0.0)], feeds_mm_s=[0.0])
    with pytest.raises(ValueError, match="no G93"):
        GcodeEmitter("marlin", inverse_time=True)


def test_validate_output_line_per_dialect() -> None:
    validate_output_line("G93 G1 X1 F10", "grbl")
    with pytest.raises(GcodeError, match="G93 not accepted by marlin"):
        validate_output_line("N1 G93", Dialect("marlin", inverse_time=False))
    with pytest.raises(GcodeError, match="79"):  # a line of valid words, too long
        validate_output_line("G1 X1 Y2 Z3 (" + "c" * 70 + ")", "grbl")
    with pytest.raises(GcodeError, match="line number N missing"):
        validate_output_line("G1 X1", "marlin")
    with pytest.raises(GcodeError, match="checksum missing"):
        validate_output_line("N1 G1 X1", "marlin")
    assert set(DIALECTS) >= {"grbl", "linuxcnc", "marlin", "generic"}


# -- streaming in constant memory -----------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_streaming_200k_lines_in_constant_memory() -> None:
    def program(n: int) -> Iterator[str]:
        yield "G21 G90 G94 F1200\n"
        for i in range(n):
            a = i * 1e-3
            if i % 10 == 0:
                yield f"G3 X{10 * math.cos(a):.4f} Y{10 * math.sin(a):.4f} R10\n"
            else:
                yield f"G1 X{10 * math.cos(a):.4f} Y{10 * math.sin(a):.4f} ; step {i}\n"

    em = GcodeEmitter()
    count = written = 0
    rss0 = objects0 = 0
    for block in parse_lines(program(200_000)):
        written += len(em.passthrough(block))
        count += 1
        if count == 20_000:
            gc.collect()
            rss0, objects0 = _rss_bytes(), len(gc.get_objects())
    gc.collect()
    assert count == 200_001 and written > 200_000 * 20
    # Nothing is kept per line: the number of live objects and the resident size stay flat
    # over the last 180,000 lines (keeping them would cost > 50 MB and 180,000 objects).
    assert len(gc.get_objects()) - objects0 < 1000
    assert _rss_bytes() - rss0 < 4 * 2**20
