"""Kinematics and the compliance model of Prod. Eng. 2023 (eqs. 1-7), checked against independent
computations: the IRB 6660's URDF chain, finite differences, the rigid-body regressor."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import ConfigError, EstimationError
from agent.models.robot.compliance import (
    InfeasibleRequestError,
    Payload,
    cartesian_compliance,
    check_poses,
    compliance_model,
    joint_torques,
    predict_deviation,
    sensitivity,
    tcp_deviation,
    with_payload,
)
from agent.models.robot.description import RobotDescription, ToolFrame, load_robot
from agent.models.robot.kinematics import (
    coupling_matrix,
    forward,
    gravity_torques,
    gravity_torques_regressor,
    make_chain,
    position_jacobian,
)
from tests.support.paths import ROBOTS


def robot(name: str) -> RobotDescription:
    return load_robot(ROBOTS / f"{name}.yaml")


IRB = robot("irb6660")
UR5E = robot("ur5e")


def random_poses(r: RobotDescription, count: int, seed: int) -> np.ndarray:
    lim = r.position_limits_rad()
    q = np.random.default_rng(seed).uniform(lim[:, 0], lim[:, 1], (count, r.n_joints))
    for i, j in enumerate(r.joints):  # keep closed chains inside their linkage range
        if j.dh_range_rad is not None:
            c = coupling_matrix(r)[i]
            rest = q @ c - q[:, i]
            q[:, i] = np.clip(np.clip(q[:, i] + rest, *j.dh_range_rad) - rest, *lim[i])
    return q


# -- kinematics -------------------------------------------------------------------------------


def _rot(axis: str, t: float) -> np.ndarray:
    c, s = math.cos(t), math.sin(t)
    return {
        "x": np.array([[1, 0, 0], [0, c, -s], [0, s, c]]),
        "y": np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]),
        "z": np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]),
    }[axis]


def irb_urdf_flange(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROS-Industrial's irb6660_205_190 chain (the source of the robot file), serial joint 3
    = controller axis 3 - axis 2 (Prod. Eng. 2023 eq. 7). Returns the flange and tool0's z axis."""
    serial = [q[0], q[1], q[2] - q[1], q[3], q[4], q[5]]
    origins = [(0, 0, 0.8145), (0.3, 0, 0), (0, 0, 0.7), (0, 0, 0.28), (0.893, 0, 0), (0.2, 0, 0)]
    rot, pos = np.eye(3), np.zeros(3)
    for origin, axis, angle in zip(origins, "zyyxyx", serial, strict=True):
        pos = pos + rot @ np.array(origin, dtype=float)
        rot = rot @ _rot(axis, angle)
    return pos, (rot @ _rot("y", math.pi / 2))[:, 2]


def test_ur5e_zero_pose_is_universal_robots_home() -> None:
    # UR5e at q = 0: x = a2 + a3, y = -(d4 + d6), z = d1 - d5
    tcp = forward(make_chain(UR5E), np.zeros(6)).tcp_pos[0]
    assert tcp == pytest.approx([-0.8172, -0.2329, 0.0628], abs=1e-12)


def test_irb6660_file_matches_the_ros_industrial_urdf() -> None:
    chain = make_chain(dataclasses.replace(IRB, tool=None))
    for q in random_poses(IRB, 20, seed=1):
        pose = forward(chain, q)
        flange, tool_z = irb_urdf_flange(q)
        assert pose.flange_pos[0] == pytest.approx(flange, abs=1e-12)
        assert pose.tcp_rot[0][:, 2] == pytest.approx(tool_z, abs=1e-12)


def test_parallelogram_keeps_the_upper_arm_orientation_when_axis_2_moves() -> None:
    """Eq. 7: with the controller's axis 3 fixed, moving axis 2 translates the upper arm."""
    chain = make_chain(IRB)
    q = np.array([0.2, -0.3, 0.4, 0.1, 0.5, -0.2])
    moved = q.copy()
    moved[1] += 0.6
    a, b = forward(chain, q), forward(chain, moved)
    assert a.axis_dir[0, 3] == pytest.approx(b.axis_dir[0, 3], abs=1e-12)  # axis 4 direction
    assert not np.allclose(a.axis_point[0, 3], b.axis_point[0, 3])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["ur5e", "irb6660", "puma560"]))
def test_position_jacobian_matches_finite_differences(seed: int, name: str) -> None:
    r = robot(name)
    chain = make_chain(r)
    q = random_poses(r, 1, seed)[0]
    jac = position_jacobian(chain, forward(chain, q))[0]
    h = 1e-6
    for i in range(r.n_joints):
        up, down = q.copy(), q.copy()
        up[i] += h
        down[i] -= h
        fd = (forward(chain, up).tcp_pos[0] - forward(chain, down).tcp_pos[0]) / (2 * h)
        assert jac[:, i] == pytest.approx(fd, abs=1e-8)


@pytest.mark.parametrize("name", ["ur5e", "puma560", "planar2"])
def test_gravity_torques_agree_with_the_rigid_body_regressor(name: str) -> None:
    r = robot(name)
    chain = make_chain(r)
    q = random_poses(r, 40, seed=3)
    fast = gravity_torques(chain, q)
    reference = gravity_torques_regressor(r, q, chain.coupling)
    assert fast == pytest.approx(reference, abs=1e-9 * max(1.0, np.abs(reference).max()))


def test_gravity_torques_of_a_closed_chain_follow_virtual_work() -> None:
    """IRB with a payload: C^T tau~ from the regressor, and dV/dq by finite differences."""
    r = with_payload(IRB, Payload(150.0, (0.1, 0.05, 0.3)))
    chain = make_chain(r)
    q = random_poses(r, 5, seed=4)
    fast = gravity_torques(chain, q)
    assert fast == pytest.approx(gravity_torques_regressor(r, q, chain.coupling), abs=1e-8)

    def potential(qq: np.ndarray) -> float:  # only the payload link has mass
        pose = forward(make_chain(dataclasses.replace(r, tool=ToolFrame((0.1, 0.05, 0.3)))), qq)
        return float(150.0 * 9.81 * pose.tcp_pos[0, 2])

    h = 1e-6
    for i in range(6):
        up, down = q[0].copy(), q[0].copy()
        up[i] += h
        down[i] -= h
        assert fast[0, i] == pytest.approx((potential(up) - potential(down)) / (2 * h), abs=1e-4)


# -- compliance model -----------------------------------------------------------------------


def test_joint_torques_are_the_lever_arm_cross_force() -> None:
    """Eqs. 4-5 on simple cases: a vertical force does not load the vertical axis 1, and a
    TCP on axis 6 (UR5e, no tool) is never loaded about it."""
    irb = compliance_model(IRB)
    q = random_poses(IRB, 6, seed=5)
    assert joint_torques(irb, q, [0.0, 0.0, 300.0])[:, 0] == pytest.approx(0.0, abs=1e-9)
    ur = compliance_model(UR5E)
    q = random_poses(UR5E, 6, seed=6)
    assert joint_torques(ur, q, [120.0, -80.0, 50.0])[:, 5] == pytest.approx(0.0, abs=1e-9)
    # axis 1 of the IRB at q = 0: TCP at x = 1.743 m, a force along y gives 1.743 * Fy
    assert joint_torques(irb, np.zeros(6), [0.0, 100.0, 0.0])[0, 0] == pytest.approx(174.3)


def test_deviation_is_j_k_inverse_j_transpose_f_for_small_forces() -> None:
    model = compliance_model(IRB)
    k = model.nominal_stiffness()
    q = random_poses(IRB, 8, seed=7)
    f = np.random.default_rng(8).uniform(-300, 300, (8, 3))
    linear = np.einsum("bij,bj->bi", cartesian_compliance(model, q, k), f)
    exact = tcp_deviation(model, q, f, k)
    # second-order effect of |dq| ~ 1e-4 rad
    assert exact == pytest.approx(linear, rel=2e-3, abs=2e-9)
    assert np.abs(exact).max() > 1e-4  # tenths of a millimetre: the paper's order


@pytest.mark.parametrize("with_gravity", [False, True])
def test_sensitivity_matches_central_differences(with_gravity: bool) -> None:
    r = with_payload(UR5E, Payload(2.0, (0.05, 0.0, 0.1)))
    model = compliance_model(
        dataclasses.replace(r, tool=ToolFrame((0.08, 0.0, 0.12))), with_gravity=with_gravity
    )
    k = model.nominal_stiffness()
    q = random_poses(r, 6, seed=9)
    f = np.random.default_rng(10).uniform(-100, 100, (6, 3))
    s = sensitivity(model, q, f, k)
    for i in range(6):
        h = 1e-4 * k[i]
        up, down = k.copy(), k.copy()
        up[i] += h
        down[i] -= h
        fd = (tcp_deviation(model, q, f, up) - tcp_deviation(model, q, f, down)) / (2 * h)
        assert s[:, :, i] == pytest.approx(fd, rel=1e-6, abs=1e-6 * np.abs(fd).max())


def test_gravity_changes_the_deviation_only_at_second_order() -> None:
    r = with_payload(UR5E, Payload(3.0, (0.05, 0.0, 0.1)))
    plain, heavy = compliance_model(r), compliance_model(r, with_gravity=True)
    k = plain.nominal_stiffness()
    q = random_poses(r, 4, seed=11)
    f = [30.0, -20.0, 10.0]
    a, b = tcp_deviation(plain, q, f, k), tcp_deviation(heavy, q, f, k)
    assert not np.allclose(a, b, rtol=0, atol=1e-12)
    assert b == pytest.approx(a, rel=0.05, abs=1e-7)


def test_prediction_propagates_the_stiffness_covariance() -> None:
    model = compliance_model(IRB)
    k = model.nominal_stiffness()
    q = np.radians([10.0, 20.0, 30.0, 0.0, 40.0, 0.0])
    cov = np.diag((0.1 * k) ** 2)
    pred = predict_deviation(model, q, [0.0, 300.0, 0.0], k, cov)
    s = sensitivity(model, q, [0.0, 300.0, 0.0], k)[0]
    assert pred.covariance_m2[0] == pytest.approx(s @ cov @ s.T)
    zero = predict_deviation(model, q, [0.0, 300.0, 0.0], k, np.zeros((6, 6)))
    assert zero.std_m == pytest.approx(0.0)
    assert set(pred.to_dict()) >= {"deviation_m", "deviation_std_m", "covariance_m2"}


def test_unreachable_poses_name_the_joint() -> None:
    model = compliance_model(IRB)
    with pytest.raises(InfeasibleRequestError, match="joint axis_2: pose asks for 2 rad"):
        check_poses(model, np.array([[0.0, 2.0, 0.0, 0.0, 0.0, 0.0]]))
    with pytest.raises(InfeasibleRequestError, match=r"joint axis_3 \(closed chain\)") as err:
        check_poses(model, np.radians([[0.0, -30.0, 60.0, 0.0, 0.0, 0.0]]))
    assert err.value.subject == "joint axis_3 (closed chain)"
    assert isinstance(err.value, EstimationError)


def test_payload_merges_mass_and_centre_of_mass() -> None:
    r = with_payload(UR5E, Payload(2.0, (0.1, 0.0, 0.0)))
    last, before = r.joints[-1].link, UR5E.joints[-1].link
    assert last.mass_kg == pytest.approx(before.mass_kg + 2.0)
    assert last.com_m[0] == pytest.approx(0.2 / last.mass_kg)
    assert np.linalg.eigvalsh(last.inertia_com_kg_m2.matrix()).min() >= 0
    assert with_payload(UR5E, Payload(0.0, (0.0, 0.0, 0.0))) is UR5E


def test_robot_file_coupling_errors_name_file_and_line(tmp_path: Path) -> None:
    text = (ROBOTS / "irb6660.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("{joint: axis_2, factor: -1.0}", "{joint: axis_9, factor: -1.0}"))
    where = r"joints\[2\]\.dh_coupling\[0\]\.joint: no joint 'axis_9'"
    with pytest.raises(ConfigError, match=where):
        load_robot(bad)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "axis_2, factor" in t)
    with pytest.raises(ConfigError, match=f"{bad}:{line}:"):
        load_robot(bad)


def test_a_joint_without_stiffness_is_a_config_error() -> None:
    joints = list(IRB.joints)
    joints[4] = dataclasses.replace(joints[4], stiffness_nm_rad=None)
    with pytest.raises(ConfigError, match="axis_5 have no stiffness_nm_rad"):
        compliance_model(dataclasses.replace(IRB, joints=tuple(joints))).nominal_stiffness()
