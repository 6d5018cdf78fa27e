"""Axis with backlash (Farouki & Swett 2022, sections 3-4): closed form, numerical hybrid model,
PI/PID."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from agent.models.axis.model import (
    engaged_harmonic_motion,
    harmonic_backlash_interval,
    harmonic_constants,
    motor_angle_in_gap,
    simulate_harmonic_p,
)
from agent.models.axis.params import AxisParams
from agent.models.axis.pid import gap_take_up_s, simulate_axis

PAPER = AxisParams(
    b_s2=0.0005,
    c_s=0.005,
    gear_ratio=25.0,
    screw_lead_m_per_rad=1.0,
    motor_inertia_fraction=0.35,
    motor_time_constant_s=1.0,
    backlash_motor_rad=0.125664,
)
A_M, OMEGA = 0.25, math.pi / 6.0


def harmonic(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return A_M * np.sin(OMEGA * t), A_M * OMEGA * np.cos(OMEGA * t)


# ---------------------------------------------------------------- parameters


def test_params_reject_bad_values_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"AxisParams\.b_s2.*> 0"):
        dataclasses.replace(PAPER, b_s2=0.0)
    with pytest.raises(ValueError, match=r"motor_inertia_fraction.*\(0, 1\]"):
        dataclasses.replace(PAPER, motor_inertia_fraction=1.5)
    with pytest.raises(ValueError, match=r"backlash_motor_rad"):
        dataclasses.replace(PAPER, backlash_motor_rad=float("nan"))
    with pytest.raises(ValueError, match=r"integral_time_s"):
        dataclasses.replace(PAPER, integral_time_s=-1.0)


def test_from_physical_builds_eq9_and_c_identity() -> None:
    p = AxisParams.from_physical(
        gear_ratio=10.0,
        screw_lead_m_per_rad=0.005 / (2 * math.pi),
        inertia_kg_m2=2e-4,
        damping_nm_s_rad=1e-3,
        motor_inertia_kg_m2=8e-5,
        motor_damping_nm_s_rad=4e-5,
        proportional_gain_v_m=2000.0,
        amplifier_gain_a_v=1.5,
        torque_constant_nm_a=0.3,
        backlash_motor_rad=0.02,
        integral_gain_v_m_s=4000.0,
        derivative_gain_v_s_m=2.0,
    )
    k = 2000.0 * 1.5 * 0.3
    r = 0.005 / (2 * math.pi)
    assert p.b_s2 == pytest.approx(10.0 * 2e-4 / (k * r))  # eq. 9
    assert p.c_s == pytest.approx(10.0 * 1e-3 / (k * r))
    assert p.motor_time_constant_s == pytest.approx(2.0)
    # Section 3.4: C = k_p k_a k_t / J_m must equal N / (eta r b).
    assert p.motor_gain_rad_m_s2 == pytest.approx(k / 8e-5, rel=1e-12)
    assert p.integral_time_s == pytest.approx(0.5)
    assert p.derivative_time_s == pytest.approx(1e-3)
    assert p.controller == "PID"
    assert p.backlash_axis_m == pytest.approx(r * 0.02 / 10.0)


def test_eq7_coefficients_reduce_to_eq8_for_p() -> None:
    assert PAPER.eq7_coefficients == {"a": 0.0, "b": 0.0005, "c": 0.005, "d": 0.0, "e": 0.0}
    pi = dataclasses.replace(PAPER, integral_time_s=0.2, derivative_time_s=0.001)
    co = pi.eq7_coefficients
    assert co["a"] == pytest.approx(0.2 * 0.0005)
    assert co["b"] == pytest.approx(0.2 * (0.005 + 0.001))
    assert co["c"] == pytest.approx(0.2) and co["e"] == pytest.approx(0.2)
    assert co["d"] == pytest.approx(0.2 * 0.001)


# ---------------------------------------------------------------- closed form (section 4)


@pytest.mark.parametrize("c_s", [0.005, 2.0 * math.sqrt(0.0005), 0.08])  # under, critical, over
def test_eq19_satisfies_eq8_from_any_state(c_s: float) -> None:
    p = dataclasses.replace(PAPER, c_s=c_s)
    hc = harmonic_constants(p, A_M, OMEGA)
    t = np.linspace(1.3, 2.5, 24001)
    x, v, a = engaged_harmonic_motion(p, hc, 1.3, 0.1, -0.05, t)
    assert x[0] == pytest.approx(0.1) and v[0] == pytest.approx(-0.05)
    residual = p.b_s2 * a + p.c_s * v + x - A_M * np.sin(OMEGA * t)
    assert np.max(np.abs(residual)) < 1e-12
    # v and a are the derivatives of x (central differences).
    dx, dv = np.gradient(x, t), np.gradient(v, t)
    assert np.max(np.abs(dx[1:-1] - v[1:-1])) < 1e-4 * np.max(np.abs(v))
    assert np.max(np.abs(dv[1:-1] - a[1:-1])) < 1e-4 * np.max(np.abs(a))


def test_gap_integral_eq22_matches_quadrature_of_eq17() -> None:
    hc = harmonic_constants(PAPER, A_M, OMEGA)
    t_i, x_i = 3.005, 0.25003

    def rhs(t: float, y: np.ndarray) -> list[float]:
        return [
            PAPER.motor_gain_rad_m_s2 * (A_M * math.sin(OMEGA * t) - x_i) - PAPER.beta_1_s * y[0],
            y[0],
        ]

    sol = solve_ivp(rhs, (t_i, t_i + 0.2), [0.0, 0.0], rtol=1e-11, atol=1e-13, dense_output=True)
    dts = np.array([0.01, 0.05, 0.1, 0.2])
    angle, speed = motor_angle_in_gap(hc, t_i, x_i, dts)
    ref = sol.sol(t_i + dts)
    np.testing.assert_allclose(angle, ref[1], rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(speed, ref[0], rtol=1e-7, atol=1e-12)


def test_closed_form_run_is_periodic_and_newton_converges() -> None:
    run = simulate_harmonic_p(PAPER, A_M, OMEGA, 33.0)
    assert len(run.reversals) == 5
    for r in run.reversals:
        assert r.reversal_iterations <= 6
        assert r.backlash_iterations <= 20
        # Eq. 21 holds at the solution.
        ang, _ = motor_angle_in_gap(run.constants, r.time_s, r.position_m, r.backlash_s)
        assert float(ang) * r.direction == pytest.approx(PAPER.backlash_motor_rad, abs=1e-10)
    times = [r.time_s for r in run.reversals]
    assert np.allclose(np.diff(times), 6.0, atol=1e-6)
    assert [r.direction for r in run.reversals] == [-1, 1, -1, 1, -1]
    # The axis holds still through each gap and moves again afterwards.
    r0 = run.reversals[0]
    held = run.position_m(np.linspace(r0.time_s, r0.time_s + r0.backlash_s * 0.999, 7))
    assert np.ptp(held) == 0.0
    assert run.position_m(r0.time_s + r0.backlash_s + 0.05)[0] < r0.position_m - 1e-5


def test_backlash_interval_rejects_gap_never_crossed() -> None:
    huge = dataclasses.replace(PAPER, backlash_motor_rad=1e9)
    hc = harmonic_constants(huge, A_M, OMEGA)
    with pytest.raises(ValueError, match="never taken up"):
        harmonic_backlash_interval(huge, hc, 3.0, 0.25, -1)


def test_closed_form_needs_p_controller() -> None:
    with pytest.raises(ValueError, match="P controller only"):
        simulate_harmonic_p(dataclasses.replace(PAPER, integral_time_s=1.0), A_M, OMEGA, 10.0)


# ---------------------------------------------------------------- numerical model


def test_numerical_dead_zone_matches_closed_form() -> None:
    run = simulate_harmonic_p(PAPER, A_M, OMEGA, 21.0)
    num = simulate_axis(
        PAPER,
        harmonic,
        0.0,
        21.0,
        step_s=1e-3,
        initial_position_m=0.0,
        initial_velocity_m_s=A_M * OMEGA,
    )
    assert len(num.intervals) == len(run.reversals) == 3
    for iv, rv in zip(num.intervals, run.reversals, strict=True):
        assert iv.outcome == "new_flank" and iv.direction == rv.direction
        assert iv.start_s == pytest.approx(rv.time_s, abs=1e-10)
        assert iv.duration_s == pytest.approx(rv.backlash_s, abs=1e-10)
    # On its own samples (grid and switch instants) the integrator is exact to round-off.
    assert np.max(np.abs(num.position_m - run.position_m(num.time_s))) < 1e-11


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    b=st.floats(1e-4, 2e-3),
    zeta=st.floats(0.05, 3.0),
    x0=st.floats(-0.01, 0.01),
    v0=st.floats(-0.2, 0.2),
)
def test_engaged_numerics_match_eq19_for_random_axes(
    b: float, zeta: float, x0: float, v0: float
) -> None:
    p = dataclasses.replace(PAPER, b_s2=b, c_s=2.0 * zeta * math.sqrt(b))
    hc = harmonic_constants(p, A_M, OMEGA)
    num = simulate_axis(
        p,
        harmonic,
        0.0,
        1.5,
        step_s=5e-4,
        trigger="none",
        initial_position_m=x0,
        initial_velocity_m_s=v0,
    )
    exact = engaged_harmonic_motion(p, hc, 0.0, x0, v0, num.time_s)[0]
    assert np.max(np.abs(num.position_m - exact)) < 1e-8


def test_ramp_following_error_p_versus_pi() -> None:
    """Eq. 8 lags a ramp by c V; integral action (eq. 7 with T_i) removes the lag."""

    def ramp(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return 0.1 * t, np.full_like(t, 0.1)

    p_run = simulate_axis(PAPER, ramp, 0.0, 3.0, trigger="none")
    assert ramp(p_run.time_s[-1:])[0][0] - p_run.position_m[-1] == pytest.approx(
        PAPER.c_s * 0.1, rel=1e-6
    )
    pi = dataclasses.replace(PAPER, integral_time_s=0.2)
    pi_run = simulate_axis(pi, ramp, 0.0, 12.0, trigger="none")
    assert abs(1.2 - pi_run.position_m[-1]) < 1e-6


@pytest.mark.parametrize("ti, td", [(0.3, 0.0), (0.3, 0.0005), (None, 0.0005)])
def test_pi_pid_gap_matches_independent_integration(ti: float | None, td: float) -> None:
    """Eq. 16 with the full control law, motor from rest: compare with solve_ivp."""
    p = dataclasses.replace(PAPER, integral_time_s=ti, derivative_time_s=td)
    t_i, x_i, z0 = 3.0, 0.2502, 0.0
    got = gap_take_up_s(
        p, harmonic, t_i, x_i, horizon_s=1.0, step_s=1e-3, direction=-1, initial_integral_m_s=z0
    )
    inv_ti = 0.0 if ti is None else 1.0 / ti

    def rhs(t: float, y: np.ndarray) -> list[float]:
        e = A_M * math.sin(OMEGA * t) - x_i
        de = A_M * OMEGA * math.cos(OMEGA * t)
        return [e, p.motor_gain_rad_m_s2 * (e + y[0] * inv_ti + td * de) - p.beta_1_s * y[1], y[1]]

    def crossed(t: float, y: np.ndarray) -> float:
        return y[2] + p.backlash_motor_rad

    crossed.terminal = True  # type: ignore[attr-defined]
    sol = solve_ivp(
        rhs, (t_i, t_i + 1.0), [z0, 0.0, 0.0], events=crossed, rtol=1e-11, atol=1e-14, max_step=1e-3
    )
    assert got is not None
    assert got == pytest.approx(sol.t_events[0][0] - t_i, abs=1e-9)


def test_p_gap_matches_closed_form_interval() -> None:
    hc = harmonic_constants(PAPER, A_M, OMEGA)
    t_i, x_i = 3.0050007, 0.2500334
    closed, _, _ = harmonic_backlash_interval(PAPER, hc, t_i, x_i, -1)
    num = gap_take_up_s(PAPER, harmonic, t_i, x_i, horizon_s=1.0, step_s=1e-3, direction=-1)
    assert num == pytest.approx(closed, abs=1e-11)


@pytest.mark.parametrize("controller", ["PI", "PID"])
def test_pi_pid_dead_zone_runs_reversals(controller: str) -> None:
    p = dataclasses.replace(
        PAPER, integral_time_s=2.0, derivative_time_s=0.0005 if controller == "PID" else 0.0
    )
    assert p.controller == controller
    run = simulate_axis(p, harmonic, 0.0, 14.0, step_s=1e-3)
    assert len(run.intervals) == 2
    for iv in run.intervals:
        assert iv.outcome == "new_flank" and iv.duration_s is not None
        assert 0.05 < iv.duration_s < 0.3
        held = run.position_m[(run.time_s > iv.start_s) & (run.time_s < iv.end_s)]
        assert np.all(held == iv.position_m)
    # Without backlash the dead-zone model is the plain linear loop.
    free = dataclasses.replace(p, backlash_motor_rad=0.0)
    a = simulate_axis(free, harmonic, 0.0, 14.0, step_s=1e-3)
    b = simulate_axis(free, harmonic, 0.0, 14.0, step_s=1e-3, trigger="none")
    t = np.linspace(0.0, 14.0, 1401)
    assert np.max(np.abs(a.position_at(t) - b.position_at(t))) < 1e-7


def test_command_reversing_inside_the_gap_returns_to_old_flank() -> None:
    """A short dip of the command smaller than the gap: the motor turns back (not in the paper)."""
    big = dataclasses.replace(PAPER, backlash_motor_rad=50.0)  # 2 m at the axis

    def dip(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bump = np.where((t > 1.0) & (t < 1.4), np.sin(np.pi * (t - 1.0) / 0.4) ** 2, 0.0)
        dbump = np.where(
            (t > 1.0) & (t < 1.4), np.pi / 0.4 * np.sin(2 * np.pi * (t - 1.0) / 0.4), 0.0
        )
        return 0.05 * t - 0.02 * bump, 0.05 - 0.02 * dbump

    run = simulate_axis(big, dip, 0.0, 1.65, step_s=1e-3)
    first = run.intervals[0]
    assert 1.0 < first.start_s < 1.2  # the command backs up inside the dip
    assert first.outcome == "old_flank"
    assert first.direction == 1  # back on the original, forward flank
    inside = (run.time_s >= first.start_s) & (run.time_s <= first.end_s)
    assert np.all(run.position_m[inside] == first.position_m)  # held through the gap
    after = np.nonzero(run.time_s == first.end_s)[0][-1]
    assert run.engaged[after] and run.velocity_m_s[after] == 0.0  # eq. 14 on the old flank


def test_scheduled_gap_and_inelastic_engagement() -> None:
    run = simulate_axis(
        PAPER, harmonic, 0.0, 4.0, trigger="scheduled", scheduled_s=(3.0,), engagement="inelastic"
    )
    (iv,) = run.intervals
    assert iv.start_s == pytest.approx(3.0, abs=1e-12)
    assert iv.outcome == "new_flank"
    at_end = np.nonzero(run.time_s == iv.end_s)[0]
    assert at_end.size == 2  # before and after re-engagement
    before, after = at_end
    assert abs(run.gap_angle_rad[before]) == pytest.approx(PAPER.backlash_motor_rad, abs=1e-10)
    expected_v = (
        PAPER.motor_inertia_fraction
        * run.motor_speed_rad_s[before]
        * PAPER.screw_lead_m_per_rad
        / PAPER.gear_ratio
    )
    assert run.velocity_m_s[after] == pytest.approx(expected_v, rel=1e-12)
    assert run.velocity_m_s[after] < 0  # moving in the new (negative) direction at once


def test_simulate_axis_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="start_s < end_s"):
        simulate_axis(PAPER, harmonic, 1.0, 1.0)
    with pytest.raises(ValueError, match="trigger"):
        simulate_axis(PAPER, harmonic, 0.0, 1.0, trigger="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="step_s"):
        simulate_axis(PAPER, harmonic, 0.0, 1.0, step_s=0.0)
