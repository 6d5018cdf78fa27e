"""Frame changes the feedrate filter does not model (work offsets G54-G59, G10 L2/L20, G92, tool
length G43/G49) end its lookahead window: the filter writes them and the moves whose start they
leave unknown byte for byte, never spans a window (or G93) across them, and starts afresh.

The issue's program (a reversal just after G55) and random programs with offset, tool, unit and
distance-mode changes between moves, run on a reference machine that tracks the offsets
(tests/support/feedrate/machine_frame.py): the filtered program's machine path stays within
eps of the original's and each original move takes at least its programmed time, and at most
that plus what the filter says it added.
"""

from __future__ import annotations

import math
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.feedrate.filter.program import filtered_lines_with_origin
from agent.feedrate.filter.toolpath_filter import FeedrateFilter
from agent.feedrate.machine import MachineSettings, load_machine, rounding_mm
from tests.support.feedrate.machine_frame import Vec3, distance_to_path, run_on_machine
from tests.support.feedrate.toolpath import machine
from tests.support.paths import MACHINES

# G55 lies 100 mm from G54 along X and 30 mm along Y: a window across the change would run the
# machine through that distance in the time of a few millimetres.
OFFSETS: dict[int, Vec3] = {1: (0.0, 0.0, 0.0), 2: (100.0, 30.0, 0.0)}
TOOLS = {1: 50.0, 2: 75.5}


def filter_with_origins(
    lines: list[str], m: MachineSettings
) -> tuple[list[str], list[int], FeedrateFilter]:
    filt = FeedrateFilter(m)
    pairs = list(filtered_lines_with_origin(lines, m, filt=filt))
    return [line for line, _ in pairs], [origin for _, origin in pairs], filt


def check_on_machine(
    lines: list[str],
    m: MachineSettings,
    offsets: dict[int, Vec3],
    tools: dict[int, float],
) -> FeedrateFilter:
    """Filter `lines`; assert the machine path and each move's time against the original's."""
    out_lines, origins, filt = filter_with_origins(lines, m)
    before = run_on_machine(lines, offsets, tools)
    after = run_on_machine(out_lines, offsets, tools)
    rnd = rounding_mm(m.emitter_dialect, inch=True) * 1.01 + 1e-9
    # The path: every output point within eps of the original path, every original block end
    # passed, the same end point.
    for mv in after.moves:
        mid = tuple(0.5 * (a + b) for a, b in zip(mv.start, mv.end, strict=True))
        for p in (mv.start, mid, mv.end):
            dev = distance_to_path(p, before.moves)  # type: ignore[arg-type]
            assert dev <= m.eps_mm + rnd, (p, dev, out_lines[mv.line_index])
    ends = [mv.end for mv in after.moves]
    for mv in before.moves:
        if mv.length_mm > 0.0:
            gap = min(math.dist(mv.end, e) for e in ends)
            assert gap <= rnd, (lines[mv.line_index], gap)
    assert before.end is not None and after.end is not None
    assert math.dist(before.end, after.end) <= rnd
    # Each original move's time: its output lines (the filter names the program line each comes
    # from) take at least the programmed time and at most that plus the time the filter added.
    taken: dict[int, float] = defaultdict(float)
    for mv in after.moves:
        taken[origins[mv.line_index] - 1] += mv.duration_s or 0.0
    added = filt.stats.added_time_s
    for mv in before.moves:
        if mv.duration_s is None:
            continue
        got = taken[mv.line_index]
        tol = 2e-4 * mv.duration_s + 1e-4
        assert got >= mv.duration_s - tol, (lines[mv.line_index], got, mv.duration_s)
        assert got <= mv.duration_s + added + tol, (lines[mv.line_index], got, mv.duration_s)
    total_tol = 2e-4 * before.feed_time_s() + 1e-4 * len(before.moves)
    assert abs(after.feed_time_s() - before.feed_time_s() - added) <= total_tol
    return filt


# ------------------------------------------------------------------------------- the issue

ISSUE = ["G54\n", "G1 X0 Y0 F1000\n", "G1 X10 Y0\n", "G55\n", "G1 X5 Y0\n", "G1 X10 Y0\n"]


def test_work_offset_change_is_not_a_continuous_path() -> None:
    # Before the fix: "G93 G1 X7.5719 F407.771" after G55, 0.147 s for the 100 mm between
    # the offsets on a move programmed at 1 m/min.
    m = load_machine(MACHINES / "farouki2022.yaml")
    out_lines, _, _ = filter_with_origins(ISSUE, m)
    assert out_lines == ISSUE
    check_on_machine(ISSUE, m, OFFSETS, TOOLS)


def test_the_cam_preamble_and_a_return_home_pass_through_and_end_the_window() -> None:
    # G40 and G80 cancel modes the filter never enters, G91.1 states the arc-centre mode it
    # assumes; G28 goes home through X5 Y5, where the program position is the machine's: the
    # lines pass byte for byte and the filter starts afresh after G28 (no window spans it).
    lines = [
        "G17 G40 G49 G80 G90\n",
        "G91.1\n",
        "G1 X0 Y0 F1000\n",
        "G1 X10 Y0\n",
        "G28 X5 Y5\n",
        "G1 X0 Y0\n",
        "G1 X10 Y0\n",
    ]
    m = load_machine(MACHINES / "farouki2022.yaml")
    out_lines, _, _ = filter_with_origins(lines, m)
    assert out_lines == lines
    assert not any("G93" in line for line in out_lines)


def test_offset_change_on_the_move_line_too() -> None:
    lines = ["G54 G1 X0 Y0 F1000\n", "G1 X10 Y0\n", "G55 G1 X5 Y0\n", "G1 X10 Y0\n"]
    m = load_machine(MACHINES / "farouki2022.yaml")
    out_lines, _, _ = filter_with_origins(lines, m)
    assert out_lines == lines
    check_on_machine(lines, m, OFFSETS, TOOLS)


def test_window_before_the_change_is_closed_and_g94_restored_first() -> None:
    # A reversal just before G92: its window ends at the last move before it, and the G94 and
    # F the window's G93 segments changed are restored before the G92 line, which is written
    # as it is.
    lines = [
        "G1 X0 Y0 F1000\n",
        "G1 X10 Y0\n",
        "G1 X0 Y0\n",
        "G92 X50 Y7\n",
        "G1 X60 Y7\n",
        "G1 X50 Y7\n",
    ]
    m = load_machine(MACHINES / "farouki2022.yaml")
    out_lines, _, filt = filter_with_origins(lines, m)
    at = out_lines.index("G92 X50 Y7\n")
    assert out_lines[at - 1] == "G94 F1000\n"
    assert out_lines[at:] == lines[3:]
    assert filt.stats.modulated == 1
    check_on_machine(lines, m, OFFSETS, TOOLS)


def test_filter_starts_afresh_after_the_change() -> None:
    # The first move after G55 fixes X and Y again; the reversal after it is modulated.
    lines = ["G1 X0 Y0 F1000\n", "G55\n", "G1 X0 Y0\n", "G1 X10 Y0\n", "G1 X0 Y0\n"]
    m = load_machine(MACHINES / "farouki2022.yaml")
    out_lines, _, filt = filter_with_origins(lines, m)
    assert filt.stats.modulated == 1
    assert out_lines[:3] == lines[:3]
    check_on_machine(lines, m, OFFSETS, TOOLS)


def test_tool_length_change_then_g90_axis_left_unknown() -> None:
    # After G43 Z is unknown until named: a move naming it is written as it is.
    lines = [
        "G1 X0 Y0 Z0 F600\n",
        "G43 H1\n",
        "G1 X10 Y0\n",
        "G1 X0 Y0\n",
        "G1 X10 Z-2\n",
        "G1 X0\n",
    ]
    m = load_machine(MACHINES / "farouki2022.yaml")
    out_lines, _, _ = filter_with_origins(lines, m)
    assert "G1 X10 Z-2\n" in out_lines
    check_on_machine(lines, m, OFFSETS, TOOLS)


# ------------------------------------------------------------------------------- property

_CHANGES = (
    "G20",
    "G21",
    "G54",
    "G55",
    "G56",
    "G57",
    "G58",
    "G59",
    "G92 X{a} Y{b}",
    "G92 Z{a}",
    "G92.1",
    "G10 L2 P{p} X{a} Y{b}",
    "G10 L2 P0 X{a}",
    "G10 L20 P{p} X{a} Y{b}",
    "G10 L20 P0 Y{b} Z{a}",
    "G43 H1",
    "G43 H2",
    "G49",
    "G90",
    "G91",
    "(tool change)",
)
# Codes that may share a line with a move (those that take no axis words).
_INLINE = ("G55", "G54", "G57", "G43 H2", "G49", "G90", "G91")


@st.composite
def framed_programs(draw: st.DrawFn) -> tuple[list[str], dict[int, Vec3], dict[int, float]]:
    """A program with random frame, unit and distance-mode changes between its moves, with
    the work offsets and tool lengths the machine holds."""
    off = st.floats(-200.0, 200.0, allow_nan=False).map(lambda v: round(v, 3))
    offsets = {n: (draw(off), draw(off), round(draw(off) / 10.0, 3)) for n in range(1, 7)}
    tools = {1: draw(st.floats(0.0, 120.0)), 2: draw(st.floats(0.0, 120.0))}
    feed_mm_min = draw(st.sampled_from([300.0, 1000.0, 2400.0]))
    lines = ["G21 G90 G94 G54\n", f"G1 X0 Y0 Z0 F{feed_mm_min:g}\n"]
    inch = False
    incremental = False
    need_feed = False
    coord = st.floats(-20.0, 20.0, allow_nan=False)
    for _ in range(draw(st.integers(3, 16))):
        unit = 25.4 if inch else 1.0
        dec = 5 if inch else 3

        def num(mm: float, unit: float = unit, dec: int = dec) -> str:
            return f"{mm / unit:.{dec}f}"

        if draw(st.integers(0, 2)) == 0:
            change = draw(st.sampled_from(_CHANGES))
            text = change.format(a=num(draw(coord)), b=num(draw(coord)), p=draw(st.integers(1, 6)))
            inch = {"G20": True, "G21": False}.get(change, inch)
            incremental = {"G91": True, "G90": False}.get(change, incremental)
            need_feed = need_feed or change in ("G20", "G21")
            lines.append(text + "\n")
            continue
        words = []
        if draw(st.integers(0, 4)) == 0:
            inline = draw(st.sampled_from(_INLINE))
            incremental = {"G91": True, "G90": False}.get(inline, incremental)
            words.append(inline)
        words.append(draw(st.sampled_from(["G1", "G1", "G0"])) if len(words) == 0 else "G1")
        axes = draw(st.sampled_from(["X", "Y", "XY", "XY", "XYZ", "Z"]))
        for a in axes:
            mm = draw(coord) * (0.2 if a == "Z" else 1.0)
            words.append(a + num(mm))
        if need_feed or draw(st.integers(0, 5)) == 0:
            words.append(f"F{feed_mm_min / unit:.4g}")
            need_feed = False
        lines.append(" ".join(words) + "\n")
    return lines, offsets, tools


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(framed_programs())
def test_frame_changes_keep_machine_path_and_move_times(
    program: tuple[list[str], dict[int, Vec3], dict[int, float]],
) -> None:
    lines, offsets, tools = program
    check_on_machine(lines, machine(), offsets, tools)
