"""G-code I/O: lexer, modal state machine, emitter, dialects, streaming in constant memory."""

from __future__ import annotations

import gc
import io
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.errors import EX_DATAERR, AgentError
from agent.feedrate.gcode.blocks import (
    PLANE_OFFSETS,
    Block,
    DistanceMode,
    FeedMode,
    Modal,
    Motion,
    ParserOptions,
    Units,
)
from agent.feedrate.gcode.dialect import (
    DIALECTS,
    Dialect,
    format_number,
    format_significant,
    validate_output_line,
)
from agent.feedrate.gcode.emit import GcodeEmitter, canonical_lines, insert_motion_word
from agent.feedrate.gcode.lex import GcodeError, checksum, lex_line, strip_number_and_checksum
from agent.feedrate.gcode.parser import ModalState, encode_line, parse_lines, read_lines
from agent.feedrate.geometry.primitives import Plane
from agent.feedrate.geometry.turning_points import TurningPointTracker


def parse(text: str, **kwargs: object) -> list[Block]:
    return list(parse_lines(text.splitlines(keepends=True), ModalState(**kwargs)))  # type: ignore[arg-type]


def moves(text: str) -> list[Block]:
    return [b for b in parse(text) if b.motion is not None]


def close(p: tuple[float, ...], q: tuple[float, ...], tol: float = 1e-9) -> bool:
    return math.dist(p, q) <= tol


def error_of(text: str, **kwargs: object) -> GcodeError:
    with pytest.raises(GcodeError) as info:
        parse(text, **kwargs)
    return info.value


# -- lexer --------------------------------------------------------------------------------------


def test_lexer_words_comments_case_and_spaces() -> None:
    lx = lex_line("n12 g 1 x-1 0.5 (a (comment) y+.25 ;rest X9\r\n", 3)
    assert lx.line_number == 12
    assert lx.g == (10,)
    assert lx.values == {"X": -10.5, "Y": 0.25}  # the first ')' closes the comment
    lx = lex_line("G1X1.Y-.5Z+2F100", 1)
    assert lx.values == {"X": 1.0, "Y": -0.5, "Z": 2.0, "F": 100.0}
    assert lex_line("G61.1 G01 M3 M8", 1).g == (611, 10)
    assert lex_line("G61.1 G01 M3 M8", 1).m == (30, 80)
    assert lex_line("   ", 1).values == {} and lex_line("(only a comment)", 1).g == ()
    assert lex_line("%", 1).tape_mark


def test_reprap_checksum_verify_and_report() -> None:
    # The example of the RepRap G-code wiki: "N3 T0*57".
    assert checksum("N3 T0") == 57
    assert lex_line("N3 T0*57\n", 1).checksum == 57
    assert lex_line("N3 T0*57 ; comment after the checksum", 1).checksum == 57
    err = error_of("N3 T0*12\n")
    assert err.problem == "bad checksum *12, expected *57"
    assert err.line_no == 1 and "N3 T0*12" in str(err)
    assert "not a number" in error_of("G1 X1*x").problem
    assert "comment after the checksum" in error_of("G1 X1*5 (c)").problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("G1 Q5", "unknown word Q"),
        ("G0 X1 E5", "unknown word E"),
        ("G2 F100", "G2 without I/J/K or R"),
        ("G1 F100\nG2 X10 Y0", "G2 without I/J/K or R"),
        ("G1 F100\nG3 X10 Y0 I1 J0", "arc radius mismatch start/end"),
        ("G0 G1 X1", "two motion codes in one line (G0 and G1)"),
        ("G20 G21", "two units codes in one line"),
        ("G1 X1 X2", "word X given twice"),
        ("G1 X", "expected a number after 'X'"),
        ("G1 X1 (open", "'(' comment not closed"),
        ("G1 X1 )", "')' without '('"),
        ("G28", "unsupported G code G28"),
        ("G38.2 Z-5", "unsupported G code G38.2"),
        ("G1.55", "bad code G1.55"),
        ("G1 N10 X1", "line number N must start the line"),
        ("N1.5 G1", "line number N1.5 is not an integer"),
        ("X1", "axis words without a motion mode"),
        ("G1 X1", "feed move without a feed rate"),
        ("G1 X1 F0", "feed rate is zero"),
        ("G1 X1 F-5", "negative feed rate"),
        ("G93 G1 X1", "inverse-time (G93) move without a positive F"),
        ("G1 F100\nG93\nG94 G1 X1", "feed move without a feed rate"),
        ("G0 X1 I1", "I without G2/G3"),
        ("G17 G2 X1 K1", "K word not allowed in a G17 arc"),
        ("G19 G2 Y1 I1", "I word not allowed in a G19 arc"),
        ("G2 X1 Y1 R1 I1 F1", "arc with both R and I/J/K"),
        ("G2 X10 Y0 R2 F1", "shorter than half the chord"),
        ("G2 R2 F1", "needs an end point different from the start"),
        ("G4", "G4 without a dwell time"),
        ("G0 X1 P2", "P word without G4"),
        ("T1.5", "not a whole number"),
        ("M3 S-1", "negative spindle speed"),
        ("G1 X1 / Y2", "block delete '/' must start the line"),
        ("G1 X1 #2", "expected a letter and a number"),
        ("G1 X1 é", "non-ASCII character"),
        ("% G1", "text after the '%' tape mark"),
        ("$H", "expected a letter and a number"),
    ],
)
def test_errors_name_line_text_and_problem(text: str, problem: str) -> None:
    err = error_of(text)
    assert problem in err.problem
    assert isinstance(err, AgentError) and err.exit_code == EX_DATAERR == 65
    last = text.splitlines()[-1]
    assert err.line_no == len(text.splitlines()) and err.text == last
    assert f"line {err.line_no}:" in str(err) and repr(last)[1:-1][:20] in str(err)


def test_error_names_the_source_and_truncates_long_lines() -> None:
    st_ = ModalState(source="part.nc")
    with pytest.raises(GcodeError, match=r"^part\.nc:7: number of word Q has 200 characters"):
        st_.apply("G0 Q" + "1" * 200, 7)
    with pytest.raises(GcodeError) as info:
        st_.apply("G0 Q" + "1" * 200, 7)
    assert len(str(info.value)) < 160


# -- modal state machine --------------------------------------------------------------------------


def test_units_distance_and_feed_modes() -> None:
    blocks = moves(
        "G21 G90 G94 F600\n"
        "G1 X10 Y5\n"  # 10 mm/s
        "G91 X1 Y-1\n"
        "G20 X1 F60\n"  # 1 inch at 60 in/min = 25.4 mm/s
        "G90 G0 X0 Y0\n"
        "G93 G1 X1 F30\n"  # 2 s for the move
        "G1 Y1 F6\n"
        "G94 G21 G1 X0 F1200\n"
    )
    assert [b.end_mm for b in blocks] == [
        (10.0, 5.0, 0.0),
        (11.0, 4.0, 0.0),
        (36.4, 4.0, 0.0),
        (0.0, 0.0, 0.0),
        (25.4, 0.0, 0.0),
        (25.4, 25.4, 0.0),
        (0.0, 25.4, 0.0),
    ]
    assert blocks[0].feed_mm_s == pytest.approx(10.0)
    assert blocks[2].feed_mm_s == pytest.approx(25.4)
    assert (
        blocks[2].modal.units is Units.INCH and blocks[2].modal.distance is DistanceMode.INCREMENTAL
    )
    assert blocks[3].motion is Motion.RAPID and blocks[3].feed_mm_s is None
    assert blocks[3].duration_s is None
    assert blocks[4].inverse_time_f == 30.0 and blocks[4].duration_s == pytest.approx(2.0)
    assert blocks[4].feed_mm_s == pytest.approx(25.4 / 2.0)
    assert blocks[4].modal.feed_mode is FeedMode.INVERSE_TIME and blocks[4].modal.feed_mm_s is None
    assert blocks[5].duration_s == pytest.approx(10.0)
    assert blocks[6].feed_mm_s == pytest.approx(20.0)
    assert blocks[6].duration_s == pytest.approx(25.4 / 20.0)


def test_feed_is_read_in_the_units_of_its_own_line() -> None:
    (b,) = moves("G21\nG20 G1 X1 F10\n")
    assert b.feed_mm_s == pytest.approx(10 * 25.4 / 60)
    # ... and keeps its value in mm/s when the units change later (GRBL).
    b2 = moves("G20 G1 X1 F10\nG21 X2\n")[1]
    assert b2.feed_mm_s == pytest.approx(10 * 25.4 / 60)


def test_modal_motion_explicit_flag_and_non_moves() -> None:
    blocks = parse("G1 F100\nX5\nG1\nS1000 M3\nG4 P0.5\nM5\n")
    assert blocks[1].motion is Motion.LINEAR and not blocks[1].explicit_motion
    assert blocks[2].motion is None and blocks[2].explicit_motion
    assert blocks[3].motion is None and blocks[3].end_mm == (5.0, 0.0, 0.0)
    assert blocks[4].dwell_s == 0.5


def test_program_end_resets_modes() -> None:
    st_ = ModalState()
    for i, line in enumerate(["G91 G18 G93 G0 X1", "M30"], 1):
        st_.apply(line, i)
    assert st_.modal == Modal(Units.MM, DistanceMode.ABSOLUTE, Plane.XY, Motion.LINEAR)


def test_work_offsets_and_path_modes_pass() -> None:
    blocks = parse("G54 G64 G61.1\nG55 G0 X1\n")
    assert blocks[1].motion is Motion.RAPID


def test_block_delete_switch() -> None:
    text = "G0 X1\n/G0 X5\nG0 Y1\n"
    assert [b.end_mm for b in parse(text)] == [(1, 0, 0), (5, 0, 0), (5, 1, 0)]
    skipping = parse(text, options=ParserOptions(block_delete=True))
    assert [b.end_mm for b in skipping] == [(1, 0, 0), (1, 0, 0), (1, 1, 0)]
    assert skipping[1].skipped and skipping[1].motion is None


def test_initial_state_and_streaming_positions() -> None:
    st_ = ModalState(position_mm=(1.0, 2.0, 3.0), modal=Modal(motion=Motion.LINEAR, feed_mm_s=5.0))
    b = st_.apply("X4", 1)
    assert b.start_mm == (1.0, 2.0, 3.0) and b.end_mm == (4.0, 2.0, 3.0)
    assert b.length_mm == 3.0 and b.duration_s == pytest.approx(0.6)
    assert st_.position_mm == (4.0, 2.0, 3.0) and st_.feed_mm_s == 5.0
    assert st_.units is Units.MM and st_.plane is Plane.XY and st_.motion is Motion.LINEAR
    assert st_.distance is DistanceMode.ABSOLUTE and st_.feed_mode is FeedMode.UNITS_PER_MIN


# -- arcs in all three planes ---------------------------------------------------------------------

# A quarter circle of radius 10 about the origin, from the plane's first axis to its second
# (counter-clockwise) or to minus its second (clockwise), in the plane's own words.
PLANE_CASES = [
    (17, "X10 Y0", "I-10 J0", "X0 Y{b}", Plane.XY),
    (18, "Z10 X0", "K-10 I0", "Z0 X{b}", Plane.ZX),
    (19, "Y10 Z0", "J-10 K0", "Y0 Z{b}", Plane.YZ),
]


@pytest.mark.parametrize(("g", "start", "offsets", "end", "plane"), PLANE_CASES)
@pytest.mark.parametrize("code", [2, 3])
@pytest.mark.parametrize("form", ["ijk", "r"])
def test_quarter_arcs_in_every_plane(
    g: int, start: str, offsets: str, end: str, plane: Plane, code: int, form: str
) -> None:
    b_end = -10 if code == 2 else 10
    centre_words = offsets if form == "ijk" else "R10"
    text = f"G{g} G0 {start}\nG{code} {end.format(b=b_end)} {centre_words} F600\n"
    arc_block = moves(text)[1]
    arc = arc_block.arc
    assert arc is not None and arc.plane is plane
    assert arc_block.clockwise is (code == 2)
    assert arc.radius == pytest.approx(10.0) and arc.sweep_rad == pytest.approx(math.pi / 2)
    assert close(arc_block.centre_mm or (1.0, 1.0, 1.0), (0.0, 0.0, 0.0), 1e-9)
    assert arc_block.length_mm == pytest.approx(5 * math.pi)
    assert arc_block.duration_s == pytest.approx(5 * math.pi / 10)
    # Half way along, the point is at 45 degrees in the plane, signed by the direction.
    ia, ib, _ = plane.value
    mid = arc.point(arc.length / 2)
    assert mid[ia] == pytest.approx(10 / math.sqrt(2))
    assert mid[ib] == pytest.approx(math.copysign(10 / math.sqrt(2), b_end))


def test_major_arc_with_negative_r_full_circle_and_helix() -> None:
    blocks = moves(
        "G17 G0 X10 Y0\n"
        "G3 X0 Y10 R-10 F600\n"  # the 270 degree way round
        "G2 I-10 J0\n"  # full circle, no axis words
        "G3 X-10 Y20 Z5 I-10 J0\n"  # helical quarter
    )
    assert blocks[1].arc is not None and blocks[1].arc.sweep_rad == pytest.approx(1.5 * math.pi)
    assert close(blocks[1].centre_mm or (9.0, 9.0, 9.0), (10.0, 10.0, 0.0), 1e-9)
    assert blocks[2].arc is not None and blocks[2].arc.sweep_rad == pytest.approx(2 * math.pi)
    assert blocks[2].end_mm == blocks[2].start_mm
    helix = blocks[3]
    assert helix.length_mm == pytest.approx(math.hypot(5 * math.pi, 5))
    assert helix.end_mm == (-10.0, 20.0, 5.0)


def test_arc_within_tolerance_is_accepted() -> None:
    # End radius 10.004 vs 10: inside GRBL's 0.005 mm.
    (_, arc) = moves("G0 X10\nG3 X0 Y10.004 I-10 J0 F60\n")
    assert arc.arc is not None and arc.arc.end_radius == pytest.approx(10.004)
    err = error_of("G0 X10\nG3 X0 Y10.05 I-10 J0 F60\n")
    assert err.problem == "arc radius mismatch start/end: 10.0000 vs 10.0500 mm"
    loose = ParserOptions(arc_tolerance_mm=0.1)
    assert len(parse("G0 X10\nG3 X0 Y10.05 I-10 J0 F60\n", options=loose)) == 2


def test_block_to_dict_is_json_ready() -> None:
    import json

    (_, arc) = moves("G0 X10\nG3 X0 Y10 I-10 J0 F60\n")
    d = arc.to_dict()
    json.dumps(d)
    assert d["motion"] == "CCW" and d["arc"]["radius_mm"] == pytest.approx(10.0)
    assert d["modal"]["plane"] == "XY"


def test_turning_points_of_a_streamed_circle_test() -> None:
    """Blocks give the geometry primitives the turning-point tracker consumes, line by line."""
    text = "G21 G90 G17 F600\nG0 X10 Y-5\nG1 X10 Y0\nG3 X10 Y0 I-10 J0\nG1 X10 Y5\n"
    tracker = TurningPointTracker()
    found = []
    for block in parse_lines(text.splitlines(keepends=True)):
        prim = block.primitive()
        if prim is not None:
            found += [(tp.axes, tp.kind, block.line_no) for tp in tracker.feed(prim)]
    assert found == [
        (("Y",), "vertex", 3),  # the rapid went down, the feed goes up
        (("X",), "vertex", 4),  # the circle starts on its X quadrant point
        (("Y",), "quadrant", 4),
        (("X",), "quadrant", 4),
        (("Y",), "quadrant", 4),
    ]


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
    with pytest.raises(GcodeError, match="longer than 79"):
        validate_output_line("G1 X" + "1" * 80, "grbl")
    with pytest.raises(GcodeError, match="line number N missing"):
        validate_output_line("G1 X1", "marlin")
    with pytest.raises(GcodeError, match="checksum missing"):
        validate_output_line("N1 G1 X1", "marlin")
    assert set(DIALECTS) >= {"grbl", "linuxcnc", "marlin", "generic"}


# -- random programs ------------------------------------------------------------------------------


@dataclass
class _Gen:
    """The generator's own model of the program it writes (what the parser should find)."""

    units: Units = Units.MM
    distance: DistanceMode = DistanceMode.ABSOLUTE
    plane: Plane = Plane.XY
    inverse: bool = False
    feed_defined: bool = True
    pos: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    lines: list[str] = field(default_factory=list)


def _coord_words(g: _Gen, target: list[float], axes: list[int]) -> str:
    scale = g.units.mm_per_unit
    words = []
    for i in axes:
        value = target[i] if g.distance is DistanceMode.ABSOLUTE else target[i] - g.pos[i]
        text = f"{value / scale:.6f}"
        words.append("XYZ"[i] + text)
        parsed = float(text) * scale
        g.pos[i] = parsed if g.distance is DistanceMode.ABSOLUTE else g.pos[i] + parsed
    return " ".join(words)


@st.composite
def _decorate(draw: st.DrawFn, code: str) -> str:
    """Case, spacing, line number, comments, checksum and line end, all at random."""
    style = draw(st.sampled_from(["plain", "lower", "tight", "wide"]))
    text = {"plain": code, "lower": code.lower(), "tight": code.replace(" ", ""),
            "wide": code.replace(" ", " \t ")}[style]  # fmt: skip
    if draw(st.booleans()):
        text = f"N{draw(st.integers(0, 99999))} {text}"
    text += draw(st.sampled_from(["", " (note)", "(x)"]))
    if draw(st.booleans()):
        text = f"{text}*{checksum(text)}"
    text += draw(st.sampled_from(["", " ; tail X9 *"]))
    return text + draw(st.sampled_from(["\n", "\r\n"]))


@st.composite
def programs(draw: st.DrawFn, max_ops: int = 20) -> str:
    g = _Gen()
    g.lines.append("G21 G90 G17 G94 F600\n")
    coord = st.floats(-50, 50, allow_nan=False).map(lambda v: round(v, 3))
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(
            ["units", "distance", "plane", "feedmode", "rapid", "line", "line", "arc", "arc",
             "arc_r", "full", "other", "end"]
        ))  # fmt: skip
        code = ""
        feed = ""
        if op in ("line", "arc", "arc_r", "full") and (g.inverse or not g.feed_defined):
            feed = f" F{draw(st.floats(1, 600)):.3f}"
            g.feed_defined = not g.inverse
        elif op in ("line", "arc", "arc_r") and draw(st.booleans()):
            feed = f" F{draw(st.floats(10, 3000)):.1f}"
        if op == "units":
            g.units = draw(st.sampled_from(list(Units)))
            code = f"G{g.units.value}"
        elif op == "distance":
            g.distance = draw(st.sampled_from(list(DistanceMode)))
            code = f"G{g.distance.value}"
        elif op == "plane":
            g.plane = draw(st.sampled_from(list(Plane)))
            code = f"G{ {Plane.XY: 17, Plane.ZX: 18, Plane.YZ: 19}[g.plane] }"
        elif op == "feedmode":
            inverse = draw(st.booleans())
            if inverse != g.inverse:
                g.feed_defined = False
            g.inverse = inverse
            code = "G93" if inverse else "G94"
        elif op in ("rapid", "line"):
            axes = draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True))
            target = list(g.pos)
            for i in axes:
                target[i] = draw(coord)
            code = ("G0 " if op == "rapid" else "G1 ") + _coord_words(g, target, sorted(axes))
        elif op in ("arc", "arc_r", "full"):
            ia, ib, inn = g.plane.value
            first, second = PLANE_OFFSETS[g.plane]
            radius = draw(st.floats(1.0, 30.0))
            cw = draw(st.booleans())
            scale = g.units.mm_per_unit
            word = "G2" if cw else "G3"
            if op == "full":
                phi0 = draw(st.floats(0, 2 * math.pi))
                off = (-radius * math.cos(phi0) / scale, -radius * math.sin(phi0) / scale)
                code = f"{word} {first}{off[0]:.6f} {second}{off[1]:.6f}"
            elif op == "arc":
                phi0 = draw(st.floats(0, 2 * math.pi))
                sweep = draw(st.floats(0.2, 2 * math.pi - 0.2))
                ca = g.pos[ia] - radius * math.cos(phi0)
                cb = g.pos[ib] - radius * math.sin(phi0)
                phi1 = phi0 + (-sweep if cw else sweep)
                target = list(g.pos)
                target[ia] = ca + radius * math.cos(phi1)
                target[ib] = cb + radius * math.sin(phi1)
                off = ((ca - g.pos[ia]) / scale, (cb - g.pos[ib]) / scale)
                axes = [ia, ib]
                if draw(st.booleans()):
                    target[inn] = draw(coord)
                    axes.append(inn)
                words = _coord_words(g, target, sorted(axes))
                code = f"{word} {words} {first}{off[0]:.6f} {second}{off[1]:.6f}"
            else:
                angle = draw(st.floats(0, 2 * math.pi))
                chord = draw(st.floats(1.0, 40.0))
                target = list(g.pos)
                target[ia] += chord * math.cos(angle)
                target[ib] += chord * math.sin(angle)
                r = chord / 2 * draw(st.floats(1.05, 3.0)) * draw(st.sampled_from([1, -1]))
                words = _coord_words(g, target, sorted([ia, ib]))
                code = f"{word} {words} R{r / scale:.6f}"
        elif op == "other":
            code = draw(st.sampled_from(["M3 S1200", "M5", "G4 P0.2", "T2 M6", "(comment)", ""]))
        elif op == "end":
            code = "M2"
            g.plane, g.distance = Plane.XY, DistanceMode.ABSOLUTE
            if g.inverse:
                g.inverse, g.feed_defined = False, False
        g.lines.append(draw(_decorate(code + feed)) if code and code[0] != "(" else code + "\n")
    return "".join(g.lines)


def _same_geometry(a: Block, b: Block, tol: float = 2e-3) -> None:
    assert a.motion is b.motion
    assert close(a.end_mm, b.end_mm, tol), (a.text, b.text)
    assert (a.arc is None) == (b.arc is None)
    if a.arc is not None and b.arc is not None:
        assert a.arc.plane is b.arc.plane and a.arc.clockwise == b.arc.clockwise
        assert close(a.arc.centre, b.arc.centre, tol)
        assert a.arc.sweep_rad == pytest.approx(b.arc.sweep_rad, abs=1e-3)
    if a.feed_mm_s is None:
        assert b.feed_mm_s is None
    else:
        assert b.feed_mm_s == pytest.approx(a.feed_mm_s, rel=1e-6, abs=1e-6)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_round_trip_to_equivalent_geometry(text: str) -> None:
    blocks = parse(text)
    assert "".join(b.text for b in blocks) == text
    original = [b for b in blocks if b.motion is not None and b.feed_mm_s != 0.0]
    emitted = list(canonical_lines(blocks))
    for i, line in enumerate(emitted, 1):
        validate_output_line(line, "generic", i)
    again = [b for b in parse_lines(emitted) if b.motion is not None]
    assert len(again) == len(original)
    for a, b in zip(original, again, strict=True):
        _same_geometry(a, b)


# Half a unit of the last decimal on each of three axes: GRBL writes inch programs with 4.
TOL_MM = math.sqrt(3) * 0.5e-4 * 25.4 * 1.01


def _modal_equal(a: Modal, b: Modal, *, motion: bool = True) -> None:
    assert (a.units, a.distance, a.plane, a.feed_mode) == (
        b.units, b.distance, b.plane, b.feed_mode,
    )  # fmt: skip
    if motion:
        assert a.motion is b.motion
    if a.feed_mm_s is not None:  # an undefined feed may have become defined: harmless
        assert b.feed_mm_s == pytest.approx(a.feed_mm_s, rel=1e-3)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.data())
def test_random_replacements_keep_the_program_intact(text: str, data: st.DataObject) -> None:
    """Replacing any blocks by segments leaves every other line meaning what it meant: same
    positions, same modal state after it; the segments land where asked at the asked rates
    and every line the emitter writes is valid for the dialect."""
    dialect = data.draw(st.sampled_from([DIALECTS["generic"], DIALECTS["linuxcnc"],
                                         DIALECTS["grbl"]]))  # fmt: skip
    em = GcodeEmitter(dialect, inverse_time=data.draw(st.booleans()))
    blocks = parse(text)
    out: list[str] = []
    emitted: list[str] = []
    n_out = 0
    kept: list[tuple[Block, int]] = []
    asked: list[tuple[int, int, list[tuple[float, float, float]], list[float], bool]] = []
    for b in blocks:
        if b.motion is not None and b.length_mm > 0.5 and data.draw(st.booleans()):
            prim = b.primitive()
            assert prim is not None
            # a full circle needs a point on the way round
            least = 1 if b.start_mm == b.end_mm else 0
            fr = sorted(data.draw(st.sets(st.integers(1, 19), min_size=least, max_size=4)))
            pts = [prim.point(prim.length * f / 20) for f in fr] + [b.end_mm]
            by_time = data.draw(st.booleans())
            rates = [data.draw(st.floats(0.05, 2.0) if by_time else st.floats(1.0, 100.0))
                     for _ in pts]  # fmt: skip
            kw = {"durations_s" if by_time else "feeds_mm_s": rates}
            chunk = em.replace(b, pts, **kw)  # type: ignore[arg-type]
            asked.append((n_out, n_out + chunk.count("\n"), pts, rates, by_time))
            emitted += chunk.splitlines()
        else:
            chunk = em.passthrough(b)
            kept.append((b, n_out + chunk.count("\n") - 1))
            emitted += chunk.splitlines()[:-1]  # restore lines, if any
        out.append(chunk)
        n_out += chunk.count("\n")
    out.append(em.flush())
    emitted += out[-1].splitlines()
    for i, line in enumerate(emitted, 1):
        validate_output_line(line, dialect, i)
    result = parse("".join(out))
    for b, idx in kept:
        assert close(result[idx].end_mm, b.end_mm, TOL_MM), (b.text, result[idx].text)
        # A modal G2/G3 comes back with the next move that relies on it.
        _modal_equal(b.modal, result[idx].modal, motion=b.motion is not None)
    for lo, hi, pts, rates, by_time in asked:
        segs = [r for r in result[lo:hi] if r.motion is not None]
        assert len(segs) == len(pts)
        for seg, p, rate in zip(segs, pts, rates, strict=True):
            assert close(seg.end_mm, p, TOL_MM)
            # Rounded end points change a segment's length by up to two such errors, and
            # with it the rate that follows from length and F.
            rel = 1e-4 + 2 * TOL_MM / seg.length_mm
            if by_time:
                assert seg.duration_s == pytest.approx(rate, rel=rel, abs=1e-6)
            else:
                assert seg.feed_mm_s == pytest.approx(rate, rel=rel)
    _modal_equal(blocks[-1].modal, result[-1].modal, motion=False)


GARBAGE = st.text(
    alphabet=st.sampled_from(list("GMXYZIJKRFNSTPQEA0123456789.-+ \t()*;/%$#éx\x00\r")),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(GARBAGE, st.text(max_size=40)))
def test_garbage_lines_raise_only_gcode_errors(line: str) -> None:
    for state in (ModalState(), ModalState(modal=Modal(motion=Motion.CW, feed_mm_s=1.0))):
        try:
            block = state.apply(line, 1)
        except GcodeError as err:
            assert err.line_no == 1 and err.problem
        else:
            assert block.text == line


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
