"""G-code parsing: lexer, checksums, error messages, modal state machine, arcs in every plane,
and random garbage lines that may only raise GcodeError."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import EX_DATAERR, AgentError
from agent.feedrate.gcode.blocks import (
    Block,
    DistanceMode,
    FeedMode,
    Modal,
    Motion,
    ParserOptions,
    Units,
)
from agent.feedrate.gcode.lex import GcodeError, checksum, lex_line
from agent.feedrate.gcode.parser import ModalState, parse_lines
from agent.feedrate.geometry.primitives import Plane
from agent.feedrate.geometry.turning_points import TurningPointTracker
from tests.support.feedrate.gcode import close, parse


def moves(text: str) -> list[Block]:
    return [b for b in parse(text) if b.motion is not None]


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
        ("G28 G1 X1", "G28 and G1 in one line"),
        ("G41 D1", "unsupported G code G41"),
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
        ("G1 X1 #2", "parameters and expressions ('#2'"),
        ("G1 X1 ^2", "expected a letter and a number"),
        ("#1=0.1 (SafeHeight)", "which jha does not evaluate: post the program with plain"),
        ("o100 sub", "O-word program logic (o<name> sub, call, if, while, repeat)"),
        ("O<touchoff> call [0.1]", "O-word program logic"),
        ("o100 repeat [800]", "post the program from the CAM without subroutines or loops"),
        ("G1 X1 é", "non-ASCII character"),
        ("% G1", "text after the '%' tape mark"),
        ("$H", "'$H' is a GRBL system command or setting"),
        ("$110=3000", "send settings to the controller from a terminal (e.g. `$110=3000`)"),
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
    # G55 moves the program's frame by an offset only the controller holds: the move after
    # it starts at an unknown point.
    assert not blocks[1].path_known


@pytest.mark.parametrize(
    "change",
    ["G54", "G59.3", "G92 X0 Y0", "G92.1", "G10 L2 P1 X3", "G10 L20 P0 Z1", "G43 H2", "G49", "M30"],
)
def test_frame_change_makes_the_program_position_unknown(change: str) -> None:
    blocks = parse(f"G1 X1 Y1 Z1 F100\n{change}\nG1 X2 Y2\nG1 X3 Y1\nG1 X4 Z0\nG1 X5\n")
    assert [b.path_known for b in blocks] == [True, True, False, True, False, True]
    assert blocks[1].motion is None  # G92's and G10's axis words are not a move


def test_after_a_frame_change_g91_increments_stay_exact() -> None:
    blocks = parse("G91 G1 X1 F100\nG55\nG1 X1\nG1 Y-2\nG90 G1 X0\nG1 Y0 Z0\nG1 X1\n")
    assert [b.path_known for b in blocks] == [True, True, False, True, False, False, True]
    assert blocks[3].length_mm == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("G1 X1 H1 F100", "H word without G43"),
        ("G43 H1.5", "tool length offset H1.5 is not a whole number"),
        ("L2 G0 X1", "L word without G10"),
        ("G10 L1 P1 X0", "G10 without L2 or L20"),
        ("G10 L2 X0", "G10 without a coordinate system P0 to P9"),
        ("G10 L2 P10 X0", "G10 without a coordinate system P0 to P9"),
        ("G92", "G92 without X, Y or Z"),
        ("G92 G1 X0 F100", "G92 and G1 in one line"),
        ("G10 L2 P1 X0 I1", "I with G10"),
        ("G4 P1 G92 X0", "two non-modal codes in one line (G4 and G92)"),
        ("G54 G55", "two coordinate system codes in one line"),
        ("G43 H1 G49", "two tool length codes in one line"),
        ("G92 X0 P1", "P word without G4"),
    ],
)
def test_frame_change_errors(text: str, problem: str) -> None:
    assert problem in error_of(text).problem


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
