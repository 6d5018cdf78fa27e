"""The batched rigid-body regressor against pinocchio, a textbook Newton-Euler and the energy."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pinocchio as pin
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.models.robot.description import (
    InertiaTensor,
    JointSpec,
    LinkInertial,
    RobotDescription,
    link_parameters,
    load_robot,
    rpy_matrix,
)
from agent.models.robot.regressor import ParameterLayout, parameter_vector, regressor, torques
from tests.support.paths import ROBOTS


def robot_file(name: str) -> RobotDescription:
    return load_robot(ROBOTS / f"{name}.yaml")


# ---------------------------------------------------------------- independent references


def _rx(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1.0]])


def _rz(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0, 0], [s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])


def _tr(x: float, y: float, z: float) -> np.ndarray:
    t = np.eye(4)
    t[:3, 3] = (x, y, z)
    return t


def dh_link_transform(convention: str, j: JointSpec, q: float) -> np.ndarray:
    """Pose of DH frame i in frame i-1, straight from the textbook definitions."""
    theta = q + j.theta_offset_rad
    if convention == "standard":
        return _rz(theta) @ _tr(0, 0, j.d_m) @ _tr(j.a_m, 0, 0) @ _rx(j.alpha_rad)
    return _rx(j.alpha_rad) @ _tr(j.a_m, 0, 0) @ _rz(theta) @ _tr(0, 0, j.d_m)


def newton_euler_reference(
    robot: RobotDescription, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, g: np.ndarray
) -> np.ndarray:
    """Joint torques of one state by the classic world-frame recursion about the centres of mass,
    with rotor inertia Ia*qdd and Coulomb + viscous friction: shares no code with the regressor.
    """
    n = robot.n_joints
    frames = [np.eye(4)]
    for i, j in enumerate(robot.joints):
        frames.append(frames[-1] @ dh_link_transform(robot.convention, j, q[i]))
    # joint i turns about z of frame i-1 (standard) or of frame i (modified)
    axis_frame = frames[:-1] if robot.convention == "standard" else frames[1:]
    z = [f[:3, 2] for f in axis_frame]
    p = [f[:3, 3] for f in axis_frame]
    w = np.zeros(3)
    dw = np.zeros(3)
    acc_ref, p_ref = -g, np.zeros(3)
    forces, moments, coms = [], [], []
    for i, j in enumerate(robot.joints):
        link = j.link
        acc_ref = acc_ref + np.cross(dw, p[i] - p_ref) + np.cross(w, np.cross(w, p[i] - p_ref))
        p_ref = p[i]
        dw = dw + qdd[i] * z[i] + np.cross(w, qd[i] * z[i])
        w = w + qd[i] * z[i]
        rot = frames[i + 1][:3, :3]
        com = frames[i + 1][:3, :3] @ np.asarray(link.com_m) + frames[i + 1][:3, 3]
        r_in = rot @ rpy_matrix(link.inertia_rpy_rad)
        inertia = r_in @ link.inertia_com_kg_m2.matrix() @ r_in.T
        acc_com = acc_ref + np.cross(dw, com - p[i]) + np.cross(w, np.cross(w, com - p[i]))
        forces.append(link.mass_kg * acc_com)
        moments.append(inertia @ dw + np.cross(w, inertia @ w))
        coms.append(com)
    tau = np.zeros(n)
    f_next, n_next = np.zeros(3), np.zeros(3)
    for i in range(n - 1, -1, -1):
        p_next = p[i + 1] if i + 1 < n else p[i]
        n_i = moments[i] + np.cross(coms[i] - p[i], forces[i]) + n_next
        n_i = n_i + np.cross(p_next - p[i], f_next)
        f_next = forces[i] + f_next
        n_next = n_i
        j = robot.joints[i]
        tau[i] = z[i] @ n_i + j.rotor_inertia_kg_m2 * qdd[i]
        tau[i] += j.coulomb_nm * np.sign(qd[i]) + j.viscous_nm_s_rad * qd[i]
    return tau


def random_link(rng: np.random.Generator) -> LinkInertial:
    a = rng.normal(size=(3, 3))
    inertia = a @ a.T * 0.05 + 0.01 * np.eye(3)
    return LinkInertial(
        mass_kg=float(rng.uniform(0.5, 6.0)),
        com_m=tuple(float(v) for v in rng.uniform(-0.2, 0.2, 3)),  # type: ignore[arg-type]
        inertia_com_kg_m2=InertiaTensor(
            xx=inertia[0, 0],
            yy=inertia[1, 1],
            zz=inertia[2, 2],
            xy=inertia[0, 1],
            xz=inertia[0, 2],
            yz=inertia[1, 2],
        ),
        inertia_rpy_rad=tuple(float(v) for v in rng.uniform(-1, 1, 3)),  # type: ignore[arg-type]
    )


def randomised(robot: RobotDescription, seed: int) -> RobotDescription:
    """Same kinematics, random (physically valid) inertial, rotor and friction data."""
    rng = np.random.default_rng(seed)
    joints = tuple(
        replace(
            j,
            link=random_link(rng),
            motor_inertia_kg_m2=float(rng.uniform(1e-5, 1e-4)),
            gear_ratio=float(rng.uniform(20, 120)),
            coulomb_nm=float(rng.uniform(0, 5)),
            viscous_nm_s_rad=float(rng.uniform(0, 5)),
        )
        for j in robot.joints
    )
    return replace(robot, joints=joints)


def random_chain(convention: str, n: int, seed: int) -> RobotDescription:
    """A serial chain with random DH rows (no special angles) and random inertias."""
    rng = np.random.default_rng(seed)
    joints = tuple(
        JointSpec(
            name=f"j{i + 1}",
            a_m=float(rng.uniform(-0.5, 0.5)),
            alpha_rad=float(rng.uniform(-math.pi, math.pi)),
            d_m=float(rng.uniform(-0.3, 0.3)),
            theta_offset_rad=float(rng.uniform(-1, 1)),
            link=random_link(rng),
            position_min_rad=-math.pi,
            position_max_rad=math.pi,
            speed_max_rad_s=3.0,
            accel_max_rad_s2=10.0,
            torque_max_nm=100.0,
            motor_inertia_kg_m2=1e-4,
            gear_ratio=50.0,
            coulomb_nm=1.0,
            viscous_nm_s_rad=2.0,
        )
        for i in range(n)
    )
    g = rng.normal(size=3)
    g *= 9.81 / np.linalg.norm(g)
    return RobotDescription(
        name=f"random-{convention}",
        convention=convention,  # type: ignore[arg-type]
        joints=joints,
        gravity_m_s2=(float(g[0]), float(g[1]), float(g[2])),
    )


def random_states(n: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.uniform(-math.pi, math.pi, (count, n)),
        rng.normal(0.0, 2.0, (count, n)),
        rng.normal(0.0, 5.0, (count, n)),
    )


# ---------------------------------------------------------------- pinocchio


def _se3(t: np.ndarray) -> pin.SE3:
    return pin.SE3(t[:3, :3].copy(), t[:3, 3].copy())


def pinocchio_model(robot: RobotDescription) -> tuple[pin.Model, list[np.ndarray]]:
    """A pinocchio model built from the same DH table, and for each link the 4x4 pose of its DH
    frame in pinocchio's joint frame (which is where pinocchio's parameters are written)."""
    model = pin.Model()
    parent = 0
    dh_in_joint = []
    prev_tail = np.eye(4)  # standard DH: the fixed part Tz(d) Tx(a) Rx(alpha) of the previous row
    for i, j in enumerate(robot.joints):
        if robot.convention == "standard":
            placement = prev_tail @ _rz(j.theta_offset_rad)
            tail = _tr(0, 0, j.d_m) @ _tr(j.a_m, 0, 0) @ _rx(j.alpha_rad)
            dh_in_joint.append(tail)
            prev_tail = tail
        else:
            placement = _rx(j.alpha_rad) @ _tr(j.a_m, 0, 0) @ _tr(0, 0, j.d_m)
            placement = placement @ _rz(j.theta_offset_rad)
            dh_in_joint.append(np.eye(4))
        parent = model.addJoint(parent, pin.JointModelRZ(), _se3(placement), f"j{i + 1}")
        model.appendBodyToJoint(parent, pin.Inertia.Zero(), pin.SE3.Identity())
    model.gravity = pin.Motion(np.r_[np.asarray(robot.gravity_m_s2), 0.0, 0.0, 0.0])
    return model, dh_in_joint


def dh_to_pinocchio_map(dh_in_joint: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """10x10 A with (pinocchio parameters in the joint frame) = A @ (ours in the DH frame),
    found with pinocchio's own spatial-inertia transform on random bodies (the map is linear)."""
    ours, theirs = [], []
    for _ in range(12):
        body = random_link(rng)
        ours.append(link_parameters(body))
        inertia = pin.Inertia(
            body.mass_kg,
            np.asarray(body.com_m),
            rpy_matrix(body.inertia_rpy_rad)
            @ body.inertia_com_kg_m2.matrix()
            @ rpy_matrix(body.inertia_rpy_rad).T,
        )
        theirs.append(_se3(dh_in_joint).act(inertia).toDynamicParameters())
    sol = np.linalg.lstsq(np.array(ours), np.array(theirs), rcond=None)[0]
    return sol.T


def pinocchio_regressor(robot: RobotDescription, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray):
    model, dh_in_joint = pinocchio_model(robot)
    data = model.createData()
    rng = np.random.default_rng(7)
    maps = [dh_to_pinocchio_map(t, rng) for t in dh_in_joint]
    out = np.zeros((q.shape[0], robot.n_joints, 10 * robot.n_joints))
    for k in range(q.shape[0]):
        y_pin = pin.computeJointTorqueRegressor(model, data, q[k], qd[k], qdd[k])
        for i, a in enumerate(maps):
            out[k, :, 10 * i : 10 * i + 10] = y_pin[:, 10 * i : 10 * i + 10] @ a
    return out


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("name", ["ur5e", "puma560", "planar2"])
def test_regressor_matches_pinocchio(name: str) -> None:
    robot = robot_file(name)
    q, qd, qdd = random_states(robot.n_joints, 25, seed=11)
    expected = pinocchio_regressor(robot, q, qd, qdd)
    got = regressor(robot, q, qd, qdd)
    assert got.shape == (25, robot.n_joints, 10 * robot.n_joints)
    assert relative_error(got, expected) < 1e-9


def test_regressor_matches_pinocchio_with_tilted_base() -> None:
    tilt = 0.4  # rad, base turned about x: gravity no longer along axis 1
    robot = robot_file("ur5e").with_gravity((0.0, -9.81 * math.sin(tilt), -9.81 * math.cos(tilt)))
    q, qd, qdd = random_states(6, 15, seed=12)
    assert (
        relative_error(regressor(robot, q, qd, qdd), pinocchio_regressor(robot, q, qd, qdd)) < 1e-9
    )


@pytest.mark.parametrize("convention", ["standard", "modified"])
def test_regressor_matches_pinocchio_on_generic_chains(convention: str) -> None:
    robot = random_chain(convention, 7, seed=3)
    q, qd, qdd = random_states(7, 15, seed=13)
    assert (
        relative_error(regressor(robot, q, qd, qdd), pinocchio_regressor(robot, q, qd, qdd)) < 1e-9
    )


def test_pinocchio_version_is_the_one_reported() -> None:
    major = int(pin.__version__.split(".")[0])
    assert major >= 3  # computeJointTorqueRegressor with the (m, mc, I) ordering used above


# ---------------------------------------------------------------- textbook Newton-Euler


@pytest.mark.parametrize(
    "robot",
    [
        randomised(robot_file("ur5e"), 1),
        randomised(robot_file("puma560"), 2),
        randomised(robot_file("planar2"), 3),
        random_chain("standard", 6, seed=4),
        random_chain("modified", 6, seed=5),
    ],
    ids=["ur5e", "puma560", "planar2", "random-standard", "random-modified"],
)
def test_torques_match_direct_newton_euler(robot: RobotDescription) -> None:
    q, qd, qdd = random_states(robot.n_joints, 30, seed=21)
    got = torques(robot, q, qd, qdd, rotor=True, friction=True)
    g = np.asarray(robot.gravity_m_s2)
    expected = np.array(
        [newton_euler_reference(robot, *s, g) for s in zip(q, qd, qdd, strict=True)]
    )
    assert relative_error(got, expected) < 1e-10


def test_motor_side_signals_feed_rotor_and_friction_columns() -> None:
    robot = randomised(robot_file("ur5e"), 8)
    q, qd, qdd = random_states(6, 10, seed=9)
    rng = np.random.default_rng(10)
    motor_qd, motor_qdd = qd + rng.normal(0, 0.1, qd.shape), qdd + rng.normal(0, 0.1, qdd.shape)
    layout = ParameterLayout(6, rotor=True, friction=True)
    y_link = regressor(robot, q, qd, qdd, rotor=True, friction=True)
    y_dual = regressor(
        robot, q, qd, qdd, rotor=True, friction=True, motor_qd=motor_qd, motor_qdd=motor_qdd
    )
    inertial = layout.inertial_columns()
    np.testing.assert_array_equal(y_dual[:, :, inertial], y_link[:, :, inertial])
    fc, fv = layout.friction_columns()
    for j in range(6):
        np.testing.assert_array_equal(y_dual[:, j, layout.rotor_columns()[j]], motor_qdd[:, j])
        np.testing.assert_array_equal(y_dual[:, j, fv[j]], motor_qd[:, j])
        np.testing.assert_array_equal(y_dual[:, j, fc[j]], np.sign(motor_qd[:, j]))
        others = [c for c in range(layout.size) if c not in inertial and c // 13 != j]
        assert not np.any(y_dual[:, j, others])


# ---------------------------------------------------------------- energy (property test)


def potential_energy(robot: RobotDescription, q: np.ndarray) -> float:
    frame = np.eye(4)
    energy = 0.0
    for i, j in enumerate(robot.joints):
        frame = frame @ dh_link_transform(robot.convention, j, q[i])
        com = frame[:3, :3] @ np.asarray(j.link.com_m) + frame[:3, 3]
        energy -= j.link.mass_kg * float(np.asarray(robot.gravity_m_s2) @ com)
    return energy


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["ur5e", "puma560", "planar2"]),
    q=st.lists(st.floats(-math.pi, math.pi), min_size=6, max_size=6),
)
def test_static_torque_is_the_gradient_of_potential_energy(name: str, q: list[float]) -> None:
    robot = robot_file(name)
    qv = np.asarray(q[: robot.n_joints])
    zero = np.zeros(robot.n_joints)
    tau = torques(robot, qv, zero, zero)[0]
    step = 1e-6
    grad = np.array(
        [
            (potential_energy(robot, qv + step * e) - potential_energy(robot, qv - step * e))
            / (2 * step)
            for e in np.eye(robot.n_joints)
        ]
    )
    assert np.allclose(tau, grad, rtol=1e-6, atol=1e-6 * max(1.0, float(np.max(np.abs(grad)))))


# ---------------------------------------------------------------- layout, inputs, speed


def test_layout_names_and_parameter_vector() -> None:
    robot = robot_file("puma560")
    layout = ParameterLayout(6, rotor=True, friction=True)
    assert layout.size == 78
    assert layout.names[:13] == (
        "m1", "mx1", "my1", "mz1", "xx1", "xy1", "yy1", "xz1", "yz1", "zz1", "Ia1", "fc1", "fv1",
    )  # fmt: skip
    pi = parameter_vector(robot, layout)
    assert pi[layout.index("m2")] == pytest.approx(17.4)
    assert pi[layout.index("Ia1")] == pytest.approx(200e-6 * 62.6111**2)
    assert pi[layout.index("fv6")] == pytest.approx(0.215823)
    # first moment of link 2 about its frame origin: m * c
    assert pi[layout.index("mx2")] == pytest.approx(17.4 * -0.3638)
    with pytest.raises(KeyError, match="no parameter 'zz7'"):
        layout.index("zz7")


def test_bad_inputs_are_refused() -> None:
    robot = robot_file("planar2")
    with pytest.raises(ValueError, match=r"q must have shape \(N, 2\)"):
        regressor(robot, np.zeros((4, 3)), np.zeros((4, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="shapes differ"):
        regressor(robot, np.zeros((4, 2)), np.zeros((5, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="not finite"):
        regressor(robot, np.full((2, 2), np.nan), np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="gravity_m_s2"):
        regressor(robot, np.zeros(2), np.zeros(2), np.zeros(2), gravity_m_s2=(0.0, 9.81))


def test_single_state_gives_one_sample() -> None:
    robot = robot_file("planar2")
    y = regressor(robot, [0.1, 0.2], [0.0, 0.0], [0.0, 0.0])
    assert y.shape == (1, 2, 20)


def test_a_31_s_capture_at_1_khz_gives_every_sample_s_regressor() -> None:
    robot = robot_file("ur5e")
    q, qd, qdd = random_states(6, 31_000, seed=30)
    # Its speed (under 0.8 s) is measured by `make bench` (bench/bench_throughput.py).
    y = regressor(robot, q, qd, qdd, rotor=True, friction=True)
    assert y.shape == (31_000, 6, 78) and np.all(np.isfinite(y))


def test_motor_signals_must_match_the_link_samples() -> None:
    robot = robot_file("planar2")
    q = np.zeros((4, 2))
    with pytest.raises(ValueError, match="motor_qdd has 3 samples, q has 4"):
        regressor(robot, q, q, q, rotor=True, motor_qdd=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="motor_qd has 5 samples, q has 4"):
        regressor(robot, q, q, q, friction=True, motor_qd=np.zeros((5, 2)))
