"""Identification of a robot that is not its model: a load-dependent friction share and a cable's
spring are recovered when modelled (--load-friction, --joint-spring) and bias the plain fit when
not; a torque-constant error is covered by the stated tolerance; the result carries intervals."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from agent.estimation.identification.excitation import ExcitationSettings, design_excitation
from agent.estimation.identification.fit import identify
from agent.estimation.identification.model import IdentificationSettings
from agent.estimation.identification.validation import true_parameters
from agent.models.robot import elastic as er
from agent.models.robot.description import load_robot
from agent.models.robot.elastic_measure import measure
from agent.models.robot.friction import FrictionNonlinearity
from tests.support.paths import ROBOTS

RIGID = IdentificationSettings(model="rigid")


@pytest.fixture(scope="module")
def loaded_planar():
    r = load_robot(ROBOTS / "planar2.yaml")
    ex = design_excitation(r, ExcitationSettings(period_s=4.0, harmonics=4, maxiter=40))
    nl = replace(
        FrictionNonlinearity.typical(r, stribeck=0.0, ripple=0.0, load_fraction=0.03),
        cable_nm_rad=(3.0, 1.0),
        cable_neutral_rad=(0.2, -0.3),
    )
    t, q, qd, qdd = ex.trajectory.sample(1000.0, 1, 0.3)
    run = er.simulate(r, t, q, qd, qdd, friction=nl)
    return r, nl, measure(run, r, torque_noise_nm=0.2, seed=4)


def test_load_friction_and_a_joint_spring_are_recovered_when_modelled(loaded_planar) -> None:
    r, nl, caps = loaded_planar
    plain = identify(caps, r, RIGID)
    modelled = identify(caps, r, replace(RIGID, load_friction=True, joint_spring=True))
    truth = true_parameters(r, modelled, nl)
    est = dict(zip(modelled.names, modelled.estimate, strict=True))
    true = dict(zip(modelled.names, truth, strict=True))
    for j in (1, 2):
        assert est[f"mu{j}"] == pytest.approx(0.03, abs=0.01)
        assert est[f"ks{j}"] == pytest.approx(true[f"ks{j}"], rel=0.2)
        # the offset trades with gravity's nearly constant share over the arm's travel: it is
        # held to its own interval, not to a fixed figure
        k = modelled.names.index(f"off{j}")
        assert abs(est[f"off{j}"] - true[f"off{j}"]) <= 3 * modelled.std_robust[k]
    # Unmodelled, the load-dependent share lands in Coulomb friction; modelled, it does not.
    fc_true = np.array([j.coulomb_nm for j in r.joints])
    fc_plain = np.array([j.coulomb_nm for j in plain.joints])
    fc_modelled = np.array([j.coulomb_nm for j in modelled.joints])
    assert np.all(np.abs(fc_modelled - fc_true) < 0.5 * np.abs(fc_plain - fc_true))
    assert modelled.nmse_nm < plain.nmse_nm
    # (how often the intervals hold the truth is bench/bench_identification_coverage.py's)


def test_a_torque_constant_tolerance_widens_the_intervals_and_shows_in_the_json(
    loaded_planar,
) -> None:
    r, _, caps = loaded_planar
    plain = identify(caps, r, RIGID)
    told = identify(caps, r, replace(RIGID, torque_constant_tolerance=0.05))
    assert np.array_equal(plain.estimate, told.estimate)  # the estimate does not change
    base = [i for i, n in enumerate(told.names) if n.startswith("base")]
    # a 5 % scale uncertainty (uniform: 2.9 % std) at least, on every rigid-body parameter
    rel = told.std_robust[base] / np.abs(told.estimate[base])
    assert np.all(rel > 0.02)
    assert np.all(told.std_robust >= plain.std_robust)
    doc = json.loads(json.dumps(told.to_dict()))
    first = doc["parameters"][0]
    assert first["interval_95"][0] < first["value"] < first["interval_95"][1]
    assert doc["uncertainty"]["torque_constant_tolerance"] == 0.05
    assert len(doc["uncertainty"]["lags"]) == r.n_joints
