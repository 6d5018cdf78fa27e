"""Feedrate profiles (Farouki & Swett 2022, section 5.1-5.2; composite of section 7) and the window
choice."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad

from agent.feedrate.bernstein import bernstein_derivative, bernstein_eval, bernstein_integral
from agent.feedrate.example import PAPER_AXIS
from agent.feedrate.filter.window_length import plan_window, take_up_instant_s
from agent.feedrate.profile import (
    BernsteinFeedrate,
    CompositeFeedrate,
    middle_factor,
    middle_ratio,
    symmetric_feedrate,
)

VC = 0.25 * math.pi / 6.0  # the paper's V_c = rho_0 Omega


def basis_sum(c: np.ndarray, tau: np.ndarray) -> np.ndarray:
    n = len(c) - 1
    return sum(c[k] * math.comb(n, k) * (1 - tau) ** (n - k) * tau**k for k in range(n + 1))


# ---------------------------------------------------------------- Bernstein algebra


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=14))
def test_bernstein_eval_derivative_integral(coeffs: list[float]) -> None:
    c = np.array(coeffs)
    tau = np.linspace(0.0, 1.0, 23)
    np.testing.assert_allclose(bernstein_eval(c, tau), basis_sum(c, tau), atol=1e-10)
    d = bernstein_derivative(c)
    h = 1e-6
    mid = tau[1:-1]
    fd = (bernstein_eval(c, mid + h) - bernstein_eval(c, mid - h)) / (2 * h)
    np.testing.assert_allclose(bernstein_eval(d, mid), fd, atol=1e-5 * (1 + np.abs(c).max()))
    s = bernstein_integral(c)
    for t in (0.3, 1.0):
        ref = quad(lambda x: float(bernstein_eval(c, x)), 0.0, t)[0]
        assert float(bernstein_eval(s, t)) == pytest.approx(ref, abs=1e-10)
    # [6]: the integral over [0, 1] is the coefficient mean (eq. 27).
    assert s[-1] == pytest.approx(c.mean())


def test_middle_factor_matches_the_printed_formulas() -> None:
    for f in (-2.8, -1.5, 0.0, 1.0, 2.0):
        assert middle_ratio(f, 4) == pytest.approx((5 + 3 * f) / 8)
        assert middle_ratio(f, 10) == pytest.approx((193 + 63 * f) / 256)
    for r in (-1.0, -0.45, 0.25, 1.0, 1.5):
        assert middle_factor(r, 10) == pytest.approx((256 * r - 193) / 63)  # section 6
    # Section 5.1: V stays positive exactly when f > -5/3 (n=4), f > -193/63 (n=10).
    assert middle_ratio(-5 / 3, 4) == pytest.approx(0.0, abs=1e-15)
    assert middle_ratio(-193 / 63, 10) == pytest.approx(0.0, abs=1e-15)


# ---------------------------------------------------------------- the paper's profile


def test_paper_profile_shape_arc_and_time_penalty() -> None:
    prof = symmetric_feedrate(VC, 0.5, ratio=0.25)
    n, f = 10, middle_factor(0.25)
    assert prof.speed_m_s(0.0) == pytest.approx(0.25 * VC)
    assert prof.min_speed_m_s == pytest.approx(0.25 * VC)
    # Eq. 27, and s(t) from eq. 28 agrees with it.
    assert prof.half_arc_m == pytest.approx((n + f) * VC * 0.5 / (n + 1))
    assert prof.arc_length_m(0.5) - prof.arc_length_m(-0.5) == pytest.approx(2 * prof.half_arc_m)
    assert prof.arc_length_m(0.0) == pytest.approx(0.0, abs=1e-15)
    # Section 5.1: the window takes (n+1)/(n+f) times the constant-feed time of its arc.
    ratio = 2 * 0.5 / (2 * prof.half_arc_m / VC)
    assert ratio == pytest.approx((n + 1) / (n + f))
    assert prof.time_penalty_s == pytest.approx(1.0 - 2 * prof.half_arc_m / VC)
    # ds/dt = V everywhere, inside and outside the window.
    t = np.linspace(-1.0, 1.0, 2001)
    ds = np.gradient(prof.arc_length_m(t), t)
    np.testing.assert_allclose(ds[1:-1], prof.speed_m_s(t)[1:-1], atol=2e-6)
    np.testing.assert_allclose(prof.speed_m_s(np.array([-2.0, 0.7])), VC)


@pytest.mark.parametrize("degree", [4, 6, 10, 16])
def test_paper_profile_is_c_half_n_minus_1_at_the_junctions(degree: int) -> None:
    """All coefficients V_c except the middle: V - V_c ~ B_{n/2}, so V is C^(n/2 - 1)."""
    prof = symmetric_feedrate(VC, 0.5, ratio=0.3, degree=degree)
    k = degree // 2 - 1
    assert prof.continuity_order == k
    for order in range(1, k + 1):
        for t in (-0.5, 0.5):  # inside value equals the outside value (0) at the junction
            assert prof.derivative(t, order) == pytest.approx(0.0, abs=1e-9 * VC)
    assert abs(prof.derivative(-0.5, k + 1)) > 1e-3 * VC
    assert prof.derivative(-0.5, 0) == VC


def test_profile_validation_errors() -> None:
    with pytest.raises(ValueError, match="even integer >= 4"):
        BernsteinFeedrate((1.0,) * 6, 0.5)  # degree 5
    with pytest.raises(ValueError, match=r"V_0 = V_1"):
        BernsteinFeedrate((1.0, 0.5, 1.0, 1.0, 1.0), 0.5)
    with pytest.raises(ValueError, match="half_window_s"):
        BernsteinFeedrate((1.0,) * 5, 0.0)
    with pytest.raises(ValueError, match="retrograde"):
        symmetric_feedrate(VC, 0.5, ratio=-0.5)
    with pytest.raises(ValueError, match="exactly one"):
        symmetric_feedrate(VC, 0.5)


def test_retrograde_profile_goes_back_and_forth() -> None:
    prof = symmetric_feedrate(VC, 0.5, ratio=-0.45, allow_retrograde=True)
    assert prof.is_retrograde
    stops = prof.stop_times_s
    assert len(stops) == 2 and stops[0] == pytest.approx(-stops[1])
    np.testing.assert_allclose(prof.speed_m_s(np.array(stops)), 0.0, atol=1e-12)
    s = prof.arc_length_m(np.array([stops[0], 0.0, stops[1]]))
    assert s[0] > 0 > s[2] and s[1] == pytest.approx(0.0, abs=1e-15)  # past the point and back
    assert prof.excursion_m >= prof.half_arc_m
    assert prof.excursion_m >= s[0]


def test_vectorised_evaluation_keeps_shape() -> None:
    prof = symmetric_feedrate(VC, 0.5, ratio=0.25)
    t = np.linspace(-0.6, 0.6, 12).reshape(3, 4)
    assert prof.speed_m_s(t).shape == (3, 4)
    assert prof.arc_length_m(t).shape == (3, 4)
    np.testing.assert_allclose(prof.speed_m_s(t).ravel(), prof.speed_m_s(t.ravel()))


# ---------------------------------------------------------------- composite profile


@pytest.mark.parametrize("k", [1, 2, 4, 6])
def test_composite_is_exactly_c_k_at_all_four_junctions(k: int) -> None:
    prof = CompositeFeedrate(VC, decel_s=0.4, dwell_s=0.3, accel_s=0.6, continuity=k)
    coef = np.asarray(prof.transition_coefficients)
    for order in range(1, k + 1):  # end coefficients of each derivative vanish exactly
        d = bernstein_derivative(coef, order)
        assert d[0] == 0.0 and d[-1] == 0.0
    d = bernstein_derivative(coef, k + 1)
    assert d[0] != 0.0 and d[-1] != 0.0  # and not one order more
    # The same seen through the time-domain evaluation, one-sidedly at each junction: the jump
    # across it is no larger than the next derivative times the offset (Taylor).
    junctions = [prof.window_start_s, -0.15, 0.15, prof.window_end_s]
    eps = 1e-9
    for tj in junctions:
        for order in range(0, k + 1):
            left = float(prof.derivative(tj - eps, order))
            right = float(prof.derivative(tj + eps, order))
            nxt = max(abs(float(prof.derivative(tj + sgn * eps, order + 1))) for sgn in (-1, 1))
            assert abs(left - right) <= 2.5 * eps * nxt + 1e-12 * VC / 0.4**order


def test_composite_arc_speed_and_penalty() -> None:
    prof = CompositeFeedrate(VC, decel_s=0.4, dwell_s=0.3, accel_s=0.6)
    t = np.linspace(prof.window_start_s - 0.2, prof.window_end_s + 0.2, 4001)
    v = prof.speed_m_s(t)
    assert np.all(v >= -1e-15) and np.all(v <= VC + 1e-15)
    s = prof.arc_length_m(t)
    assert np.all(np.diff(s) >= -1e-15)
    np.testing.assert_allclose(np.gradient(s, t)[1:-1], v[1:-1], atol=2e-6)
    assert prof.arc_length_m(prof.window_start_s) == pytest.approx(-0.5 * VC * 0.4)
    assert prof.arc_length_m(prof.window_end_s) == pytest.approx(0.5 * VC * 0.6)
    np.testing.assert_allclose(prof.arc_length_m(np.array([-0.15, 0.0, 0.15])), 0.0, atol=1e-15)
    assert prof.time_penalty_s == pytest.approx(0.3 + 0.5)


# ---------------------------------------------------------------- window choice


def test_take_up_is_later_when_the_feed_drops() -> None:
    """Slower motion near the turning point gives the motor less error to spin up with."""
    ends = [
        take_up_instant_s(PAPER_AXIS, symmetric_feedrate(VC, 0.5, ratio=r), 0.25)
        for r in (1.0, 0.6, 0.25)
    ]
    assert all(e is not None for e in ends)
    assert ends[0] < ends[1] < ends[2]  # type: ignore[operator]
    # At the constant feed: the lag 0.005001 s plus the interval 0.118743 s of section 4.2.
    assert ends[0] == pytest.approx(0.005001 + 0.118743, abs=2e-5)


def test_plan_window_longest_uses_the_geometric_limit() -> None:
    plan = plan_window(
        PAPER_AXIS, nominal_m_s=VC, radius_m=0.25, allowed_half_arc_m=0.06, ratio=0.25
    )
    assert plan.profile.half_window_s == pytest.approx(plan.geometric_limit_s)
    assert plan.profile.excursion_m == pytest.approx(0.06)
    assert plan.backlash_inside and plan.take_up_end_s is not None
    assert plan.take_up_end_s <= plan.profile.half_window_s
    capped = plan_window(
        PAPER_AXIS,
        nominal_m_s=VC,
        radius_m=0.25,
        allowed_half_arc_m=0.06,
        ratio=0.25,
        max_half_window_s=0.3,
    )
    assert capped.profile.half_window_s == pytest.approx(0.3)


def test_plan_window_shortest_just_contains_the_take_up() -> None:
    plan = plan_window(
        PAPER_AXIS,
        nominal_m_s=VC,
        radius_m=0.25,
        allowed_half_arc_m=0.06,
        ratio=0.25,
        policy="shortest",
    )
    ts = plan.profile.half_window_s
    assert plan.backlash_inside and plan.take_up_end_s is not None
    assert plan.take_up_end_s <= ts
    assert ts - plan.take_up_end_s < 1e-3 * ts  # the bisection stopped at the boundary
    shorter = take_up_instant_s(
        PAPER_AXIS, BernsteinFeedrate(plan.profile.coefficients_m_s, 0.98 * ts), 0.25
    )
    assert shorter is not None and shorter > 0.98 * ts


def test_plan_window_flags_an_infeasible_window_and_checks_inputs() -> None:
    plan = plan_window(
        PAPER_AXIS, nominal_m_s=VC, radius_m=0.25, allowed_half_arc_m=0.002, ratio=0.25
    )
    assert not plan.backlash_inside
    assert plan.profile.half_window_s == pytest.approx(plan.geometric_limit_s)
    with pytest.raises(ValueError, match="max_half_window_s"):
        plan_window(PAPER_AXIS, nominal_m_s=VC, radius_m=0.25, allowed_half_arc_m=math.inf)
    with pytest.raises(ValueError, match="retrograde"):
        plan_window(PAPER_AXIS, nominal_m_s=VC, radius_m=0.25, allowed_half_arc_m=0.05, ratio=-0.45)
    retro = plan_window(
        PAPER_AXIS,
        nominal_m_s=VC,
        radius_m=0.25,
        allowed_half_arc_m=0.05,
        ratio=-0.45,
        allow_retrograde=True,
    )
    assert retro.profile.is_retrograde
    assert retro.profile.excursion_m == pytest.approx(0.05)
