"""What the compliance model leaves out (agent.models.robot.compliance_errors): each simulated
error does what it says, and the estimator's first-order forms match the exact ones."""

from __future__ import annotations

import numpy as np
import pytest

from agent.models.robot.compliance import compliance_model, tcp_deviation
from agent.models.robot.compliance_errors import (
    MismatchDraw,
    TcpMismatch,
    draw_mismatch,
    geometry_names,
    mismatched_deviation,
    rotation,
    simulate_tcp_mismatch,
    tilt_columns,
    unmodelled_share,
    with_geometry_errors,
)
from agent.models.robot.description import load_robot
from agent.models.robot.kinematics import body_frames, forward
from tests.support.paths import ROBOTS

IRB = compliance_model(load_robot(ROBOTS / "irb6660.yaml"))
K = IRB.nominal_stiffness()
Q = np.radians([[10.0, 20.0, 40.0, 30.0, -40.0, 60.0], [-30.0, 5.0, 30.0, -90.0, 60.0, 10.0]])
F = np.array([[300.0, -300.0, 300.0], [-300.0, 300.0, 300.0]])


def exact(**changes: object) -> MismatchDraw:
    base = MismatchDraw(IRB, np.zeros((6, 2)), np.eye(3), 1.0)
    return MismatchDraw(**{**vars(base), **changes})


def test_no_mismatch_is_the_papers_model() -> None:
    draw = draw_mismatch(IRB, TcpMismatch(), np.random.default_rng(1))
    assert mismatched_deviation(Q, F, K, draw) == pytest.approx(tcp_deviation(IRB, Q, F, K))
    assert unmodelled_share(IRB, Q, F, K, draw) == 0.0
    data = simulate_tcp_mismatch(Q, F, K, 1e-6, draw, np.random.default_rng(2))
    assert np.all(data.force_n == F) and np.all(data.sigma_m == 1e-6)
    assert np.abs(data.deviation_m - tcp_deviation(IRB, Q, F, K)).max() < 6e-6


def test_the_force_sensor_reads_more_than_is_applied() -> None:
    dev = mismatched_deviation(Q, F, K, exact(force_scale=1.02))
    # the robot feels F / 1.02: the deviation shrinks by as much (to first order in |dq|)
    assert dev == pytest.approx(tcp_deviation(IRB, Q, F, K) / 1.02, rel=1e-4)


def test_the_laser_frame_turns_the_reading() -> None:
    turn = rotation([0.0, 0.0, 0.01])
    dev = mismatched_deviation(Q, F, K, exact(laser_rotation=turn))
    assert dev == pytest.approx(tcp_deviation(IRB, Q, F, K) @ turn.T)
    assert np.linalg.norm(dev, axis=1) == pytest.approx(
        np.linalg.norm(tcp_deviation(IRB, Q, F, K), axis=1)
    )


def test_tilting_links_add_a_deflection_linear_in_the_force() -> None:
    tilt = np.full((6, 2), 0.06) / K[:, None]
    one = mismatched_deviation(Q, F, K, exact(tilt_rad_nm=tilt)) - tcp_deviation(IRB, Q, F, K)
    two = mismatched_deviation(Q, 2 * F, K, exact(tilt_rad_nm=tilt))
    two -= tcp_deviation(IRB, Q, 2 * F, K)
    assert two == pytest.approx(2 * one, rel=1e-9)
    assert np.all(np.sum(one * F, axis=1) > 0)  # a compliance: it gives way to the force


def test_a_tilt_column_is_the_tcp_moving_under_that_small_rotation() -> None:
    """Column x-first of link 2: turn everything beyond joint 2's origin about its x axis by
    the twist the force makes; the TCP moves by the column."""
    q = Q[:1]
    cols = tilt_columns(IRB.chain, q, F[:1])  # (1, 3, 24)
    frame = body_frames(IRB.chain, q)[0, 1]
    axis, origin = frame[:3, 0], frame[:3, 3]
    tcp = forward(IRB.chain, q).tcp_pos[0]
    lever = np.cross(axis, tcp - origin)
    twist = 1e-9 * float(lever @ F[0])  # compliance 1e-9 rad/(N·m)
    moved = origin + rotation(axis * twist) @ (tcp - origin)
    assert cols[0, :, 4] * 1e-9 == pytest.approx(moved - tcp, rel=1e-6)


def test_geometry_errors_move_the_named_parameters() -> None:
    names = geometry_names(IRB.robot)
    assert len(names) == 4 * 6 + 3 and names[0] == "axis_1.a_m" and names[-1] == "tool.z_m"
    delta = np.zeros(len(names))
    delta[names.index("axis_3.a_m")] = 1e-3
    delta[names.index("tool.x_m")] = -2e-3
    moved = with_geometry_errors(IRB.robot, delta)
    assert moved.joints[2].a_m == pytest.approx(0.701)
    assert moved.tool is not None and moved.tool.xyz_m[0] == pytest.approx(0.148)
    with pytest.raises(ValueError, match="27 values"):
        with_geometry_errors(IRB.robot, np.zeros(3))


def test_realistic_draws_differ_per_experiment_and_are_reproducible() -> None:
    mismatch = TcpMismatch(0.06, 5e-4, 1e-3, 5e-3, 0.01)
    a = draw_mismatch(IRB, mismatch, np.random.default_rng(7))
    b = draw_mismatch(IRB, mismatch, np.random.default_rng(7))
    c = draw_mismatch(IRB, mismatch, np.random.default_rng(8))
    assert a.force_scale == b.force_scale != c.force_scale
    assert np.all(a.tilt_rad_nm > 0)  # a compliance is never negative
    share = unmodelled_share(IRB, Q, F, K, a)
    assert 0.005 < share < 0.5
    with pytest.raises(ValueError, match="force_scale_sd"):
        TcpMismatch(force_scale_sd=-0.1)
