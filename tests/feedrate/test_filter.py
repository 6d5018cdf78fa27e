"""The streaming feedrate filter (agent.feedrate.filter.toolpath_filter) and the machine file it
runs on.

What the windows do (the paper's profile realised exactly in G93, back-and-forth in
retrograde), what they leave alone (byte-identical lines), how t* is chosen, the bounded
lookahead, and the circular test on the simulated fake with and without modulation.
"""

from __future__ import annotations

import gc
import math
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent.errors import ConfigError
from agent.feedrate.circular_test import circle_program, circular_test, lead_mm
from agent.feedrate.example import PAPER_AXIS
from agent.feedrate.executor import execute_program
from agent.feedrate.filter.plan import Geometry, WindowPlanner, corner_take_up_s
from agent.feedrate.filter.program import filter_lines, filtered_lines
from agent.feedrate.filter.toolpath_filter import FeedrateFilter
from agent.feedrate.filter.window import unit_shape
from agent.feedrate.filter.window_length import plan_window
from agent.feedrate.gcode.blocks import Motion
from agent.feedrate.gcode.lex import GcodeError
from agent.feedrate.machine import (
    LookaheadSettings,
    MachineSettings,
    ModulationSettings,
    load_machine,
)
from agent.feedrate.profile import symmetric_feedrate
from tests.support.feedrate.toolpath import check_output, machine, parse_program
from tests.support.paths import MACHINES

EXAMPLE = MACHINES / "farouki2022.yaml"


def run(lines: list[str], m: MachineSettings) -> tuple[str, FeedrateFilter]:
    f = FeedrateFilter(m)
    return "".join(filter_lines(lines, m, filt=f)), f


# ------------------------------------------------------------------------------- machine file


def test_example_machine_is_the_papers_axis() -> None:
    m = load_machine(EXAMPLE)
    assert m.source == str(EXAMPLE)
    assert set(m.axes) == {"X", "Y"}
    for params in m.axis_params().values():
        assert params == PAPER_AXIS
        assert params.motor_gain_rad_m_s2 == pytest.approx(1.428571e5, rel=1e-6)
    assert m.eps_m == 1e-6 and m.inverse_time and m.modulation.ratio == 0.25
    assert m.to_dict()["axes"]["X"]["gamma_1_s"] == pytest.approx(5.0)


def test_physical_drive_gives_the_same_coefficients(tmp_path: Path) -> None:
    text = (
        EXAMPLE.read_text()
        .replace(
            """  X: &paper_axis
    b_s2: 0.0005
    c_s: 0.005
""",
            """  X: &paper_axis
    physical:
      proportional_gain_v_m: 2.0
      amplifier_gain_a_v: 1.0
      torque_constant_nm_a: 0.5
      inertia_kg_m2: 2.0e-5
      damping_nm_s_rad: 2.0e-4
      motor_inertia_kg_m2: 7.0e-6
      motor_damping_nm_s_rad: 7.0e-6
""",
        )
        .replace("    motor_inertia_fraction: 0.35\n    motor_time_constant_s: 1.0\n", "")
    )
    path = tmp_path / "m.yaml"
    path.write_text(text)
    p = load_machine(path).axis_params()["X"]
    # eq. 9: b = N J / (k_p k_a k_t r) = 25 * 2e-5 / 1.0, c = N B / (...); eta, tau from J_m, B_m
    assert p.b_s2 == pytest.approx(5e-4) and p.c_s == pytest.approx(5e-3)
    assert p.motor_inertia_fraction == pytest.approx(0.35)
    assert p.motor_time_constant_s == pytest.approx(1.0)


def test_machine_file_mistakes_are_all_named_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("""name: bad
eps_m: 1.0e-7
dialect: marlin
inverse_time: true
axes:
  X:
    gear_ratio: 25
    screw_lead_m_per_rad: 1.0
    backlash_motor_rad: 0.1
    b_s2: 0.0005
    c_s: 0.005
    motor_inertia_fraction: 0.35
  Q: {gear_ratio: 1}
modulation:
  ratio: -0.5
  degree: 9
  polcy: fixed
""")
    with pytest.raises(ConfigError) as info:
        load_machine(path)
    text = str(info.value)
    for expected in (
        f"{path}:13: axes.Q: expected one of 'X', 'Y', 'Z'",
        "modulation.polcy: unknown key (did you mean 'policy'?)",
        "axes.X.motor_time_constant_s: required key is missing",
    ):
        assert expected in text, text
    # Cross-field rules run once the values build: fix the key errors and look again.
    path.write_text(
        path.read_text()
        .replace("  Q: {gear_ratio: 1}\n", "")
        .replace("  polcy: fixed\n", "")
        .replace(
            "motor_inertia_fraction: 0.35",
            "motor_inertia_fraction: 0.35\n    motor_time_constant_s: 1.0",
        )
    )
    with pytest.raises(ConfigError) as info:
        load_machine(path)
    text = str(info.value)
    for expected in (
        "inverse_time: dialect marlin has no G93 inverse-time mode",
        "eps_m: expected at least 1.73e-06",
        "modulation.ratio: ratio -0.5 < 0 means retrograde motion",
        "modulation.degree: expected an even integer",
    ):
        assert expected in text, text
    assert all(line.startswith(f"{path}:") for line in text.splitlines())


# ------------------------------------------------------------------------------- pass-through


def test_lines_without_reversals_of_modulated_axes_pass_through_byte_identical() -> None:
    """Z reverses (not a modulated axis), X and Y never do: output == input, bytes and all,
    comments, numbers, checksums, odd spacing and CRLF included."""
    lines = [
        "%\r\n",
        "(roughing)\r\n",
        "N10 G21 G90 G94\r\n",
        "N20 G0 X0 Y0 Z5\r\n",
        "N30 G1 Z-1 F300\r\n",
        "N40 g1 x10  y5 z0 f1200 ; ramp\r\n",
        "N50 G1 X20 Y10 Z-1*29\r\n",
        "N60 G3 X25 Y15 I0 J5\r\n",
        "N70 G1 X40 Z0\r\n",
        "M30\r\n",
        "%",
    ]
    lines[6] = "N50 G1 X20 Y10 Z-1"
    from agent.feedrate.gcode.lex import checksum

    lines[6] = f"{lines[6]}*{checksum(lines[6])}\r\n"
    m = machine()
    out, f = run(lines, m)
    assert out == "".join(lines)
    assert f.stats.modulated == 0 and f.stats.lines_out == len(lines)


def test_far_from_a_reversal_lines_pass_through_and_near_it_are_replaced() -> None:
    lines = (
        ["G21 G90 G94 F1200\n"]
        + [f"G1 X{x} Y0\n" for x in range(1, 41)]
        + [f"G1 X{40 - x} Y1\n" for x in range(1, 41)]
    )
    m = machine(modulation=ModulationSettings(policy="fixed", half_window_s=0.05))
    out, f = run(lines, m)
    assert f.stats.modulated == 1 and f.stats.turning_points == 1
    # 20 mm/s * 0.05 s * 0.72: the window reaches 0.72 mm each side of X40: two lines replaced.
    assert f.stats.replaced_blocks == 2
    out_lines = out.splitlines(keepends=True)
    for line in lines[:40] + lines[42:]:
        assert line in out_lines
    assert lines[40] not in out_lines and lines[41] not in out_lines
    check_output(lines, m)


# ------------------------------------------------------------------------------- the profile


def _path_arc(points: np.ndarray, corners: list[tuple[float, float]]) -> np.ndarray:
    """Arc length along the polyline `corners` of each point (the nearest leg's projection)."""
    c = np.array(corners, dtype=float)
    legs = np.diff(c, axis=0)
    lengths = np.hypot(*legs.T)
    starts = np.concatenate([[0.0], np.cumsum(lengths)[:-1]])
    w = points[:, None, :2] - c[None, :-1]
    t = np.clip((w * legs[None]).sum(axis=2) / lengths**2, 0.0, 1.0)
    foot = c[None, :-1] + t[..., None] * legs[None]
    dist = np.hypot(*(points[:, None, :2] - foot).transpose(2, 0, 1))
    leg = np.argmin(dist, axis=1)
    return np.asarray(starts[leg] + t[np.arange(len(points)), leg] * lengths[leg])


def _timeline(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative time (s) at the end of each output move, and its end point (mm)."""
    blocks = [b for b in parse_program(text.splitlines(keepends=True)) if b.motion is Motion.LINEAR]
    return (
        np.cumsum([b.duration_s for b in blocks]),
        np.array([b.end_mm for b in blocks], dtype=float),
    )


@pytest.mark.parametrize("ratio", [0.25, -0.45])
def test_g93_segments_follow_the_papers_profile(ratio: float) -> None:
    """At a corner, position against time in the window is s(t) of eqs. 26-29, to the written
    digits, every segment's duration exact (G93); with V(1/2) < 0 the tool runs past the
    corner, back along the first leg and forward again, on the path and with positive F."""
    v_mm_s, t_star = 100.0, 0.1
    lines = [f"G21 G90 G94 F{v_mm_s * 60:g}\n", "G1 X100 Y0\n", "G1 X0 Y10\n", "M30\n"]
    mod = ModulationSettings(
        ratio=ratio, retrograde=ratio < 0, policy="fixed", half_window_s=t_star, segments=40
    )
    m = machine(modulation=mod, inverse_time=True)
    out, f = run(lines, m)
    assert f.stats.modulated == 1
    assert all(word > 0 for word in _f_words(out))
    check_output(lines, m)
    times, ends = _timeline(out)
    s = _path_arc(ends, [(0.0, 0.0), (100.0, 0.0), (0.0, 10.0)])
    prof = symmetric_feedrate(v_mm_s / 1000, t_star, ratio=ratio, allow_retrograde=ratio < 0)
    s_star = prof.half_arc_m * 1000
    t_entry = (100.0 - s_star) / v_mm_s  # the nominal feed up to the window
    inside = (times > t_entry + 1e-9) & (times < t_entry + 2 * t_star + 1e-9)
    expected = 100.0 + 1000 * prof.arc_length_m(times[inside] - t_entry - t_star)
    assert np.max(np.abs(s[inside] - expected)) < 2e-4  # mm: rounding of the coordinates
    assert times[-1] == pytest.approx(
        (100 + math.hypot(100, 10)) / v_mm_s + prof.time_penalty_s, rel=1e-6
    )
    steps = np.diff(s[inside])
    if ratio < 0:
        assert (steps < -1e-6).sum() >= 3  # backwards along the path for a while
        past = s[inside].max() - 100.0
        assert (
            past
            == pytest.approx(
                1000 * max(prof.arc_length_m(np.linspace(-t_star, t_star, 20001))) - 100.0 + 100.0,
                abs=0.01,
            )
            or past > 0
        )
        assert (np.abs(s[inside] - 100.0) < 1e-6).sum() == 3  # the corner, three times
    else:
        assert (steps > 0).all()


def _f_words(text: str) -> list[float]:
    from agent.feedrate.gcode.lex import lex_line

    return [
        v
        for i, line in enumerate(text.splitlines(), 1)
        if (v := lex_line(line, i).values.get("F")) is not None
    ]


def test_g94_feeds_give_the_same_timing_as_g93() -> None:
    lines = ["G21 G90 G94 F3000\n", "G1 X50 Y0\n", "G1 X0 Y5\n", "G1 X50 Y10\n"]
    mod = ModulationSettings(policy="fixed", half_window_s=0.1)
    out93, _ = run(lines, machine(modulation=mod, inverse_time=True))
    out94, f = run(lines, machine(modulation=mod, inverse_time=False))
    assert "G93" in out93 and "G93" not in out94
    assert f.stats.modulated == 2
    t93, e93 = _timeline(out93)
    t94, e94 = _timeline(out94)
    assert np.allclose(e93, e94)
    assert np.allclose(t93, t94, rtol=0, atol=2e-4)


# ------------------------------------------------------------------------------- choice of t*


def test_shortest_window_takes_up_the_backlash_inside_it() -> None:
    """Policy "shortest" on a circle agrees with window_length.plan_window; at a corner it finds the
    least t* whose take-up (simulated on the dead-zone model) ends inside the window; both
    are cached."""
    shape = unit_shape(0.25, 10, 16, False)
    planner = WindowPlanner({"X": PAPER_AXIS}, shape, policy="shortest", cap_s=0.5)
    v = 250.0 * math.pi / 6.0  # the paper's V_c, mm/s
    smooth = Geometry("smooth", 250.0, (0.0, 1.0, 0.0), (0.0, 1.0, 0.0), True)
    t_smooth = planner.needed_s(("X",), v, smooth)
    ref = plan_window(
        PAPER_AXIS,
        nominal_m_s=v / 1000,
        radius_m=0.25,
        allowed_half_arc_m=math.inf,
        max_half_window_s=0.5,
        policy="shortest",
    )
    assert ref.backlash_inside
    assert t_smooth == pytest.approx(ref.profile.half_window_s, rel=0.03)
    corner = Geometry("corner", math.inf, (0.8, 0.6, 0.0), (-0.8, 0.6, 0.0))
    t_corner = planner.needed_s(("X",), v, corner)
    assert 0.0 < t_corner < 0.5
    coeffs = tuple(c * v / 1000 for c in shape.profile.coefficients_m_s)
    from agent.feedrate.profile import BernsteinFeedrate

    end = corner_take_up_s(PAPER_AXIS, BernsteinFeedrate(coeffs, t_corner), 0.8, -0.8)
    assert end is not None and end <= t_corner
    shorter = corner_take_up_s(PAPER_AXIS, BernsteinFeedrate(coeffs, 0.9 * t_corner), 0.8, -0.8)
    assert shorter is None or shorter > 0.9 * t_corner
    assert planner.needed_s(("X",), v * 1.001, corner) == t_corner  # same 2 % feed bin
    assert planner.stats.simulated == 2 and planner.stats.cache_hits == 1
    fixed = WindowPlanner({"X": PAPER_AXIS}, shape, policy="fixed", cap_s=0.3)
    assert fixed.needed_s(("X",), v, corner) == 0.3


def test_the_geometry_bounds_the_window() -> None:
    """Short legs leave no room: windows shrink to fit between neighbours and below
    min_half_window_s the reversal is left alone (and counted)."""
    mod = ModulationSettings(policy="fixed", half_window_s=0.5, min_half_window_s=0.01)
    m = machine(modulation=mod)
    wide = ["G21 G90 G94 F600\n"] + [f"G1 X{(k % 2) * 5} Y{k}\n" for k in range(1, 8)]
    narrow = ["G21 G90 G94 F600\n"] + [
        f"G1 X{(k % 2) * 0.05} Y{k * 0.01:.2f}\n" for k in range(1, 8)
    ]
    _, fw = run(wide, m)
    _, fn = run(narrow, m)
    assert fw.stats.modulated == 6 and fw.stats.too_short == 0
    assert fn.stats.modulated == 0 and fn.stats.too_short == 6
    # Legs of 5.1 mm at 10 mm/s: the full window (t* 0.5 s) would reach 3.6 mm each way.
    full = 6 * 0.5 * unit_shape(0.25, 10, 16, False).time_penalty
    assert 0.5 * full < fw.stats.added_time_s < 0.8 * full
    check_output(wide, m)
    check_output(narrow, m)


# ------------------------------------------------------------------------------- streaming


def test_lookahead_bounds_what_is_held_back_and_memory_stays_flat() -> None:
    """A long program of short chords round a circle, streamed line by line: never more than
    the lookahead held back, and the memory after 10,000 lines is the memory after 60,000."""
    look = LookaheadSettings(lines=50, seconds=5.0)
    m = machine(
        modulation=ModulationSettings(policy="fixed", half_window_s=0.05),
        lookahead=look,
        dialect="grbl",
        eps_m=2e-6,
    )
    f = FeedrateFilter(m)

    def line(k: int) -> str:
        a = 2 * math.pi * k / 720
        return f"G1 X{20 * math.cos(a):.3f} Y{20 * math.sin(a):.3f}\n"

    f.feed("G21 G90 G94 F1200\n")
    written = 0
    tracemalloc.start()
    try:
        for k in range(1, 60_001):
            written += len(f.feed(line(k)))
            if k == 10_000:
                gc.collect()
                early = tracemalloc.get_traced_memory()[0]
        gc.collect()
        late = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    written += len(f.finish())
    stats = f.stats
    assert stats.max_pending_lines <= look.lines + 2
    assert stats.modulated == math.ceil(4 * 60_000 / 720) and stats.too_short == 0
    assert late - early < 300_000, (early, late)
    assert stats.lines_in == 60_001 and stats.lines_out > 60_001 and written >= 60_000


def test_a_short_lookahead_decides_early_and_keeps_every_property() -> None:
    lines = ["G21 G90 G94 F3000\n"] + [f"G1 X{(k % 2) * 3} Y{k * 0.5}\n" for k in range(1, 40)]
    long_look = machine(modulation=ModulationSettings(policy="fixed", half_window_s=0.2))
    short = replace(long_look, lookahead=LookaheadSettings(lines=2, seconds=0.01))
    a = check_output(lines, long_look)
    b = check_output(lines, short)
    assert a.stats.forced == 0 and b.stats.forced > 0
    assert b.stats.max_pending_lines <= 4
    assert a.stats.modulated == b.stats.modulated == 38
    assert b.stats.added_time_s <= a.stats.added_time_s * (1 + 1e-12)


def test_filtered_lines_yields_one_line_each() -> None:
    lines = ["G21 G90 G94 F3000\n", "G1 X50 Y0\n", "G1 X0 Y5\n"]
    m = machine()
    single = list(filtered_lines(lines, m))
    assert all(s.count("\n") == 1 for s in single)
    assert "".join(single) == run(lines, m)[0]


def test_bad_gcode_and_a_too_fine_tolerance_name_the_line() -> None:
    m = machine()
    with pytest.raises(GcodeError, match=r"prog.nc:3: unknown word Q"):
        f = FeedrateFilter(m, source="prog.nc")
        for i, text in enumerate(["G21 G90 F600\n", "G1 X1\n", "G1 X2 Q5\n"]):
            f.feed(text)
            assert i < 2
    inch = ["G20 G90 G94 F60\n", "G1 X1 Y0\n", "G1 X0 Y0.1\n", "M30\n"]
    grbl = machine(dialect="grbl", eps_m=2e-6)
    with pytest.raises(
        GcodeError,
        match=r"line 3: eps_m 2e-06 is too small for the rounding "
        r"of inch coordinates in dialect grbl",
    ):
        run(inch, grbl)
    check_output(inch, replace(grbl, eps_m=3e-5))


# ------------------------------------------------------------------------------- circular test


@pytest.mark.parametrize("feed_mm_min", [3000.0, 7854.0])
def test_circular_test_on_the_simulated_fake(feed_mm_min: float) -> None:
    """ISO 230-4 style circle (radius 250 mm: Farouki & Swett 2022's osculating circle) on two axes
    with the section 4.2 backlash, executed by the fake with the dead-zone model on both axes:
    modulating the four quadrant reversals (ratio 0.25, t* = 0.5 s as in section 6) lowers
    the maximum and RMS radial error; the price is the added cycle time."""
    m = replace(
        load_machine(EXAMPLE), modulation=ModulationSettings(policy="fixed", half_window_s=0.5)
    )
    prog = circle_program(250.0, feed_mm_min)
    out, f = run(prog, m)
    base = execute_program(prog)
    mod = execute_program(out.splitlines(keepends=True))
    eb = circular_test(base, (0.0, 0.0), 250.0, skip_mm=lead_mm(250.0))
    em = circular_test(mod, (0.0, 0.0), 250.0, skip_mm=lead_mm(250.0))
    penalty = mod.cycle_time_s - base.cycle_time_s
    print(
        f"\nF{feed_mm_min:g}: max radial error {eb.max_abs_m * 1e6:.1f} -> "
        f"{em.max_abs_m * 1e6:.1f} um, RMS {eb.rms_m * 1e6:.1f} -> {em.rms_m * 1e6:.1f} um, "
        f"cycle {base.cycle_time_s:.2f} -> {mod.cycle_time_s:.2f} s (+{penalty:.2f} s)"
    )
    assert f.stats.modulated == 5  # 0, 90, 180, 270 and 360 degrees
    assert em.max_abs_m < 0.8 * eb.max_abs_m
    assert em.rms_m < 0.8 * eb.rms_m
    assert penalty == pytest.approx(f.stats.added_time_s, rel=1e-3)
