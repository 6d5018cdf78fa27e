"""Signal chain of Madsen et al. 2020: zero-phase filters, central differences, parallel filtering
and decimation, (weighted) least squares, and the checks on a dual-encoder capture."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.capture.model import Capture, CaptureMeta
from agent.errors import EX_DATAERR, CaptureError, EstimationError
from agent.estimation.identification.filters import (
    FilterSettings,
    band_pass,
    central_difference,
    decimation_index,
    dynamics_bandwidth_hz,
    parallel_decimate,
    subgrid,
    zero_phase_lowpass,
)
from agent.estimation.identification.least_squares import least_squares
from agent.estimation.identification.robot_signals import robot_signals
from agent.models.robot.description import load_robot
from tests.support.paths import ROBOTS

FS = 1000.0


def test_zero_phase_lowpass_keeps_a_slow_sine_in_step_and_removes_a_fast_one() -> None:
    t = np.arange(4000) / FS
    slow = np.sin(2 * math.pi * 1.0 * t)
    fast = 0.5 * np.sin(2 * math.pi * 100.0 * t)
    y = zero_phase_lowpass(slow + fast, FS, 10.0)
    inner = slice(500, -500)
    # no lag: the output lies on the slow sine itself, not a shifted copy of it
    assert np.max(np.abs(y[inner] - slow[inner])) < 1e-3
    assert np.std(zero_phase_lowpass(fast, FS, 10.0)[inner]) < 1e-6


def test_zero_phase_lowpass_passes_a_constant_to_the_very_ends() -> None:
    y = zero_phase_lowpass(np.full((300, 2), 1.5), FS, 2.0)
    assert np.allclose(y, 1.5, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.floats(-5, 5), st.floats(-5, 5), st.floats(-5, 5), st.integers(5, 200))
def test_central_difference_is_exact_on_quadratics(a: float, b: float, c: float, n: int) -> None:
    t = np.arange(n) / FS
    x = a + b * t + c * t * t
    assert np.allclose(central_difference(x, FS), b + 2 * c * t, atol=1e-9 * (1 + abs(b) + abs(c)))


def test_band_pass_gives_speed_and_acceleration_of_a_slow_motion() -> None:
    t = np.arange(6000) / FS
    w = 2 * math.pi * 0.5
    _, qd, qdd = band_pass(np.sin(w * t), FS, 2.5)
    inner = slice(1000, -1000)
    assert np.max(np.abs(qd[inner] - w * np.cos(w * t[inner]))) < 1e-3 * w
    assert np.max(np.abs(qdd[inner] + w * w * np.sin(w * t[inner]))) < 1e-3 * w * w


def test_bandwidth_estimate_finds_the_top_harmonic() -> None:
    t = np.arange(20000) / FS
    q = np.stack([np.sin(2 * math.pi * 0.1 * t) + 0.05 * np.sin(2 * math.pi * 0.5 * t)] * 2, 1)
    bw = dynamics_bandwidth_hz(q, FS)
    assert 0.5 <= bw <= 0.7
    with pytest.raises(EstimationError, match="do not move"):
        dynamics_bandwidth_hz(np.ones((100, 2)), FS)


def test_filter_defaults_follow_paper_004() -> None:
    flt = FilterSettings().resolved(FS, 0.5)
    assert flt.order == 4 and flt.cutoff_hz == pytest.approx(2.5)  # 5x the dynamics
    assert flt.decimation == 20 and flt.parallel_cutoff_hz == pytest.approx(20.0)
    # a derived cut-off stops at the parallel one; an explicit one must be below Nyquist
    assert FilterSettings().resolved(FS, 50.0).cutoff_hz == pytest.approx(20.0)
    with pytest.raises(EstimationError, match="Nyquist"):
        FilterSettings(cutoff_hz=600.0).resolved(FS, 1.0)


def test_parallel_decimation_keeps_every_20th_sample_away_from_the_ends() -> None:
    flt = FilterSettings().resolved(FS, 0.5)
    keep = decimation_index(3100, flt)
    assert np.all(np.diff(keep) == 20) and keep[0] == 50 and keep[-1] < 3100 - 50
    t = np.arange(3100) / FS
    x = np.stack([np.sin(2 * math.pi * 0.3 * t), np.zeros_like(t), np.sin(300 * t)], 1)
    y = parallel_decimate(x, flt, keep)
    assert y.shape == (keep.size, 3)
    assert np.allclose(y[:, 0], x[keep, 0], atol=1e-6)
    assert np.all(y[:, 1] == 0.0)
    assert np.max(np.abs(y[:, 2])) < 2e-3  # 48 Hz: filtered out before decimation
    # a smooth signal filtered on the sub-grid gives what the full rate gives
    sub = subgrid(3100, keep, flt)
    assert np.all(np.isin(keep, sub)) and np.all(np.diff(sub) == 5)
    assert np.allclose(parallel_decimate(x[sub, :1], flt, keep, sub), y[:, :1], atol=1e-9)


def test_least_squares_recovers_an_exact_model() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(200, 4))
    theta = np.array([1.0, -2.0, 0.5, 3.0])
    groups = np.repeat([0, 1], 100)
    for method in ("ols", "wls"):
        sol = least_squares(a, a @ theta + 1e-9 * rng.normal(size=200), groups, method)
        assert np.allclose(sol.theta, theta, atol=1e-8)
        assert np.all(sol.relative_std_pct < 1e-5)


def test_wls_weights_each_group_by_its_residual_std_and_wins_when_they_differ() -> None:
    rng = np.random.default_rng(1)
    theta = np.array([1.0, 2.0])
    sigma = np.array([10.0, 0.1])
    err = {"ols": [], "wls": []}
    for _ in range(40):
        a = rng.normal(size=(400, 2))
        groups = np.repeat([0, 1], 200)
        y = a @ theta + rng.normal(size=400) * sigma[groups]
        for method in ("ols", "wls"):
            sol = least_squares(a, y, groups, method)  # type: ignore[arg-type]
            err[method].append(np.linalg.norm(sol.theta - theta))
        # eq. 14: sigma_g from the residual, r_g - b_g degrees of freedom (iterated)
        assert sol.weights == pytest.approx(1.0 / sigma, rel=0.3)
    assert np.mean(err["wls"]) < 0.2 * np.mean(err["ols"])


def test_least_squares_refuses_what_it_cannot_solve() -> None:
    with pytest.raises(EstimationError, match="rows cannot determine"):
        least_squares(np.ones((2, 3)), np.ones(2), np.zeros(2))
    a = np.zeros((10, 2))
    a[:, 0] = 1.0
    with pytest.raises(EstimationError, match="zero in the data"):
        least_squares(a, np.ones(10), np.zeros(10))


# ------------------------------------------------------------------------------- captures


def planar_captures(n: int = 400, **drop: str) -> list[Capture]:
    robot = load_robot(ROBOTS / "planar2.yaml")
    t = np.arange(n) / FS
    caps = []
    for j, spec in enumerate(robot.joints):
        q = 0.3 * np.sin(2 * math.pi * (0.5 + j) * t)
        ch = {
            "link_pos_rad": q,
            "motor_pos_rad": spec.gear_ratio * (q + 1e-4),
            "motor_torque_nm": np.sin(t + j) / spec.gear_ratio,
        }
        ch.pop(drop.get(spec.name, ""), None)
        caps.append(Capture(t, ch, CaptureMeta(joint=spec.name), source=f"{spec.name}.npz"))
    return caps


def test_robot_signals_are_link_side() -> None:
    robot = load_robot(ROBOTS / "planar2.yaml")
    sig = robot_signals(planar_captures(), robot)
    assert sig.link_pos_rad.shape == (400, 2)
    assert np.allclose(sig.motor_pos_rad - sig.link_pos_rad, 1e-4)
    assert np.allclose(sig.motor_torque_nm[:, 0], np.sin(np.arange(400) / FS))
    assert sig.sample_rate_hz == pytest.approx(FS)
    # captures in any order are matched to joints by name
    assert np.array_equal(
        robot_signals(planar_captures()[::-1], robot).link_pos_rad, sig.link_pos_rad
    )


@pytest.mark.parametrize(
    ("drop", "needle"),
    [
        ("link_pos_rad", "joint joint_2: no link-side encoder channel"),
        ("motor_pos_rad", "joint joint_2: no motor-side encoder channel"),
        ("motor_torque_nm", "joint joint_2: no motor_torque_nm channel"),
    ],
)
def test_missing_channels_are_refused_naming_the_joint(drop: str, needle: str) -> None:
    robot = load_robot(ROBOTS / "planar2.yaml")
    with pytest.raises(CaptureError, match=needle) as info:
        robot_signals(planar_captures(joint_2=drop), robot)
    assert info.value.exit_code == EX_DATAERR
    assert info.value.source == "joint_2.npz"


def test_missing_joint_and_foreign_time_base_are_refused() -> None:
    robot = load_robot(ROBOTS / "planar2.yaml")
    with pytest.raises(CaptureError, match="no capture for joint 'joint_2'"):
        robot_signals(planar_captures()[:1], robot)
    caps = planar_captures()
    other = planar_captures(n=401)[1]
    with pytest.raises(CaptureError, match="time base differs"):
        robot_signals([caps[0], other], robot)


def test_saturated_drive_is_refused() -> None:
    robot = load_robot(ROBOTS / "planar2.yaml")
    caps = planar_captures()
    tau = np.array(caps[1].channels["motor_torque_nm"])
    tau[100:120] = robot.joints[1].torque_max_nm / robot.joints[1].gear_ratio
    sat = Capture(
        caps[1].time_s,
        {**caps[1].channels, "motor_torque_nm": tau},
        caps[1].meta,
        source="joint_2.npz",
    )
    with pytest.raises(
        CaptureError, match=r"joint joint_2 saturated: .* on 20 samples from t = 0\.100"
    ):
        robot_signals([caps[0], sat], robot)
    # a drive clipping below the file's limit: a flat top at the extreme value
    tau = np.array(caps[1].channels["motor_torque_nm"])
    tau = np.clip(tau, -0.002, 0.002)
    flat = Capture(caps[1].time_s, {**caps[1].channels, "motor_torque_nm": tau}, caps[1].meta)
    with pytest.raises(CaptureError, match="the mark of a clipping drive"):
        robot_signals([caps[0], flat], robot)
