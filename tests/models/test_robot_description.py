"""Robot files: what they hold, how link data become standard parameters, and bad files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agent.errors import ConfigError
from agent.models.robot.description import (
    InertiaTensor,
    LinkInertial,
    RobotDescription,
    link_parameters,
    load_robot,
    rpy_matrix,
)
from tests.support.paths import ROBOTS


def robot_file(name: str) -> RobotDescription:
    return load_robot(ROBOTS / f"{name}.yaml")


def test_planar_arm_is_the_one_of_paper_002() -> None:
    robot = robot_file("planar2")
    assert robot.convention == "modified"
    assert robot.n_joints == 2
    assert robot.joints[1].a_m == 0.5  # a1: joint 1 to joint 2
    assert [j.link.mass_kg for j in robot.joints] == [20.0, 10.0]
    assert [j.link.com_m for j in robot.joints] == [(0.25, 0.0, 0.0)] * 2
    assert robot.gravity_m_s2 == (0.0, -9.81, 0.0)
    assert robot.encoder_counts_per_turn == 1_250_000
    # uniform rods of 0.5 m: m a^2 / 12 about the centre
    assert robot.joints[0].link.inertia_com_kg_m2.zz == pytest.approx(20 * 0.25 / 12)
    assert robot.joints[1].link.inertia_com_kg_m2.zz == pytest.approx(10 * 0.25 / 12)


def test_puma560_is_corkes_model_with_paper_002_stiffness() -> None:
    robot = robot_file("puma560")
    assert robot.convention == "standard"
    assert [j.link.mass_kg for j in robot.joints] == [0.0, 17.4, 4.8, 0.82, 0.34, 0.09]
    assert [j.stiffness_nm_rad for j in robot.joints] == [2000.0] * 6
    assert [j.a_m for j in robot.joints] == [0.0, 0.4318, 0.0203, 0.0, 0.0, 0.0]
    assert [j.d_m for j in robot.joints] == [0.0, 0.0, 0.15005, 0.4318, 0.0, 0.0]
    assert robot.joints[0].rotor_inertia_kg_m2 == pytest.approx(200e-6 * 62.6111**2)
    # link-side friction converted from Corke's motor-side B and Tc
    assert robot.joints[1].viscous_nm_s_rad == pytest.approx(0.817e-3 * 107.815**2, rel=1e-5)
    assert robot.joints[1].coulomb_nm == pytest.approx((0.126 + 0.071) / 2 * 107.815, rel=1e-5)


def test_ur5e_is_universal_robots_published_data() -> None:
    robot = robot_file("ur5e")
    assert [j.d_m for j in robot.joints] == [0.1625, 0.0, 0.0, 0.1333, 0.0997, 0.0996]
    assert [j.a_m for j in robot.joints] == [0.0, -0.425, -0.3922, 0.0, 0.0, 0.0]
    alphas = [j.alpha_rad for j in robot.joints]
    assert alphas == pytest.approx([math.pi / 2, 0, 0, math.pi / 2, -math.pi / 2, 0])
    assert sum(j.link.mass_kg for j in robot.joints) == pytest.approx(17.7)
    assert robot.joints[1].link.com_m == (0.2125, 0.0, 0.11336)
    assert robot.encoder_counts_per_turn == 2**19
    assert [j.torque_max_nm for j in robot.joints] == [150.0] * 3 + [28.0] * 3


def test_link_parameters_apply_steiner_and_the_tensor_axes() -> None:
    link = LinkInertial(
        mass_kg=2.0,
        com_m=(0.1, -0.2, 0.3),
        inertia_com_kg_m2=InertiaTensor(xx=0.04, yy=0.05, zz=0.06, xy=0.001, xz=-0.002, yz=0.003),
        inertia_rpy_rad=(0.3, -0.2, 0.5),
    )
    m, mx, my, mz, xx, xy, yy, xz, yz, zz = link_parameters(link)
    assert (m, mx, my, mz) == pytest.approx((2.0, 0.2, -0.4, 0.6))
    rot = rpy_matrix(link.inertia_rpy_rad)
    c = np.array(link.com_m)
    expected = rot @ link.inertia_com_kg_m2.matrix() @ rot.T + 2.0 * (
        c @ c * np.eye(3) - np.outer(c, c)
    )
    got = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])
    np.testing.assert_allclose(got, expected, atol=1e-15)


def test_rpy_is_urdf_convention() -> None:
    # URDF: R = Rz(yaw) Ry(pitch) Rx(roll); a pure roll of +90 deg sends y to z
    np.testing.assert_allclose(rpy_matrix((math.pi / 2, 0, 0)) @ [0, 1, 0], [0, 0, 1], atol=1e-15)
    np.testing.assert_allclose(rpy_matrix((0, 0, math.pi / 2)) @ [1, 0, 0], [0, 1, 0], atol=1e-15)
    r = rpy_matrix((0.1, 0.2, 0.3))
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-15)


def test_with_gravity_keeps_everything_else() -> None:
    robot = robot_file("ur5e")
    tilted = robot.with_gravity((0.0, -1.0, -9.7))
    assert tilted.gravity_m_s2 == (0.0, -1.0, -9.7)
    assert tilted.joints == robot.joints
    with pytest.raises(ValueError, match="3 components"):
        robot.with_gravity((0.0, 9.81))  # type: ignore[arg-type]


def test_to_dict_round_trips_the_numbers() -> None:
    data = robot_file("planar2").to_dict()
    assert data["joints"][0]["link"]["inertia_com_kg_m2"]["zz"] == pytest.approx(20 * 0.25 / 12)
    assert data["source"].endswith("planar2.yaml")


# ---------------------------------------------------------------- bad files

GOOD = (ROBOTS / "planar2.yaml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "robot.yaml"
    path.write_text(text)
    return path


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    count = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            count += 1
            if count == occurrence:
                return number
    raise AssertionError(f"{needle!r} not in the file")


@pytest.mark.parametrize(
    ("old", "new", "occurrence", "message"),
    [
        ("convention: modified", "convention: craig", 1, "expected one of 'standard', 'modified'"),
        ("      mass_kg: 10.0", "      mass_kg: -10.0", 1, "expected a number >= 0"),
        (
            "    gear_ratio: 100.0",
            "    gear_rat1o: 100.0",
            2,
            "unknown key (did you mean 'gear_ratio'?)",
        ),
        (
            "    stiffness_nm_rad: 1.4e4",
            "    stiffness_nm_rad: stiff",
            1,
            "expected a number > 0 or null",
        ),
        (
            "      com_m: [0.25, 0.0, 0.0]",
            "      com_m: [0.25, 0.0]",
            2,
            "expected a list of 3 numbers",
        ),
        (
            "    position_max_rad: 3.141592653589793",
            "    position_max_rad: -4.0",
            2,
            "expected more than position_min_rad (-3.14159), found -4",
        ),
        (
            "zz: 0.20833333333333334}",
            "zz: 0.20833333333333334, xy: 1.0}",
            1,
            "expected a positive semi-definite tensor",
        ),
        ("  - name: joint_2", "  - name: joint_1", 1, "duplicate name (see joints[0])"),
    ],
)
def test_bad_robot_files_name_file_and_line(
    tmp_path: Path, old: str, new: str, occurrence: int, message: str
) -> None:
    assert GOOD.count(old) >= occurrence, old
    parts = GOOD.split(old)
    before = old.join(parts[:occurrence])
    text = before + new + old.join(parts[occurrence:])
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_robot(path)
    line = before.count("\n") + 1  # the edited line
    assert f"{path}:{line}:" in str(err.value)
    assert message in str(err.value)


def test_missing_required_key_is_reported_at_its_mapping(tmp_path: Path) -> None:
    text = GOOD.replace("    torque_max_nm: 100.0\n", "")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_robot(path)
    line = line_of(text, "  - name: joint_2")
    assert f"{path}:{line}: joints[1].torque_max_nm: required key is missing" in str(err.value)


def test_every_mistake_is_listed_at_once(tmp_path: Path) -> None:
    text = GOOD.replace("convention: modified", "convention: x").replace(
        "      mass_kg: 20.0", "      mass_kg: heavy"
    )
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_robot(path)
    lines = str(err.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{path}:{line_of(text, 'convention: x')}: convention:")
    assert lines[1].startswith(f"{path}:{line_of(text, 'mass_kg: heavy')}: joints[0].link.mass_kg:")


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_robot(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="YAML syntax error"):
        load_robot(write(tmp_path, "name: [unclosed\n"))
