"""Base parameters: counts of Madsen et al. 2020 and Zollo, Lopez et al. 2014, the textbook
regrouping of the planar arm, and the algebra that makes the reduction usable for identification."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import EstimationError
from agent.estimation.identification.base_params import (
    ParamClass,
    base_parameters,
    random_states,
    reduce_regressor,
)
from agent.models.robot.description import RobotDescription, load_robot
from agent.models.robot.regressor import ParameterLayout, parameter_vector, regressor
from tests.support.paths import ROBOTS

TILT_RAD = 0.3


def robot_file(name: str) -> RobotDescription:
    return load_robot(ROBOTS / f"{name}.yaml")


def tilted(robot: RobotDescription, angle: float = TILT_RAD) -> RobotDescription:
    """Base turned about x0: gravity keeps its size and leaves the direction of axis 1."""
    return robot.with_gravity((0.0, -9.81 * math.sin(angle), -9.81 * math.cos(angle)))


# ---------------------------------------------------------------- counts


@pytest.mark.parametrize(
    ("rotor", "friction", "upright", "expected"),
    [
        (False, False, True, 36),  # Madsen et al. 2020 section 3
        # Madsen et al. 2020, conclusion: +2 when axis 1 is not along gravity
        (False, False, False, 38),
        (True, False, True, 40),
        (True, False, False, 42),
        (True, True, True, 52),
        (True, True, False, 54),
    ],
)
def test_ur5e_base_parameter_counts(rotor: bool, friction: bool, upright: bool, expected: int):
    robot = robot_file("ur5e")
    robot = robot if upright else tilted(robot)
    base = base_parameters(robot, rotor=rotor, friction=friction)
    assert base.count == expected
    # the decision is not close: kept columns are far above rounding, dropped ones at it
    kept, dropped = base.rank_gap
    assert kept > 1e-3
    assert dropped < 1e-12


def test_which_ur5e_rotor_inertias_are_identifiable() -> None:
    # Rotor model of Madsen et al. 2020 (a rotor adds Ia*qdd to its own joint only). Ia1 moves joint
    # 1 exactly as the inertia of link 1 about axis 1 does, and Ia2 exactly as the inertia of link 2
    # about axis 2 does (axis 2 is perpendicular to axis 1, so link 2's spin about its own axis
    # reaches joint 2 only): both are regrouped, hence +4 and not +6 with rotors.
    base = base_parameters(robot_file("ur5e"), rotor=True)
    classes = dict(zip(base.names, base.classes, strict=True))
    assert classes["Ia1"] == classes["Ia2"] == "combination"
    assert all(classes[f"Ia{j}"] == "identifiable" for j in range(3, 7))
    combos = dict(c.split(" = ", 1) for c in base.combinations())
    assert "Ia1" in combos["yy1R"]  # standard DH: axis 1 is y of frame 1
    assert "Ia2" in combos["zz2R"]


def test_friction_is_always_identifiable() -> None:
    base = base_parameters(tilted(robot_file("ur5e")), rotor=True, friction=True)
    classes = dict(zip(base.names, base.classes, strict=True))
    assert all(classes[f"{p}{j}"] == "identifiable" for p in ("fc", "fv") for j in range(1, 7))


def test_puma560_counts() -> None:
    # Same structure as the UR5e for identifiability (axis 1 vertical, axis 2 perpendicular to
    # it, parallel axes 2 and 3, spherical wrist), so the same counts.
    robot = robot_file("puma560")
    assert base_parameters(robot).count == 36
    assert base_parameters(robot, rotor=True).count == 40
    assert base_parameters(robot, rotor=True, friction=True).count == 52


@pytest.mark.parametrize("name", ["panda", "iiwa14"])
def test_seven_joint_arms_with_twists_of_half_pi(name: str) -> None:
    # A column that is zero in theory (a first moment along a twisted axis) carries ~1e-15 of
    # rounding: it was dropped as zero, then checked as a combination of the base against its
    # own noise, and the identification refused the arm ("not combinations ... 0.94").
    # Modified DH (the Panda) and standard DH (the iiwa) alike; 43 base parameters is Gaz et
    # al. 2019's count for the Panda's links.
    robot = robot_file(name)
    assert robot.n_joints == 7
    assert base_parameters(robot).count == 43
    full = base_parameters(robot, rotor=True, friction=True)
    # As on the UR5e: the rotors of axes 1 and 2 fold into the links' zz; 14 friction terms.
    rotors = {n: c for n, c in zip(full.names, full.classes, strict=True) if n.startswith("Ia")}
    assert [n for n, c in rotors.items() if c is ParamClass.COMBINATION] == ["Ia1", "Ia2"]
    assert full.count == 43 + 5 + 14
    smallest_kept, largest_dropped = full.rank_gap
    assert smallest_kept > 0.1 and largest_dropped < 1e-12  # no doubt about the rank


@settings(max_examples=15, deadline=None)
@given(angle=st.floats(0.05, math.pi - 0.05), about=st.floats(0.0, 2 * math.pi))
def test_any_tilt_of_the_base_adds_two(angle: float, about: float) -> None:
    g = 9.81 * np.array(
        [math.sin(angle) * math.cos(about), math.sin(angle) * math.sin(about), -math.cos(angle)]
    )
    robot = robot_file("ur5e").with_gravity((float(g[0]), float(g[1]), float(g[2])))
    assert base_parameters(robot, rotor=True, friction=True).count == 54


# ---------------------------------------------------------------- planar arm in closed form

# Zollo, Lopez et al. 2014, section 6; inertias of uniform slender rods (derived in
# config/robots/planar2.yaml)
A, L, M1, M2, G0 = 0.5, 0.25, 20.0, 10.0, 9.81
ZZ1 = M1 * (2 * L) ** 2 / 12 + M1 * L**2  # about joint 1
ZZ2 = M2 * (2 * L) ** 2 / 12 + M2 * L**2  # about joint 2
IA = 1.0e-4 * 100.0**2


def planar_textbook_regressor(q, qd, qdd) -> tuple[list[str], np.ndarray]:
    """Base regressor of the 2R arm in a vertical plane by Lagrange, by hand (Khalil's grouping:
    ZZR1 = ZZ1 + Ia1 + a^2 M2, MXR1 = MX1 + a M2)."""
    q1, q2 = q
    d1, d2 = qd
    a1, a2 = qdd
    c1, s1, c2, s2 = math.cos(q1), math.sin(q1), math.cos(q2), math.sin(q2)
    c12, s12 = math.cos(q1 + q2), math.sin(q1 + q2)
    names = ["zz1R", "mx1R", "my1", "zz2", "mx2", "my2", "Ia2", "fc1", "fv1", "fc2", "fv2"]
    tau1 = [
        a1,
        G0 * c1,
        -G0 * s1,
        a1 + a2,
        A * (2 * a1 + a2) * c2 - A * (2 * d1 + d2) * d2 * s2 + G0 * c12,
        -A * (2 * a1 + a2) * s2 - A * (2 * d1 + d2) * d2 * c2 - G0 * s12,
        0.0,
        np.sign(d1),
        d1,
        0.0,
        0.0,
    ]
    tau2 = [
        0.0,
        0.0,
        0.0,
        a1 + a2,
        A * a1 * c2 + A * d1**2 * s2 + G0 * c12,
        -A * a1 * s2 + A * d1**2 * c2 - G0 * s12,
        a2,
        0.0,
        0.0,
        np.sign(d2),
        d2,
    ]
    return names, np.array([tau1, tau2])


def test_planar_base_parameters_are_the_textbook_regrouping() -> None:
    robot = robot_file("planar2")
    base = base_parameters(robot, rotor=True, friction=True)
    names, _ = planar_textbook_regressor((0.0, 0.0), (0.0, 0.0), (0.0, 0.0))
    assert sorted(base.base_names) == sorted(names)
    assert set(base.combinations()) >= {
        "zz1R = zz1 + Ia1 + 0.25*m2",
        "mx1R = mx1 + 0.5*m2",
        "zz2 = zz2",
        "Ia2 = Ia2",
    }
    assert set(base.of_class("combination")) == {"zz1", "Ia1", "mx1", "m2"}
    assert set(base.of_class("identifiable")) == {
        "my1", "mx2", "my2", "zz2", "Ia2", "fc1", "fv1", "fc2", "fv2",
    }  # fmt: skip
    unident = set(base.of_class("unidentifiable"))
    assert unident == {"m1", "mz1", "mz2"} | {
        f"{p}{j}" for p in ("xx", "xy", "xz", "yy", "yz") for j in (1, 2)
    }


def test_planar_base_values_and_columns_in_closed_form() -> None:
    robot = robot_file("planar2")
    layout = ParameterLayout(2, rotor=True, friction=True)
    base = base_parameters(robot, rotor=True, friction=True)
    values = dict(zip(base.base_names, base.to_base(parameter_vector(robot, layout)), strict=True))
    expected = {
        "zz1R": ZZ1 + IA + A**2 * M2,
        "mx1R": M1 * L + A * M2,
        "my1": 0.0,
        "zz2": ZZ2,
        "mx2": M2 * L,
        "my2": 0.0,
        "Ia2": IA,
        "fc1": 2.0,
        "fv1": 1.5,
        "fc2": 1.0,
        "fv2": 1.0,
    }
    for name, value in expected.items():
        assert values[name] == pytest.approx(value, abs=1e-12), name
    # and the base regressor's columns are the hand-derived ones
    q, qd, qdd = random_states(robot, 40, seed=5)
    y_base = base.reduce(regressor(robot, q, qd, qdd, rotor=True, friction=True))
    order = [base.base_names.index(n) for n in planar_textbook_regressor(q[0], qd[0], qdd[0])[0]]
    for k in range(40):
        _, textbook = planar_textbook_regressor(q[k], qd[k], qdd[k])
        np.testing.assert_allclose(y_base[k][:, order], textbook, atol=1e-12)


# ---------------------------------------------------------------- algebra of the result


@pytest.mark.parametrize("name", ["ur5e", "puma560", "planar2", "panda", "iiwa14"])
def test_base_model_predicts_the_same_torques(name: str) -> None:
    robot = tilted(robot_file(name)) if name == "ur5e" else robot_file(name)
    base = base_parameters(robot, rotor=True, friction=True)
    layout = ParameterLayout(robot.n_joints, rotor=True, friction=True)
    np.testing.assert_allclose(base.matrix @ base.inverse, np.eye(base.count), atol=1e-15)
    rng = np.random.default_rng(3)
    pi = rng.normal(size=layout.size)  # any standard vector, physical or not
    q, qd, qdd = random_states(robot, 30, seed=99)  # states the reduction never saw
    y = regressor(robot, q, qd, qdd, rotor=True, friction=True)
    full = y @ pi
    np.testing.assert_allclose(
        base.reduce(y) @ base.to_base(pi), full, atol=1e-9 * np.abs(full).max()
    )
    # the inverse map gives a standard vector with the same torques
    np.testing.assert_allclose(
        y @ base.to_standard(base.to_base(pi)), full, atol=1e-9 * np.abs(full).max()
    )


def test_classes_do_not_depend_on_the_random_states() -> None:
    robot = robot_file("ur5e")
    a = base_parameters(robot, rotor=True, friction=True, seed=0)
    b = base_parameters(robot, rotor=True, friction=True, seed=1, n_samples=200)
    assert a.classes == b.classes
    assert a.base_columns == b.base_columns
    np.testing.assert_allclose(a.matrix, b.matrix, atol=1e-9)


def test_result_is_frozen_and_serialisable() -> None:
    base = base_parameters(robot_file("planar2"), rotor=True)
    data = json.loads(json.dumps(base.to_dict()))
    assert data["count"] == 7
    assert data["classes"]["Ia1"] == "combination"
    assert "zz1R = zz1 + Ia1 + 0.25*m2" in data["combinations"]
    with pytest.raises(ValueError):
        base.matrix[0, 0] = 2.0
    with pytest.raises(AttributeError):
        base.base_columns = ()  # type: ignore[misc]


def test_reduction_refuses_what_cannot_reveal_a_rank() -> None:
    names = ["a", "b", "c"]
    with pytest.raises(EstimationError, match="2 rows cannot reveal the rank of 3 columns"):
        reduce_regressor(np.ones((2, 3)), names)
    with pytest.raises(EstimationError, match="expected \\(rows, 3\\)"):
        reduce_regressor(np.ones((5, 4)), names)


def test_generic_reduction_on_a_hand_made_regressor() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 3))
    # columns: a, b, c = 2a - b, zero
    w = np.column_stack([x[:, 0], x[:, 1], 2 * x[:, 0] - x[:, 1], np.zeros(50)])
    base = reduce_regressor(w, ["a", "b", "c", "d"], order=[0, 1, 2, 3])
    assert base.base_names == ("aR", "bR")
    assert base.combinations() == ("aR = a + 2*c", "bR = b - c")
    assert base.classes == ("combination", "combination", "combination", "unidentifiable")
