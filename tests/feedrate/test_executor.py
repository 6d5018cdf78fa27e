"""The simulated fake CNC: G-code executed on two backlash axes (agent.feedrate.executor)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.feedrate.circular_test import circle_program, circular_test, lead_mm, radial_error
from agent.feedrate.example import PAPER_AXIS
from agent.feedrate.executor import CommandedPath, MachineModel, execute_program
from agent.feedrate.figure11 import simulate_turning_point
from agent.feedrate.gcode.parser import ModalState, parse_lines
from agent.feedrate.profile import symmetric_feedrate
from agent.feedrate.speed_planning import junction_speed, plan_entry_speeds, trapezoid

RHO_MM = 250.0  # the osculating circle of sections 4.2 and 6: rho_0 = a = 0.25 m
VC_MM_S = RHO_MM * math.pi / 6.0  # V_c = rho_0 Omega, Omega = pi / T, T = 6 s


def turning_point_program(ratio: float | None, dt_s: float = 0.005) -> tuple[list[str], float]:
    """Section 6's path in G-code: the circle about (-rho, 0) from theta = -pi/2 through the
    vertical turning point (0, 0) to theta = pi/2 (eq. 23 coordinates, in mm). With a ratio,
    the window [-t*, t*] of the paper's profile (n = 10, t* = 0.5 s) is written as G93 chords
    of dt_s each (exact durations), the lead-in and lead-out as G3 arcs at V_c.
    Returns the lines and the instant the command passes the turning point."""
    f = f"F{VC_MM_S * 60:.6f}"
    if ratio is None:
        return ["G17 G21 G90 G94\n", f"G3 X-250 Y250 I0 J250 {f}\n"], 0.5 * math.pi * RHO_MM / (
            VC_MM_S
        )
    prof = symmetric_feedrate(VC_MM_S / 1000, 0.5, ratio=ratio, allow_retrograde=True)
    th_star = prof.arc_end_m * 1000 / RHO_MM

    def point(th: float) -> tuple[float, float]:
        return -RHO_MM + RHO_MM * math.cos(th), RHO_MM * math.sin(th)

    x, y = point(-th_star)
    lines = ["G17 G21 G90 G94\n", f"G3 X{x:.6f} Y{y:.6f} I0 J250 {f}\n", "G93\n"]
    ts = np.arange(-0.5, 0.5 + 1e-9, dt_s)
    thetas = prof.arc_length_m(ts) * 1000 / RHO_MM
    for th in thetas[1:]:
        x, y = point(float(th))
        lines.append(f"G1 X{x:.6f} Y{y:.6f} F{60 / dt_s:.6f}\n")
    lines += ["G94\n", f"G3 X-250 Y250 I{-RHO_MM - x:.6f} J{-y:.6f} {f}\n"]
    lead_s = RHO_MM * (0.5 * math.pi - th_star) / VC_MM_S
    return lines, lead_s + 0.5


def window_error(
    lines: list[str], turn_s: float, machine: MachineModel | None = None
) -> tuple[float, float, float]:
    run = execute_program(lines, machine, start_mm=(-250.0, -250.0, 0.0))
    mask = run.between(turn_s - 0.5, turn_s + 0.5)
    err = radial_error(run.realised_m[mask], (-0.25, 0.0), 0.25)
    return err.max_fraction, err.rms_fraction, run.cycle_time_s


def test_a_g3_arc_reproduces_the_papers_turning_point_run() -> None:
    """Constant feed through the turning point: the same numbers as the closed-circle run of
    agent.feedrate.example (dead-zone model on both axes) and section 4.2's backlash interval."""
    lines, turn = turning_point_program(None)
    run = execute_program(lines, start_mm=(-250.0, -250.0, 0.0))
    mask = run.between(turn - 0.5, turn + 0.5)
    err = radial_error(run.realised_m[mask], (-0.25, 0.0), 0.25)
    prof = symmetric_feedrate(VC_MM_S / 1000, 0.5, ratio=1.0)
    ref = simulate_turning_point(prof, radius_m=0.25, model="dead_zone")
    assert err.max_fraction == pytest.approx(ref.max_radial_error, rel=1e-6)
    assert err.rms_fraction == pytest.approx(ref.rms_radial_error, rel=1e-6)
    first = run.x.intervals[0]
    assert first.start_s == pytest.approx(turn + 0.005001, abs=2e-6)  # section 4.2's lag
    assert first.duration_s == pytest.approx(0.118743, abs=1e-6)  # and its backlash interval
    assert run.cycle_time_s == pytest.approx(6.0)
    # The commanded path is the circle itself.
    r = np.hypot(run.commanded_m[:, 0] + 0.25, run.commanded_m[:, 1])
    assert np.max(np.abs(r[run.time_s <= run.cycle_time_s] - 0.25)) < 1e-12


def test_feedrate_modulation_streamed_as_g93_chords_shrinks_the_error() -> None:
    """Section 6 end to end: the profile with V(1/2)/V_c = 0.25 written as G-code reduces the
    maximum radial error as the analytic command does, at the profile's time penalty."""
    base_max, base_rms, base_t = window_error(*turning_point_program(None))
    mod_max, mod_rms, mod_t = window_error(*turning_point_program(0.25))
    prof = symmetric_feedrate(VC_MM_S / 1000, 0.5, ratio=0.25)
    ref = simulate_turning_point(prof, radius_m=0.25, model="dead_zone")
    assert mod_max < 0.7 * base_max and mod_rms < 0.7 * base_rms
    assert mod_max == pytest.approx(ref.max_radial_error, rel=2e-3)
    assert mod_rms == pytest.approx(ref.rms_radial_error, rel=2e-3)
    assert mod_t - base_t == pytest.approx(prof.time_penalty_s, abs=1e-6)


def test_circular_test_error_grows_with_feed_and_is_mostly_backlash() -> None:
    """ISO 230-4 style circles (R 100 mm, lead-in/out arcs left out of the measurement): the
    backlash error grows with the feed (Farouki & Swett 2022, figure 7: the other axis travels
    further while one stands in the gap) and is several times the servo's own radial error."""
    coarse = MachineModel(step_s=2e-3)
    skip = lead_mm(100.0)
    rows, clean = [], []
    for feed in (4000.0, 8000.0, 16000.0):  # mm/min
        program = circle_program(100.0, feed)
        rows.append(
            circular_test(execute_program(program, coarse), (0.0, 0.0), 100.0, skip_mm=skip)
        )
        clean.append(
            circular_test(
                execute_program(program, MachineModel(step_s=2e-3, backlash=False)),
                (0.0, 0.0),
                100.0,
                skip_mm=skip,
            )
        )
    maxima = [r.max_abs_m for r in rows]
    assert maxima == sorted(maxima) and maxima[-1] > 3 * maxima[0]
    assert all(r.max_abs_m > 2.5 * c.max_abs_m for r, c in zip(rows, clean, strict=True))
    assert all(r.circular_deviation_m > r.max_abs_m for r in rows)  # bumps both ways
    # The measured lap alone: 2 pi R of path after the lead-in.
    r = rows[1]
    assert r.start_s is not None and r.end_s is not None
    lap_s = 2 * math.pi * 100.0 / (8000.0 / 60.0)
    assert r.end_s - r.start_s == pytest.approx(lap_s, abs=0.01)


def test_acceleration_limited_interpolation() -> None:
    # A square with 90-degree corners: junction deviation slows each corner; rest at both ends.
    lines = ["G21 G90 G94 F6000\n", "G1 X20\n", "G1 Y20\n", "G1 X0\n", "G1 Y0\n"]
    blocks = list(parse_lines(lines, ModalState()))
    accel = 500.0
    ideal = CommandedPath(blocks, MachineModel())
    path = CommandedPath(blocks, MachineModel(acceleration_mm_s2=accel))
    assert ideal.cycle_time_s == pytest.approx(80.0 / 100.0)
    assert path.cycle_time_s > ideal.cycle_time_s
    t = np.linspace(0.0, path.cycle_time_s, 20001)
    pos, vel = path.evaluate(t)
    speed = np.hypot(*vel.T) * 1000
    assert speed[0] == 0.0 and speed[-1] == 0.0 and speed.max() <= 100.0 + 1e-9
    # Within each block every axis stays within its acceleration; at a corner GRBL's
    # junction-deviation rule allows a velocity step of at most the junction speed.
    block = np.searchsorted(path.start_s, t, side="right")
    same = block[1:] == block[:-1]
    dv = np.abs(np.diff(vel * 1000, axis=0))
    assert (dv[same] / np.diff(t)[same, None]).max() <= accel * (1 + 1e-6)
    corner = junction_speed((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), accel, 0.01)
    at_corner = speed[np.argmin(np.hypot(pos[:, 0] * 1000 - 20, pos[:, 1] * 1000))]
    assert at_corner == pytest.approx(corner, rel=0.05)
    assert dv[~same].max() <= corner + accel * float(np.diff(t).max()) * (1 + 1e-6)
    assert np.allclose(pos[-1], 0.0, atol=1e-12)


def test_dwell_and_inverse_time() -> None:
    lines = ["G21 G90 G94 F600\n", "G1 X10\n", "G4 P0.25\n", "G93 G1 X20 F120\n", "G94\n"]
    path = CommandedPath(parse_lines(lines, ModalState()), MachineModel())
    starts = [(b.line_no, b.start_s, b.end_s) for b in path.timings]
    assert starts == [
        (2, 0.0, pytest.approx(1.0)),
        (3, pytest.approx(1.0), pytest.approx(1.25)),
        (4, pytest.approx(1.25), pytest.approx(1.75)),
    ]  # G93: 60 / F = 0.5 s
    pos, vel = path.evaluate(np.array([1.1, 1.2]))
    assert np.allclose(pos[:, 0], 0.010) and np.allclose(vel, 0.0)


def test_executes_a_filter_style_program_in_every_plane_and_unit() -> None:
    lines = [
        "G20 G90 G94 F60\n",
        "G1 X1\n",
        "G21 G18 G2 X50.8 Z0 I12.7 K0 F600\n",
        "G17 G91 G3 X-10 Y10 I0 J10\n",
        "G0 X5\n",
    ]
    run = execute_program(lines, MachineModel(step_s=2e-3))
    assert run.commanded_m[0] == pytest.approx([0.0, 0.0])
    end = run.commanded_m[run.time_s >= run.cycle_time_s][0]
    assert end == pytest.approx([(50.8 - 10 + 5) / 1000, 10 / 1000], abs=1e-12)
    assert np.all(np.isfinite(run.realised_m))
    assert run.to_dict()["blocks"] == 4


def test_errors() -> None:
    with pytest.raises(ValueError, match="makes no move"):
        execute_program(["G21 G90\n", "M3 S1000\n"])
    with pytest.raises(ValueError, match="acceleration_mm_s2"):
        MachineModel(acceleration_mm_s2=-1.0)
    with pytest.raises(ValueError, match="radius_mm"):
        circle_program(0.0, 100.0)
    with pytest.raises(ValueError, match="leaves nothing"):
        circular_test(
            execute_program(
                circle_program(10.0, 6000.0, lead_deg=0, settle_s=0), MachineModel(step_s=5e-3)
            ),
            (0.0, 0.0),
            10.0,
            skip_mm=40,
        )
    with pytest.raises(ValueError, match="no block runs on the circle"):
        circular_test(
            execute_program(["G1 X10 F100\n"], MachineModel(step_s=5e-3)), (0.0, 0.0), 50.0
        )


def test_radial_error_of_known_circles() -> None:
    th = np.linspace(0, 2 * np.pi, 721)
    ring = np.stack([0.1 + 0.0502 * np.cos(th), -0.2 + 0.0502 * np.sin(th)], axis=1)
    err = radial_error(ring, (0.1, -0.2), 0.05)
    assert err.max_abs_m == pytest.approx(2e-4) and err.rms_m == pytest.approx(2e-4)
    assert err.circular_deviation_m == pytest.approx(0.0, abs=1e-12)
    assert err.max_fraction == pytest.approx(4e-3)
    # Off-centre by 1e-4: the nominal circle sees +-1e-4, the least-squares circle none.
    off = ring - [0.1001, -0.2]
    err = radial_error(off, (0.0, 0.0), 0.0502)
    assert err.max_abs_m == pytest.approx(1e-4, rel=1e-3)
    assert err.circular_deviation_m < 1e-6
    with pytest.raises(ValueError):
        radial_error(ring[:2], (0.0, 0.0), 0.05)


def test_default_machine_is_the_papers_axis_pair() -> None:
    m = MachineModel()
    assert m.x_axis is PAPER_AXIS and m.y_params is PAPER_AXIS
    assert m.acceleration_mm_s2 is None and m.step_s == 1e-3
    m = MachineModel.from_axes({"Y": PAPER_AXIS}, step_s=2e-3)
    assert m.y_params is PAPER_AXIS and m.x_axis.backlash_motor_rad == 0.0
    assert m.x_axis.b_s2 == PAPER_AXIS.b_s2 and m.step_s == 2e-3
    with pytest.raises(ValueError, match="X or a Y"):
        MachineModel.from_axes({})


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.01, 100.0),
    st.floats(0.0, 200.0),
    st.floats(0.1, 200.0),
    st.floats(0.0, 200.0),
    st.floats(1.0, 5000.0),
)
def test_trapezoid_properties(length: float, v0: float, vn: float, v1: float, accel: float) -> None:
    prof = trapezoid(length, v0, vn, v1, accel)
    assert prof.distance_at(0.0) == 0.0
    assert prof.distance_at(prof.duration) == pytest.approx(length, rel=1e-9, abs=1e-12)
    ts = np.linspace(0.0, prof.duration, 50)
    d = [prof.distance_at(float(t)) for t in ts]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(d))
    assert prof.v_peak <= vn + 1e-12 and prof.v_entry <= min(v0, vn) + 1e-12
    assert prof.v_exit <= min(v1, vn) + 1e-12
    assert prof.duration >= length / vn - 1e-12
    # What was asked is met whenever it is reachable.
    if v0 <= vn and v1 <= vn and abs(v1 * v1 - v0 * v0) <= 2 * accel * length:
        assert (prof.v_entry, prof.v_exit) == (pytest.approx(v0), pytest.approx(v1))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.1, 50.0), st.floats(10.0, 5000.0), st.floats(0.0, 300.0)),
        min_size=1,
        max_size=20,
    )
)
def test_planned_speeds_are_reachable(blocks: list[tuple[float, float, float]]) -> None:
    lengths, accels, limits = (list(x) for x in zip(*blocks, strict=True))
    v = plan_entry_speeds(lengths, accels, limits)
    assert v[0] == 0.0 and v[-1] == 0.0
    for i, (length, a, lim) in enumerate(blocks):
        assert v[i] <= lim + 1e-9
        assert abs(v[i + 1] ** 2 - v[i] ** 2) <= 2 * a * length * (1 + 1e-9) + 1e-9


@pytest.mark.parametrize("change", ["G55", "G92 X0 Y0", "G10 L20 P1 X3", "G43 H1"])
def test_a_move_after_a_frame_change_is_refused_not_invented(change: str) -> None:
    # Where the move goes depends on offsets only the controller holds: the fake CNC must not
    # run the parser's guess as if it were the machine's path.
    program = ["G21 G90 G17 G94 F600\n", "G1 X10 Y0\n", f"{change}\n", "G1 X5 Y2\n"]
    with pytest.raises(ValueError, match=r"line 4: .*frame change.*'G1 X5 Y2'"):
        execute_program(program)
    # The same program without the change runs.
    assert execute_program([program[0], program[1], program[3]]).cycle_time_s > 0.0
