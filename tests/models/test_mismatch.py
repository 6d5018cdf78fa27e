"""The simulator's model mismatch: temperature-dependent friction, payload, cogging, a cable
spring and a torque-constant error each do what they say, and the named conditions are
reproducible robots that differ from the file."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.models.robot import mismatch as mm
from agent.models.robot.description import RobotDescription, link_parameters, load_robot, skew
from agent.models.robot.elastic_measure import ElasticRun, measure
from agent.models.robot.friction import FrictionNonlinearity, friction_torque
from tests.support.paths import ROBOTS


def robot(name: str) -> RobotDescription:
    return load_robot(ROBOTS / f"{name}.yaml")


def test_warmer_joints_have_less_friction_and_colder_ones_more() -> None:
    r = robot("ur5e")
    warm, cold = mm.at_temperature(r, 10.0), mm.at_temperature(r, -10.0)
    for j, w, c in zip(r.joints, warm.joints, cold.joints, strict=True):
        assert w.viscous_nm_s_rad == pytest.approx(j.viscous_nm_s_rad * 0.85)
        assert w.coulomb_nm == pytest.approx(j.coulomb_nm * 0.95)
        assert c.viscous_nm_s_rad == pytest.approx(j.viscous_nm_s_rad * 1.15)
    # far below the linear range the friction stays positive
    assert all(j.viscous_nm_s_rad > 0 for j in mm.at_temperature(r, 200.0).joints)


def test_a_payload_adds_its_mass_first_moment_and_inertia_to_the_last_link() -> None:
    r = robot("ur5e")
    p = (0.02, -0.01, 0.05)
    loaded = mm.with_payload(r, 1.2, p)
    before = link_parameters(r.joints[-1].link)
    after = link_parameters(loaded.joints[-1].link)
    assert after[0] == pytest.approx(before[0] + 1.2)
    assert np.allclose(after[1:4], before[1:4] + 1.2 * np.array(p))
    i_p = 1.2 * (skew(np.array(p)).T @ skew(np.array(p)))
    expected = before[4:] + np.array(
        [i_p[0, 0], i_p[0, 1], i_p[1, 1], i_p[0, 2], i_p[1, 2], i_p[2, 2]]
    )
    assert np.allclose(after[4:], expected, atol=1e-12)
    assert not loaded.joints[-1].link.check()  # still a physical body
    assert loaded.joints[:-1] == r.joints[:-1]
    with pytest.raises(ValueError, match="payload mass"):
        mm.with_payload(r, -1.0, p)


def test_cogging_repeats_per_motor_turn_and_the_cable_is_a_spring_about_its_neutral() -> None:
    r = robot("planar2")
    gear = np.array([j.gear_ratio for j in r.joints])
    nl = FrictionNonlinearity(
        (0.0, 0.0),
        (0.0, 0.0),
        cogging_nm=(0.4, 0.2),
        cogging_per_motor_turn=6.0,
        cable_nm_rad=(3.0, 0.0),
        cable_neutral_rad=(0.1, 0.0),
    )
    theta = np.array([[0.3, 0.2]])
    zero = np.zeros((1, 2))
    base, _ = friction_torque(r, FrictionNonlinearity.none(2), zero, theta, zero, linear=False)
    f, _ = friction_torque(r, nl, zero, theta, zero, linear=False)
    expected = np.array([0.4, 0.2]) * np.sin(6.0 * gear * theta[0]) + [3.0 * 0.2, 0.0]
    assert np.allclose(f[0] - base[0], expected)
    # one motor period of cogging later (a sixth of a motor turn) the same torque, spring aside
    shifted = theta + 2 * math.pi / (6.0 * gear)
    f2, _ = friction_torque(r, nl, zero, shifted, zero, linear=False)
    spring = np.array([3.0, 0.0]) * (shifted[0] - theta[0])
    assert np.allclose(f2[0] - spring, f[0])
    with pytest.raises(ValueError, match="cogging and cable"):
        friction_torque(r, FrictionNonlinearity((0.0,) * 2, (0.0,) * 2, cogging_nm=(1.0,)), 0, 0, 0)


def test_a_torque_constant_error_scales_the_reported_torque_and_nothing_else() -> None:
    r = robot("planar2")
    n = 50
    t = np.arange(n) * 1e-3
    motion = np.outer(np.sin(t), [1.0, -0.5])
    torque = np.outer(np.cos(t), [40.0, 10.0])
    run = ElasticRun(
        t, motion, motion, motion, motion, motion, motion, torque, np.zeros((n, 2), bool), 1, 0.0
    )
    plain = measure(run, r, counts_per_turn=None)
    off = measure(run, r, counts_per_turn=None, torque_constant_error=(0.04, -0.03))
    for j, err in enumerate((0.04, -0.03)):
        assert np.allclose(
            off[j].channels["motor_torque_nm"], plain[j].channels["motor_torque_nm"] * (1 + err)
        )
        assert np.array_equal(off[j].channels["link_pos_rad"], plain[j].channels["link_pos_rad"])


def test_realistic_conditions_are_reproducible_and_every_imperfection_is_there() -> None:
    r = robot("ur5e")
    a, b, other = mm.realistic(r, 3), mm.realistic(r, 3), mm.realistic(r, 4)
    assert a == b
    assert a.torque_constant_error != other.torque_constant_error
    assert all(abs(e) <= mm.TORQUE_CONSTANT_TOLERANCE for e in a.torque_constant_error)
    assert any(e != 0 for e in a.torque_constant_error)
    assert a.truth.joints[-1].link.mass_kg > r.joints[-1].link.mass_kg  # payload
    assert all(c > 0 for c in a.friction.cogging_nm)
    assert sum(k > 0 for k in a.friction.cable_nm_rad) == 3
    assert a.friction.load_fraction > 0
    # later runs at other temperatures: other friction, same bodies
    later = a.truth_at(0)
    assert later.joints[0].viscous_nm_s_rad != a.truth.joints[0].viscous_nm_s_rad
    assert later.joints[0].link == a.truth.joints[0].link
    paper = mm.paper_like(r, 3)
    assert paper.torque_constant_error == (0.0,) * 6
    assert not paper.friction.cogging_nm and not paper.friction.cable_nm_rad
    assert paper.truth_at(2) == paper.truth
