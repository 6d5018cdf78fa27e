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
        # the offset trades with gravity's nearly constant share over the arm's travel, and the
        # shoulder's spring with the load share's column (|gravity| of the model, nearly linear
        # in q over this travel: ks1 4.2 +- 1.7 against 3.0): each is held to its own interval
        for term in ("off", "ks"):
            k = modelled.names.index(f"{term}{j}")
            assert abs(est[f"{term}{j}"] - true[f"{term}{j}"]) <= 3 * modelled.std_robust[k]
    assert est["ks2"] == pytest.approx(true["ks2"], rel=0.2)  # where the capture pins it
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


def test_the_model_check_widens_each_interval_by_the_extended_fits_shift(loaded_planar) -> None:
    """Unmodelled load friction and spring bias the plain fit; the check's second fit moves the
    estimates, each interval grows by its shift (GUM F.2.4.5), and the shifts beyond the noise
    are named in a warning and the JSON."""
    r, nl, caps = loaded_planar
    noise_only = identify(caps, r, replace(RIGID, model_check=False))
    checked = identify(caps, r, RIGID)
    assert noise_only.model_check is None
    assert np.array_equal(checked.estimate, noise_only.estimate)  # the estimate is the plain one
    check = checked.model_check
    assert check is not None and check.skipped is None
    extended = identify(caps, r, replace(RIGID, load_friction=True, joint_spring=True))
    for i, name in enumerate(checked.names):
        assert check.bias[i] == pytest.approx(extended.value(name) - checked.estimate[i])
    widths = np.diff(checked.interval_95(), axis=1).ravel()
    noise_widths = np.diff(noise_only.interval_95(), axis=1).ravel()
    np.testing.assert_allclose(widths, noise_widths + 2 * np.abs(check.bias))
    # Coulomb friction took the load-dependent share: its noise interval misses the truth, the
    # widened one holds it, and the warning names a significant shift.
    truth = dict(zip(checked.names, true_parameters(r, checked, nl), strict=True))
    missed = [
        n
        for n, (lo, hi) in zip(noise_only.names, noise_only.interval_95(), strict=True)
        if not lo <= truth[n] <= hi
    ]
    assert missed, "the plain fit's noise intervals should miss the biased parameters"
    for n in missed:
        lo, hi = checked.interval_95()[checked.names.index(n)]
        assert lo <= truth[n] <= hi, n
    assert check.significant.any()
    assert any("moves estimates beyond their noise" in w for w in checked.warnings)
    doc = json.loads(json.dumps(checked.to_dict(), allow_nan=False))
    mc = doc["uncertainty"]["model_check"]
    assert mc["alternative"] == "load-dependent friction and a joint spring"
    assert set(mc["bias"]) == set(checked.names) and mc["significant"]


def test_a_complete_model_is_not_warned_about(planar_clean) -> None:
    """Without load friction or a spring in the robot the shifts stay within their noise: no
    warning, and the intervals widen only by the (small) shifts."""
    r, caps = planar_clean
    checked = identify(caps, r, IdentificationSettings())  # the elastic model: the truth's
    check = checked.model_check
    assert check is not None and check.skipped is None
    assert not check.significant.any(), dict(
        zip(checked.names, check.bias / check.alt_std, strict=True)
    )
    assert not any("moves estimates" in w for w in checked.warnings)


@pytest.fixture(scope="module")
def planar_clean():
    r = load_robot(ROBOTS / "planar2.yaml")
    ex = design_excitation(r, ExcitationSettings(period_s=4.0, harmonics=4, maxiter=40))
    t, q, qd, qdd = ex.trajectory.sample(1000.0, 1, 0.3)
    run = er.simulate(r, t, q, qd, qdd)
    return r, measure(run, r, torque_noise_nm=0.2, seed=4)
