"""The identification cycle's analysis (agent.kinds.identification.analysis) on simulated
captures of the planar robot: friction and stiffness recovered, a worn joint found, the evidence,
the refusals, and `jha simulate identification` then `jha identify`."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from typing import Any

import numpy as np
import pytest

from agent.capture.multi import (
    MultiCapture,
    is_multi_capture,
)
from agent.cli.main import main
from agent.config.identification import IdentificationCycleSettings
from agent.errors import EX_OK, EX_USAGE
from agent.kinds.identification.analysis import (
    MAX_EVIDENCE_POINTS,
    IdentificationRefused,
    analyze_identification,
)
from agent.models.robot.description import load_robot
from agent.report.evidence import EvidencePlot
from tests.support.identification.captures import (
    PLANAR,
    cycle_settings,
)


def values(outcome) -> dict[str, dict[str, float]]:
    return {j: {e.indicator: e.value for e in es} for j, es in outcome.estimates.items()}


# ------------------------------------------------------------------------------- the analysis


def test_the_whole_path_recovers_friction_and_stiffness(healthy) -> None:
    truth = load_robot(PLANAR)
    outcome = analyze_identification(healthy, cycle_settings())
    found = values(outcome)
    assert set(found) == {"joint_1", "joint_2"}
    for spec in truth.joints:
        v = found[spec.name]
        assert set(v) == {
            "coulomb_friction_nm", "viscous_friction_nm_s_rad", "stiffness_nm_rad",
            "torque_nmse_nm",
        }  # fmt: skip
        # Stated tolerances: friction 10 %, stiffness 2 % (a Stribeck hump of half the
        # Coulomb level, 0.2 N·m torque noise and 1.25 M-count encoders in the simulation)
        assert v["coulomb_friction_nm"] == pytest.approx(spec.coulomb_nm, rel=0.10)
        assert v["viscous_friction_nm_s_rad"] == pytest.approx(spec.viscous_nm_s_rad, rel=0.10)
        assert v["stiffness_nm_rad"] == pytest.approx(spec.stiffness_nm_rad, rel=0.02)
        assert 0.0 < v["torque_nmse_nm"] < 0.05
    est = outcome.estimates["joint_1"][0]
    assert est.unit == "N·m" and est.detail["model"] == "elastic"
    assert est.detail["rel_std_pct"] < 5.0
    assert outcome.condition_number < 100 and outcome.controller == "cell1"
    assert outcome.robot == "planar2" and outcome.warnings == ()


def test_a_worn_joint_shows_up(healthy, worn) -> None:
    s = cycle_settings()
    before = values(analyze_identification(healthy, s))
    after = values(analyze_identification(worn, s))
    ratio = {
        j: {k: after[j][k] / before[j][k] for k in before[j] if k != "torque_nmse_nm"}
        for j in before
    }
    assert ratio["joint_2"]["coulomb_friction_nm"] == pytest.approx(2.0, rel=0.1)
    assert ratio["joint_2"]["viscous_friction_nm_s_rad"] == pytest.approx(2.0, rel=0.1)
    assert ratio["joint_2"]["stiffness_nm_rad"] == pytest.approx(0.7, rel=0.03)
    for k, r in ratio["joint_1"].items():  # the healthy joint stays where it was
        assert r == pytest.approx(1.0, rel=0.1), k


def test_the_outcome_carries_evidence_and_crosses_processes(healthy) -> None:
    outcome = analyze_identification(healthy, cycle_settings())
    for joint in ("joint_1", "joint_2"):
        (plot,) = outcome.evidence[joint]
        assert isinstance(plot, EvidencePlot) and joint in plot.title
        measured, predicted = plot.series
        assert (measured.label, predicted.label) == ("measured", "predicted")
        assert 100 < measured.x.size <= MAX_EVIDENCE_POINTS
        assert np.all(np.diff(measured.x) > 0) and np.array_equal(measured.x, predicted.x)
        assert np.all(np.isfinite(measured.y)) and np.all(np.isfinite(predicted.y))
        rms = np.sqrt(np.mean((measured.y - predicted.y) ** 2))
        assert rms < 0.05 * np.sqrt(np.mean(measured.y**2))
    d = json.loads(json.dumps(outcome.to_dict(), allow_nan=False))
    assert d["estimates"]["joint_2"][0]["indicator"] == "coulomb_friction_nm"
    assert d["evidence"]["joint_1"][0]["series"][0]["label"] == "measured"
    assert d["result"]["robot"] == "planar2"
    back = pickle.loads(pickle.dumps(outcome))
    assert values(back) == values(outcome)


def test_long_evidence_is_decimated_to_the_limit(healthy) -> None:
    # decimation 1 keeps every sample: ~9000 rows for the plots to thin out
    outcome = analyze_identification(healthy, cycle_settings(decimation=1, cutoff_hz=8.0))
    for (plot,) in outcome.evidence.values():
        assert MAX_EVIDENCE_POINTS // 2 < plot.series[0].x.size <= MAX_EVIDENCE_POINTS


def refusal(capture: MultiCapture, settings: IdentificationCycleSettings, **kw: Any):
    with pytest.raises(IdentificationRefused) as err:
        analyze_identification(capture, settings, **kw)
    back = pickle.loads(pickle.dumps(err.value))  # the pool hands it back whole
    assert back.reason == err.value.reason and str(back) == str(err.value)
    assert err.value.exit_code == 65
    return err.value


def test_refusals_say_why(healthy) -> None:
    s = cycle_settings()
    lost = MultiCapture(
        healthy.time_s,
        healthy.joints,
        {k: v for k, v in healthy.channels.items() if k != "link_pos_rad"},
        healthy.meta,
        healthy.gear_ratios,
        "<no link encoder>",
    )
    e = refusal(lost, s)
    assert e.reason == "missing_channels" and "link encoder (link_pos_rad or link_counts)" in str(e)
    one = MultiCapture.from_joint_captures(healthy.joint_captures()[:1], "<one joint>")
    e = refusal(one, s)
    assert e.reason == "missing_channels" and "no data for joints joint_2" in str(e)

    e = refusal(healthy, dataclasses.replace(s, max_condition_number=2.0))
    assert e.reason == "poor_excitation" and "exceeds the limit 2" in str(e)

    # the same motion on a robot whose drive 2 tops out below the torque it needed
    robot = load_robot(PLANAR)
    peak = float(np.max(np.abs(healthy.channel("motor_torque_nm")[:, 1]))) * 100.0
    weak = dataclasses.replace(
        robot,
        joints=(robot.joints[0], dataclasses.replace(robot.joints[1], torque_max_nm=0.8 * peak)),
    )
    e = refusal(healthy, s, robot=weak)
    assert e.reason == "saturated" and "joint joint_2 saturated" in str(e)


# ------------------------------------------------------------------------------- the CLI


def test_jha_simulate_identification_then_identify(tmp_path, capsys) -> None:
    out = tmp_path / "ident.npz"
    argv = ["simulate", "identification", "--robot", PLANAR, "-o", str(out), "--periods", "1"]
    code = main([*argv, "--friction-scale", "joint_1=2", "--torque-noise-nm", "0.1"])
    assert code == EX_OK and "2 joints at 1000 Hz" in capsys.readouterr().out
    assert is_multi_capture(out)
    code = main(["identify", str(out), "--robot", PLANAR, "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == EX_OK
    fc = {j["joint"]: j["coulomb_nm"] for j in d["joints"]}
    assert fc["joint_1"] == pytest.approx(4.0, rel=0.1)
    assert fc["joint_2"] == pytest.approx(1.0, rel=0.1)
    # An unknown joint is a usage error found before anything is designed or simulated.
    code = main([*argv, "--friction-scale", "joint_9=2", "--stiffness-scale", "joint_1=1.1"])
    err = capsys.readouterr()
    assert code == EX_USAGE and not out.with_suffix(".tmp").exists()
    assert "--friction-scale: no joint joint_9" in (err.err + err.out)
    assert "its joints are joint_1, joint_2" in (err.err + err.out)
    assert math.isfinite(d["nmse_nm"])
