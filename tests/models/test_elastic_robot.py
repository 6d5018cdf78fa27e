"""Elastic-joint robot simulation: dynamics against the regressor, the recorded run against the
equations of Zollo, Lopez et al. 2014, statics, friction, saturation, encoders and noise."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.estimation.identification.excitation import ExcitationSettings, random_excitation
from agent.models.robot import elastic as er
from agent.models.robot.description import RobotDescription, load_robot
from agent.models.robot.elastic_measure import ElasticRun, measure
from agent.models.robot.friction import FrictionNonlinearity, friction_torque
from agent.models.robot.newton_euler import inverse_dynamics, mass_matrix_and_bias
from agent.models.robot.regressor import chain_geometry, torques
from tests.support.paths import ROBOTS


def robot(name: str) -> RobotDescription:
    return load_robot(ROBOTS / f"{name}.yaml")


@pytest.mark.parametrize("name", ["planar2", "puma560", "ur5e"])
def test_inverse_dynamics_and_mass_matrix_agree_with_the_regressor(name: str) -> None:
    r = robot(name)
    rng = np.random.default_rng(0)
    q, qd, qdd = rng.normal(size=(3, 20, r.n_joints))
    ref = torques(r, q, qd, qdd)
    assert np.allclose(inverse_dynamics(r, q, qd, qdd), ref, atol=1e-12 * np.abs(ref).max())
    mass, bias = mass_matrix_and_bias(r, q, qd, chain_geometry(r))
    assert np.allclose(np.einsum("nij,nj->ni", mass, qdd) + bias, ref, atol=1e-10)
    assert np.allclose(mass, mass.transpose(0, 2, 1), atol=1e-12)
    assert np.all(np.linalg.eigvalsh(mass) > 0.0)


@pytest.fixture(scope="module")
def planar_run() -> tuple[RobotDescription, FrictionNonlinearity, ElasticRun]:
    r = robot("planar2")
    traj = random_excitation(r, ExcitationSettings(period_s=2.0, harmonics=3), seed=5)
    t, q, qd, qdd = traj.sample(1000.0, 1, 0.3)
    nl = FrictionNonlinearity.typical(r, stribeck=0.5, ripple=0.05, load_fraction=0.01)
    return r, nl, er.simulate(r, t, q, qd, qdd, friction=nl)


def test_the_recorded_run_satisfies_the_link_and_rotor_equations(planar_run) -> None:
    r, nl, run = planar_run
    k = np.array([j.stiffness_nm_rad for j in r.joints])
    delta = run.motor_pos_rad - run.link_pos_rad
    link = inverse_dynamics(r, run.link_pos_rad, run.link_speed_rad_s, run.link_accel_rad_s2)
    assert np.max(np.abs(link - k * delta)) < 1e-4  # waveform relaxation converged
    f, _ = friction_torque(r, nl, run.motor_speed_rad_s, run.motor_pos_rad, k * delta)
    ia = np.array([j.rotor_inertia_kg_m2 for j in r.joints])
    rotor = ia * run.motor_accel_rad_s2 + f + k * delta
    assert np.max(np.abs(rotor - run.motor_torque_nm)) < 2e-4  # the friction law is met
    # the integrator's accelerations are those of its positions (trapezoidal rule)
    q = run.link_pos_rad
    second = (q[2:] - 2 * q[1:-1] + q[:-2]) * 1e6
    avg = run.link_accel_rad_s2[2:] + 2 * run.link_accel_rad_s2[1:-1] + run.link_accel_rad_s2[:-2]
    assert np.allclose(second, avg / 4, atol=1e-6)
    assert not run.saturated.any() and run.passes <= 6


def test_it_tracks_the_reference_with_a_deflection_of_the_load_over_the_stiffness(planar_run):
    r, _, run = planar_run
    traj = random_excitation(r, ExcitationSettings(period_s=2.0, harmonics=3), seed=5)
    q_ref = traj.sample(1000.0, 1, 0.3)[1]
    assert np.max(np.abs(run.link_pos_rad - q_ref)) < 5e-3
    # Zollo, Lopez et al. 2014 reports at most 0.39 and 0.10 degrees on its planar arm
    defl = np.degrees(np.max(np.abs(run.motor_pos_rad - run.link_pos_rad), axis=0))
    assert 0.1 < defl[0] < 0.6 and 0.02 < defl[1] < 0.2


def test_at_rest_the_gear_twists_by_gravity_over_stiffness() -> None:
    r = robot("planar2")
    n = 600
    t = np.arange(n) / 1000.0
    q = np.tile([0.3, -0.4], (n, 1))
    run = er.simulate(r, t, q, np.zeros_like(q), np.zeros_like(q))
    g = inverse_dynamics(r, q[:1], np.zeros((1, 2)), np.zeros((1, 2)))[0]
    k = np.array([j.stiffness_nm_rad for j in r.joints])
    assert np.allclose(run.motor_pos_rad[-1] - run.link_pos_rad[-1], g / k, rtol=1e-6)
    assert np.allclose(run.motor_torque_nm[-1], g, rtol=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.floats(-2.0, 2.0), st.floats(-3.0, 3.0), st.floats(-50.0, 50.0))
def test_friction_slope_is_the_derivative_of_the_friction(v: float, th: float, load: float):
    r = robot("ur5e")
    nl = FrictionNonlinearity.typical(r, stribeck=0.5, ripple=0.05, load_fraction=0.02)
    speed = np.full(6, v)
    h = 1e-7
    _, slope = friction_torque(r, nl, speed, np.full(6, th), np.full(6, load))
    f2, _ = friction_torque(r, nl, speed + h, np.full(6, th), np.full(6, load))
    f1, _ = friction_torque(r, nl, speed - h, np.full(6, th), np.full(6, load))
    assert np.allclose(slope, (f2 - f1) / (2 * h), rtol=1e-3, atol=1e-3)


def test_friction_is_coulomb_and_viscous_away_from_zero_and_breaks_away_above_it() -> None:
    r = robot("ur5e")
    nl = FrictionNonlinearity.typical(r, stribeck=0.5, ripple=0.0)
    fc = np.array([j.coulomb_nm for j in r.joints])
    fv = np.array([j.viscous_nm_s_rad for j in r.joints])
    f, _ = friction_torque(r, nl, np.full(6, 1.0), np.zeros(6), np.zeros(6))
    assert np.allclose(f, fc + fv, rtol=1e-9)
    f0, _ = friction_torque(r, nl, np.full(6, 0.01), np.zeros(6), np.zeros(6))
    assert np.all(f0 > fc)  # the Stribeck hump: breakaway above Coulomb
    only_nl, _ = friction_torque(r, nl, np.full(6, 1.0), np.zeros(6), np.zeros(6), linear=False)
    assert np.allclose(only_nl, 0.0, atol=1e-9)


def test_a_drive_at_its_limit_is_clipped_and_flagged() -> None:
    r = robot("planar2")
    weak = replace(r, joints=(replace(r.joints[0], torque_max_nm=160.0), r.joints[1]))
    traj = random_excitation(r, ExcitationSettings(period_s=2.0, harmonics=3), seed=5)
    t, q, qd, qdd = traj.sample(1000.0, 1, 0.2)
    run = er.simulate(weak, t, q, qd, qdd)
    assert run.saturated[:, 0].any() and not run.saturated[:, 1].any()
    assert np.max(np.abs(run.motor_torque_nm[:, 0])) == pytest.approx(160.0)


def test_measurement_quantises_both_encoders_and_adds_noise_at_the_snr(planar_run) -> None:
    r, _, run = planar_run
    caps = measure(run, r)
    step = 2 * math.pi / 1_250_000  # Zollo, Lopez et al. 2014's encoder
    for cap, spec in zip(caps, r.joints, strict=True):
        assert cap.meta.joint == spec.name and cap.meta.gear_ratio == spec.gear_ratio
        for name in ("link_pos_rad", "motor_pos_rad"):
            counts = cap.channels[name] / step
            assert np.allclose(counts, np.round(counts), atol=1e-6)
    j = 0
    shaft = run.motor_pos_rad[:, j] * r.joints[j].gear_ratio
    assert np.max(np.abs(caps[j].channels["motor_pos_rad"] - shaft)) <= step / 2 + 1e-12
    noisy = measure(run, r, counts_per_turn=None, snr_db=40.0, seed=1)
    err = noisy[j].channels["link_pos_rad"] - run.link_pos_rad[:, j]
    ratio_db = 20 * math.log10(np.std(run.link_pos_rad[:, j]) / np.std(err))
    assert ratio_db == pytest.approx(40.0, abs=0.5)
    torque = measure(run, r, counts_per_turn=None, torque_noise_nm=[2.0, 0.0], seed=1)
    tau_err = (
        torque[0].channels["motor_torque_nm"] * r.joints[0].gear_ratio - run.motor_torque_nm[:, 0]
    )
    assert np.std(tau_err) == pytest.approx(2.0, rel=0.1)


def test_perturbed_robot_is_a_valid_different_robot() -> None:
    r = robot("ur5e")
    a, b = er.perturbed(r, 1), er.perturbed(r, 1)
    assert a == b and a != r
    for ja, jr in zip(a.joints, r.joints, strict=True):
        assert not ja.link.check()
        assert abs(ja.link.mass_kg / jr.link.mass_kg - 1) <= 0.1
        assert np.max(np.abs(np.subtract(ja.link.com_m, jr.link.com_m))) <= 0.01
        assert abs(ja.coulomb_nm / jr.coulomb_nm - 1) <= 0.3
