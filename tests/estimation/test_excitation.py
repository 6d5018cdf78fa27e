"""Excitation: finite Fourier series that start at rest, stay inside the limits, and whose base
regressor condition number SLSQP lowers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import EstimationError
from agent.estimation.identification.excitation import (
    ExcitationSettings,
    FourierTrajectory,
    condition_number,
    design_excitation,
    random_excitation,
)
from agent.models.robot.description import load_robot
from tests.support.paths import ROBOTS

PLANAR = load_robot(ROBOTS / "planar2.yaml")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 6), st.floats(2.0, 20.0))
def test_random_excitation_starts_at_rest_and_respects_the_limits(
    seed: int, harmonics: int, period: float
) -> None:
    s = ExcitationSettings(period_s=period, harmonics=harmonics, position_halfrange_rad=1.0)
    traj = random_excitation(PLANAR, s, seed=seed)
    q, qd, qdd = traj.evaluate(np.linspace(0.0, period, 400))
    assert np.allclose(qd[[0, -1]], 0.0, atol=1e-9) and np.allclose(qdd[[0, -1]], 0.0, atol=1e-9)
    assert np.allclose(q[0], q[-1])  # periodic
    center = PLANAR.position_limits_rad().mean(axis=1)
    assert np.all(np.abs(q - center) <= 1.0 + 1e-9)
    speed = np.array([j.speed_max_rad_s for j in PLANAR.joints])
    accel = np.array([j.accel_max_rad_s2 for j in PLANAR.joints])
    # the limits hold at the design points; between them a hair more is allowed
    assert np.all(np.abs(qd) <= speed * 1.01) and np.all(np.abs(qdd) <= accel * 1.01)


def test_fourier_derivatives_agree_with_finite_differences() -> None:
    traj = random_excitation(PLANAR, ExcitationSettings(period_s=5.0), seed=3)
    t = np.linspace(0.0, 5.0, 5001)
    q, qd, qdd = traj.evaluate(t)
    assert np.allclose(np.gradient(q, t, axis=0)[2:-2], qd[2:-2], atol=1e-4)
    assert np.allclose(np.gradient(qd, t, axis=0)[2:-2], qdd[2:-2], atol=1e-3)
    assert traj.bandwidth_hz == pytest.approx(5 / 5.0)


def test_sampled_reference_holds_at_rest_before_and_after() -> None:
    traj = random_excitation(PLANAR, ExcitationSettings(period_s=2.0), seed=1)
    t, q, qd, _ = traj.sample(100.0, periods=2, hold_s=0.5)
    assert t.size == 2 * 50 + 400 + 1 and t[1] == pytest.approx(0.01)
    assert np.all(qd[:50] == 0.0) and np.all(qd[-50:] == 0.0)
    assert np.allclose(q[:51], q[0]) and np.allclose(q[-51:], q[0])
    assert np.allclose(q[150], traj.evaluate(1.0)[0][0])


def test_design_lowers_the_condition_number_inside_the_limits() -> None:
    s = ExcitationSettings(period_s=4.0, harmonics=4, maxiter=40)
    res = design_excitation(PLANAR, s)
    assert res.condition_number < 0.8 * res.initial_condition_number
    assert res.condition_number < 40.0
    assert all(v <= 1.0 + 1e-6 for v in res.peak_use.values())
    # the condition number reported is the one of the trajectory returned (up to the sign of
    # a speed that is zero at t = 0 only to rounding, in the Coulomb column)
    q, qd, qdd = res.trajectory.evaluate(
        np.arange(s.samples_per_period) * 4.0 / s.samples_per_period
    )
    assert condition_number(PLANAR, q, qd, qdd) == pytest.approx(res.condition_number, rel=1e-2)
    d = res.to_dict()
    assert d["trajectory"]["period_s"] == 4.0 and len(d["trajectory"]["a"]) == 2
    again = FourierTrajectory(
        **{
            **d["trajectory"],
            "q0_rad": tuple(d["trajectory"]["q0_rad"]),
            "a": tuple(map(tuple, d["trajectory"]["a"])),
            "b": tuple(map(tuple, d["trajectory"]["b"])),
        }
    )
    assert again == res.trajectory


def test_a_motion_of_one_joint_does_not_excite() -> None:
    t = np.linspace(0.0, 4.0, 200)
    q = np.stack([np.sin(2 * math.pi * t / 4.0), np.zeros_like(t)], 1)
    qd = np.gradient(q, t, axis=0)
    assert condition_number(PLANAR, q, qd, np.gradient(qd, t, axis=0)) > 1e6


def test_bad_settings_are_refused() -> None:
    with pytest.raises(EstimationError, match="at least 2 harmonics"):
        random_excitation(PLANAR, ExcitationSettings(harmonics=1))
    with pytest.raises(EstimationError, match="outside the joint limits"):
        random_excitation(PLANAR, ExcitationSettings(position_center_rad=(4.0, 0.0)))
