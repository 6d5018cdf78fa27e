"""`jha import urdf` (agent.models.robot.urdf): the DH chain derived from a URDF places every
joint axis and every link's mass where the URDF does, at any pose: checked against a direct
evaluation of the URDF (the test's own forward kinematics, from the URDF's origins and axes),
for a chain with perpendicular, parallel and offset axes, an inertial with its own rotation and
a fixed child link. The robot file written reads back to the same description."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agent.cli.main import main
from agent.errors import ConfigError
from agent.models.robot.description import load_robot, rpy_matrix
from agent.models.robot.kinematics import forward, gravity_torques, make_chain
from agent.models.robot.urdf import read_urdf

# Axes z, -y (offset), y parallel to it (an elbow), z; rotated origins and inertials; a fixed
# tool link of 0.4 kg on the last link.
URDF = """<?xml version="1.0"?>
<robot name="testarm">
  <link name="world"/>
  <joint name="mount" type="fixed"><parent link="world"/><child link="base"/>
    <origin xyz="1 2 0.5" rpy="0 0 0.3"/></joint>
  <link name="base"><inertial><mass value="5"/><origin xyz="0 0 0.05"/>
    <inertia ixx="0.1" iyy="0.1" izz="0.1" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/>
    <origin xyz="0 0 0.2" rpy="0 0 0"/><axis xyz="0 0 1"/>
    <limit lower="-3" upper="3" velocity="2" effort="100"/></joint>
  <link name="l1"><inertial><mass value="3"/><origin xyz="0.02 -0.05 0.1" rpy="0.2 0 0.1"/>
    <inertia ixx="0.02" iyy="0.015" izz="0.01" ixy="0.001" ixz="0" iyz="0.002"/></inertial></link>
  <joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/>
    <origin xyz="0.05 0 0.15" rpy="0 0 0"/><axis xyz="0 -1 0"/>
    <limit lower="-2" upper="2" velocity="2" effort="100"/>
    <dynamics friction="1.5" damping="0.3"/></joint>
  <link name="l2"><inertial><mass value="2.5"/><origin xyz="0.2 0.01 0.0"/>
    <inertia ixx="0.01" iyy="0.03" izz="0.03" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="j3" type="revolute"><parent link="l2"/><child link="l3"/>
    <origin xyz="0.4 0.1 0" rpy="0 0 0"/><axis xyz="0 1 0"/>
    <limit lower="-2" upper="2" velocity="2" effort="50"/>
    <dynamics friction="-0.2" damping="0.1"/></joint>
  <link name="l3"><inertial><mass value="1.5"/><origin xyz="0.15 0 0.02"/>
    <inertia ixx="0.004" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="j4" type="revolute"><parent link="l3"/><child link="l4"/>
    <origin xyz="0.3 0 0" rpy="0 1.5707963267948966 0"/><axis xyz="0 0 1"/>
    <limit lower="-3" upper="3" velocity="3" effort="20"/></joint>
  <link name="l4"><inertial><mass value="0.8"/><origin xyz="0 0.01 0.05"/>
    <inertia ixx="0.001" iyy="0.001" izz="0.0005" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="tool" type="fixed"><parent link="l4"/><child link="tool_link"/>
    <origin xyz="0 0 0.1" rpy="0.3 0 0"/></joint>
  <link name="tool_link"><inertial><mass value="0.4"/><origin xyz="0 0 0.03"/>
    <inertia ixx="0.0002" iyy="0.0002" izz="0.0001" ixy="0" ixz="0" iyz="0"/></inertial></link>
</robot>
"""


def _urdf_reference(robot_urdf: Path, q: np.ndarray) -> tuple[list, np.ndarray]:
    """Each joint's axis (point, direction) and gravity torque, straight from the URDF: the
    chain of origins and axis rotations, fixed links carried along; no DH anywhere."""
    import xml.etree.ElementTree as ET

    root = ET.parse(robot_urdf).getroot()
    joints = {j.find("parent").get("link"): j for j in root.findall("joint")}  # type: ignore[union-attr]
    links = {link.get("name"): link for link in root.findall("link")}

    def origin(el: ET.Element | None) -> np.ndarray:
        t = np.eye(4)
        if el is not None:
            t[:3, :3] = rpy_matrix([float(v) for v in el.get("rpy", "0 0 0").split()])
            t[:3, 3] = [float(v) for v in el.get("xyz", "0 0 0").split()]
        return t

    pose, link, k = np.eye(4), "base", 0
    axes, masses = [], []
    while link in joints:
        j = joints[link]
        pose = pose @ origin(j.find("origin"))
        if j.get("type") == "revolute":
            axis = np.array([float(v) for v in j.find("axis").get("xyz").split()])  # type: ignore[union-attr]
            axes.append((pose[:3, 3].copy(), pose[:3, :3] @ axis, k))
            kx = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
            rot = np.eye(4)
            rot[:3, :3] = np.eye(3) + math.sin(q[k]) * kx + (1 - math.cos(q[k])) * kx @ kx
            pose = pose @ rot
            k += 1
        link = j.find("child").get("link")  # type: ignore[union-attr]
        inertial = links[link].find("inertial")
        if inertial is not None:
            com = origin(inertial.find("origin"))[:3, 3]
            mass = float(inertial.find("mass").get("value"))  # type: ignore[union-attr]
            masses.append((k, mass, pose[:3, :3] @ com + pose[:3, 3]))
    g = np.array([0.0, 0.0, -9.80665])
    tau = np.array(
        [
            -u @ sum((np.cross(c - p, m * g) for moved, m, c in masses if moved > i), np.zeros(3))
            for p, u, i in axes
        ]
    )
    return axes, tau


@pytest.fixture
def urdf(tmp_path: Path) -> Path:
    path = tmp_path / "arm.urdf"
    path.write_text(URDF)
    return path


def test_the_dh_chain_puts_every_axis_and_mass_where_the_urdf_does(urdf: Path) -> None:
    found = read_urdf(urdf, "base")
    robot = found.description
    assert robot.convention == "modified" and robot.joint_names == ("j1", "j2", "j3", "j4")
    chain = make_chain(robot)
    rng = np.random.default_rng(3)
    for q in rng.uniform(-2.0, 2.0, (25, 4)):
        axes, tau = _urdf_reference(urdf, q)
        pose = forward(chain, q)
        for p, u, i in axes:
            assert np.allclose(pose.axis_dir[0, i], u, atol=1e-12)
            # the DH origin lies on the URDF's axis line
            assert np.linalg.norm(np.cross(pose.axis_point[0, i] - p, u)) < 1e-12
        assert np.allclose(gravity_torques(chain, q)[0], tau, atol=1e-10)
    # the tool link's 0.4 kg went into the last link
    assert robot.joints[-1].link.mass_kg == pytest.approx(1.2)
    assert robot.joints[1].coulomb_nm == 1.5 and robot.joints[1].viscous_nm_s_rad == 0.3
    assert robot.joints[2].coulomb_nm == 0.0  # a signed offset is no friction coefficient
    assert any("j3: friction -0.2" in n for n in found.notes)


def test_the_robot_file_reads_back_to_the_same_robot(urdf: Path, tmp_path: Path) -> None:
    out = tmp_path / "arm.yaml"
    assert main(["import", "urdf", str(urdf), "--base", "base", "-o", str(out)]) == 0
    back = load_robot(out)
    direct = read_urdf(urdf, "base").description
    assert np.allclose(back.standard_parameters(), direct.standard_parameters(), atol=1e-10)
    q = np.array([0.3, -0.7, 1.1, 0.4])
    assert np.allclose(
        gravity_torques(make_chain(back), q), gravity_torques(make_chain(direct), q), atol=1e-9
    )


def test_a_urdf_that_is_not_a_serial_chain_of_revolute_joints_is_refused(
    tmp_path: Path,
) -> None:
    branched = tmp_path / "branched.urdf"
    branched.write_text(
        URDF.replace(
            "</robot>",
            """<joint name="extra" type="fixed">
      <parent link="l2"/><child link="camera"/></joint><link name="camera"/></robot>""",
        )
    )
    with pytest.raises(ConfigError, match="link l2 has 2 child joints: expected a serial chain"):
        read_urdf(branched, "base")
    with pytest.raises(ConfigError, match="no link 'nowhere'"):
        read_urdf(branched, "nowhere")
    prismatic = tmp_path / "prismatic.urdf"
    prismatic.write_text(URDF.replace('name="j3" type="revolute"', 'name="j3" type="prismatic"'))
    with pytest.raises(ConfigError, match="joint j3 is 'prismatic': expected revolute or fixed"):
        read_urdf(prismatic, "base")


def test_import_arrays_writes_link_only_captures_identify_reads(tmp_path: Path) -> None:
    from agent.capture.files import load_capture

    t = 1.46e9 + np.cumsum(np.full(400, 0.005) + np.random.default_rng(1).uniform(-1e-3, 1e-3, 400))
    pos = np.column_stack([np.sin(t - t[0]), np.cos(t - t[0])])
    torque = np.column_stack([0.5 * pos[:, 0], -pos[:, 1]])
    src = tmp_path / "log.npz"
    np.savez(src, times=t, positions=pos, torques=torque)
    out = tmp_path / "run"
    code = main(["import", "arrays", str(src), "--joints", "a,b", "-o", str(out)])
    assert code == 0
    capture = load_capture(out / "b.csv", require_motor=False)
    assert capture.meta.joint == "b" and capture.meta.started_at.startswith("2016-")
    assert np.array_equal(capture.channels["link_pos_rad"], pos[:, 1])
    assert np.array_equal(capture.channels["motor_torque_nm"], torque[:, 1])
    assert capture.time_s[0] == 0.0
    # A calibration run: current, no torque.
    np.savez(src, times=t, positions=pos, currents=2 * torque)
    argv = ["import", "arrays", str(src), "--joints", "a,b", "--current", "currents", "-o"]
    assert main([*argv, str(tmp_path / "cal")]) == 0
    run = load_capture(tmp_path / "cal" / "a.csv", require_motor=False)
    assert set(run.channels) == {"link_pos_rad", "current_a"}
    assert np.array_equal(run.channels["current_a"], 2 * torque[:, 0])


def test_import_arrays_names_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "log.npz"
    np.savez(src, times=np.arange(10.0), positions=np.zeros((10, 3)), torques=np.zeros((10, 2)))
    assert main(["import", "arrays", str(src), "--joints", "a,b", "-o", str(tmp_path / "o")]) == 65
    assert "positions: expected 10 x 2 (samples x joints), found (10, 3)" in capsys.readouterr().err
    code = main(
        ["import", "arrays", str(src), "--joints", "a,b", "--time", "t", "-o", str(tmp_path)]
    )
    assert code == 65
    assert "no array 't'" in capsys.readouterr().err
