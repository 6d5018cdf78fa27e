"""Acceptance: section 4.2 to the printed digits, and the shape of figure 11 (Farouki & Swett
2022)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from agent.feedrate.example import PAPER_AXIS, Farouki2022Example, farouki2022_example
from agent.feedrate.figure11 import (
    Figure11Sweep,
    figure11_ratios,
    figure11_sweep,
    simulate_turning_point,
)
from agent.feedrate.profile import CompositeFeedrate, symmetric_feedrate


@pytest.fixture(scope="module")
def example() -> Farouki2022Example:
    return farouki2022_example()


def printed(value: float, digits: int) -> float:
    return round(value, digits)


def test_section_4_2_to_the_printed_digits(example: Farouki2022Example) -> None:
    assert printed(example.gamma_1_s, 6) == 5.0
    assert printed(example.lambda_1_s, 6) == 44.440972
    assert f"{example.motor_gain_rad_m_s2:.6e}" == "1.428571e+05"
    assert printed(example.p, 6) == -1.000130
    assert printed(example.q, 6) == 0.002619
    assert printed(example.phi_rad, 6) == 1.088448
    assert printed(example.steady_backlash_s, 6) == 0.118743
    assert printed(example.reversal_lag_s, 6) == 0.005001
    # The inputs the paper prints alongside them.
    assert printed(example.discriminant_s2, 6) == -0.001975
    assert printed(example.omega_rad_s, 6) == 0.523599
    assert example.period_s == pytest.approx(12.0, abs=1e-9)


def test_every_reversal_agrees_and_the_lag_is_the_loop_phase(example: Farouki2022Example) -> None:
    assert len(example.reversals) == 5
    for r in example.reversals:
        assert printed(r.backlash_s, 6) == 0.118743
        assert printed(r.lag_s, 6) == 0.005001
    # The reversal lag is the engaged loop's phase lag atan2(q, -p) / Omega.
    assert example.reversal_lag_s == pytest.approx(example.steady_lag_s, abs=1e-12)
    d = example.to_dict()
    json.dumps(d)
    for key, value in d["printed"].items():
        assert d[key] == pytest.approx(value, rel=5e-6, abs=5e-7), key


@pytest.fixture(scope="module")
def sweep() -> Figure11Sweep:
    # Coarse grid: the paper's 0.1 steps, refined near the two minima; 0.02 s a ratio.
    ratios = sorted({*figure11_ratios(26), -0.45, -0.35, 0.25, 0.35})
    return figure11_sweep(ratios)


def test_figure11_shape(sweep: Figure11Sweep) -> None:
    rows = {round(r.ratio, 6): r for r in sweep.rows}
    for key in ("max_radial_error", "rms_radial_error"):
        at_one = getattr(rows[1.0], key)
        # Above 1 (speeding up) the error only grows.
        above = [getattr(rows[r], key) for r in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5)]
        assert np.all(np.diff(above) > 0), key
        # A shallow minimum without retrograde motion near 0.25 (tolerance +-0.1) ...
        shallow = sweep.minimum(0.0, 1.0, key)
        assert abs(shallow.ratio - 0.25) <= 0.1, (key, shallow.ratio)
        assert 0.5 < getattr(shallow, key) / at_one < 0.9, key
        # ... and the deepest with retrograde motion near -0.45 (tolerance +-0.1).
        deep = sweep.minimum(-1.0, 1.5, key)
        assert abs(deep.ratio + 0.45) <= 0.1, (key, deep.ratio)
        assert getattr(deep, key) < 0.25 * at_one, key
        assert deep.retrograde
        # It is a minimum, not an edge: the error rises on both sides.
        assert getattr(rows[-0.7], key) > getattr(deep, key) * 2
        assert getattr(rows[-0.3], key) > getattr(deep, key) * 2
    assert rows[1.0].max_radial_error_m == pytest.approx(rows[1.0].max_radial_error * 0.25)
    json.dumps(sweep.to_dict())


def test_figure11_row_values_and_setup(sweep: Figure11Sweep) -> None:
    assert sweep.degree == 10 and sweep.half_window_s == 0.5
    assert sweep.lead_angle_rad == pytest.approx(math.pi / 2)
    assert sweep.nominal_m_s == pytest.approx(0.25 * math.pi / 6)
    for r in sweep.rows:
        assert r.middle_factor == pytest.approx((256 * r.ratio - 193) / 63)
        assert r.x_backlash_s is not None and 0.05 < r.x_backlash_s < 0.5
        assert r.rms_radial_error < r.max_radial_error
    # Constant feed: the radial error of a gap held ~0.12 s, a few tenths of a mm on 0.25 m.
    one = next(r for r in sweep.rows if r.ratio == 1.0)
    assert 2e-3 < one.max_radial_error < 2.5e-3


def test_the_deep_minimum_is_a_kink_set_by_t_star() -> None:
    """The deep minimum sits where the error during the gap (falling with the ratio) meets the
    error after re-engagement (rising): -0.40 at the paper's t* = 0.5 s on a 0.01 grid, and
    the paper's -0.45 only with t* = 0.45 s (see agent.feedrate.example's docstring)."""
    ratios = [round(-0.50 + 0.01 * k, 2) for k in range(16)]  # -0.50 .. -0.35
    paper = figure11_sweep(ratios)
    deep = paper.minimum(-1.0, 0.0)
    assert deep.ratio == pytest.approx(-0.40)
    assert paper.minimum(-1.0, 0.0, "rms_radial_error").ratio == pytest.approx(-0.40)
    rows = {round(r.ratio, 2): r for r in paper.rows}
    # A kink, not a smooth bottom: the rise past it is several times the fall before it.
    fall = rows[-0.41].max_radial_error - deep.max_radial_error
    rise = rows[-0.39].max_radial_error - deep.max_radial_error
    assert rise > 3 * fall > 0
    shorter = figure11_sweep(ratios, half_window_s=0.45)
    assert shorter.half_window_s == 0.45
    assert -0.46 <= shorter.minimum(-1.0, 0.0).ratio <= -0.43


def test_full_dead_zone_model_agrees_without_retrograde_motion() -> None:
    """Scheduling the gap at the commanded turning point (section 5.3) is a close approximation
    of the dead zone triggered by the axis's own reversal as long as the feed stays positive."""
    paper = figure11_sweep([0.25, 1.0])
    full = figure11_sweep([0.25, 1.0], model="dead_zone")
    for a, b in zip(paper.rows, full.rows, strict=True):
        assert b.max_radial_error == pytest.approx(a.max_radial_error, rel=0.03)
        assert b.rms_radial_error == pytest.approx(a.rms_radial_error, rel=0.03)
    # At constant feed the circle run reproduces the steady interval of section 4.2.
    assert full.rows[1].x_backlash_s == pytest.approx(0.118743, abs=2e-6)


def test_turning_point_run_geometry() -> None:
    prof = symmetric_feedrate(0.25 * math.pi / 6, 0.5, ratio=0.25)
    run = simulate_turning_point(prof, radius_m=0.25)
    # The command stays on the circle; the executed path leaves it only through the dynamics.
    cmd_x, _ = run.command.x(run.time_s)
    cmd_y, _ = run.command.y(run.time_s)
    np.testing.assert_allclose(np.hypot(cmd_x + 0.25, cmd_y), 0.25, atol=1e-15)
    assert run.time_s[0] == pytest.approx(-0.5) and run.time_s[-1] == pytest.approx(0.5)
    assert np.any(run.time_s == 0.0)
    (iv,) = run.x.intervals
    assert iv.start_s == 0.0 and iv.outcome == "new_flank"
    assert run.y.intervals == ()
    json.dumps(run.to_dict())


def test_composite_profile_runs_through_the_same_simulation() -> None:
    vc = 0.25 * math.pi / 6
    prof = CompositeFeedrate(vc, decel_s=0.4, dwell_s=0.2, accel_s=0.4)
    run = simulate_turning_point(prof, radius_m=0.25, model="dead_zone")
    assert run.max_radial_error < 3e-3
    assert all(i.end_s is not None for i in run.x.intervals)
    assert run.x.params == PAPER_AXIS
