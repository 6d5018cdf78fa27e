"""`jha stiffness design|simulate|estimate|predict`, driven through agent.cli.stiffness."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from agent.cli.stiffness import register
from agent.cli.stiffness.measurements import (
    load_tcp_measurements,
    save_tcp_measurements,
    tcp_columns,
)
from agent.errors import EX_DATAERR, EX_NOINPUT, EX_OK, CaptureError, EstimationError, InputMissing
from agent.models.robot.compliance import InfeasibleRequestError
from agent.models.robot.compliance_measurements import TcpMeasurements
from tests.support.paths import ROBOTS

IRB = str(ROBOTS / "irb6660.yaml")
UR5E = str(ROBOTS / "ur5e.yaml")


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="jha")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["stiffness", *argv])
    code: int = args.func(args)
    return code


def test_design_simulate_estimate_predict_round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    design = tmp_path / "design.json"
    assert (
        run(
            "design",
            "--robot",
            IRB,
            "--measurements",
            "5",
            "--criterion",
            "D",
            "--starts",
            "2",
            "-o",
            str(design),
            "--json",
        )
        == EX_OK
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["criterion"] == "D" and len(shown["q_rad"]) == 5
    assert shown == json.loads(design.read_text())
    assert shown["criterion_value"] < shown["prior_criterion_value"]

    meas = tmp_path / "meas.csv"
    assert (
        run(
            "simulate",
            str(design),
            "--robot",
            IRB,
            "--k-scale",
            "1.2",
            "--seed",
            "1",
            "-o",
            str(meas),
        )
        == EX_OK
    )
    assert meas.read_text().startswith(",".join(tcp_columns(6)) + ",sigma_m\n")

    estimate = tmp_path / "estimate.json"
    capsys.readouterr()
    assert run("estimate", str(meas), "--robot", IRB, "--json", "-o", str(estimate)) == EX_OK
    est = json.loads(capsys.readouterr().out)
    k_true = 1.2 * np.array([3.4e6, 3.4e6, 1.35e6, 1.0e6, 6.7e5, 3.7e5])
    lo, hi = np.array(est["intervals_nm_rad"]).T
    assert np.all((lo < k_true) & (k_true < hi))
    assert len(est["residuals"]) == 5 and est["converged"]
    # told the set-up's tolerances, the estimate allows for them: wider, with its nuisances
    tolerances = ["--link-tilt-ratio", "0.06", "--force-scale-sd-percent", "1"]
    assert run("estimate", str(meas), "--robot", IRB, "--json", *tolerances) == EX_OK
    tolerant = json.loads(capsys.readouterr().out)
    assert np.all(np.array(tolerant["std_nm_rad"]) > np.array(est["std_nm_rad"]))
    assert "force_scale" in tolerant["nuisance"]

    assert (
        run(
            "predict",
            "--robot",
            IRB,
            "--q",
            "0",
            "20",
            "30",
            "0",
            "40",
            "0",
            "--degrees",
            "--force",
            "0",
            "300",
            "0",
            "--estimate",
            str(estimate),
            "--json",
        )
        == EX_OK
    )
    pred = json.loads(capsys.readouterr().out)
    assert pred["stiffness_from"] == str(estimate)
    dy, sd_y = pred["deviation_m"][0][1], pred["deviation_std_m"][0][1]
    assert 1e-4 < dy < 1e-3 and 0 < sd_y < 0.02 * dy  # tenths of a mm, known to ~1 %

    assert (
        run(
            "predict",
            "--robot",
            IRB,
            "--q",
            "0",
            "0.3",
            "0.5",
            "0",
            "0.7",
            "0",
            "--force",
            "0",
            "300",
            "0",
        )
        == EX_OK
    )
    text = capsys.readouterr().out
    assert "TCP deviation (um, 1 sd from" in text and "stiffness_nm_rad, 50% sd" in text


def test_text_output_of_design_and_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    design = tmp_path / "d.json"
    assert (
        run(
            "design",
            "--robot",
            IRB,
            "--measurements",
            "4",
            "--starts",
            "1",
            "--force-bounds",
            "300",
            "300",
            "0",
            "-o",
            str(design),
        )
        == EX_OK
    )
    out = capsys.readouterr().out
    assert "A-optimal, 4 measurements" in out and "axis_6" in out and "F " in out
    meas = tmp_path / "m.csv"
    run("simulate", str(design), "--robot", IRB, "-o", str(meas))
    run("estimate", str(meas), "--robot", IRB)
    out = capsys.readouterr().out
    assert "95 % intervals" in out and "chi2/dof" in out


def test_sequential_design_from_measurements_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    design, meas = tmp_path / "d.json", tmp_path / "m.csv"
    run("design", "--robot", IRB, "--measurements", "3", "--starts", "1", "-o", str(design))
    run("simulate", str(design), "--robot", IRB, "-o", str(meas))
    capsys.readouterr()
    assert (
        run(
            "design",
            "--robot",
            IRB,
            "--measurements",
            "1",
            "--given",
            str(meas),
            "--starts",
            "2",
            "--json",
        )
        == EX_OK
    )
    nxt = json.loads(capsys.readouterr().out)
    assert nxt["given"] == 3 and len(nxt["q_rad"]) == 1
    assert nxt["criterion_value"] < json.loads(design.read_text())["criterion_value"]


def test_dual_encoder_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payload = ["--payload-kg", "3", "--payload-com", "0.08", "0", "0.05"]
    joints = ["--joints", "shoulder_lift", "elbow", "wrist_1", "wrist_2", "wrist_3"]
    design, meas = tmp_path / "d.json", tmp_path / "m.csv"
    assert (
        run(
            "design",
            "--robot",
            UR5E,
            "--method",
            "dual-encoder",
            "--measurements",
            "6",
            "--starts",
            "1",
            *joints,
            *payload,
            "-o",
            str(design),
        )
        == EX_OK
    )
    assert (
        run("simulate", str(design), "--robot", UR5E, *payload, "--seed", "2", "-o", str(meas))
        == EX_OK
    )
    capsys.readouterr()
    assert (
        run(
            "estimate",
            str(meas),
            "--robot",
            UR5E,
            "--method",
            "dual-encoder",
            *joints,
            *payload,
            "--json",
        )
        == EX_OK
    )
    est = json.loads(capsys.readouterr().out)
    assert est["method"] == "dual-encoder" and est["joint_names"][0] == "shoulder_lift"
    assert len(est["nuisance"]) == 5  # one encoder offset per joint


def test_csv_round_trip_and_errors_name_file_and_line(tmp_path: Path) -> None:
    data = TcpMeasurements(
        np.zeros((2, 6)), np.ones((2, 3)), np.full((2, 3), 1e-4), np.full((2, 3), 2e-6)
    )
    path = tmp_path / "m.csv"
    save_tcp_measurements(data, path)
    back = load_tcp_measurements(path, 6)
    assert back.deviation_m == pytest.approx(data.deviation_m)
    assert back.sigma_m == pytest.approx(data.sigma_m)

    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1].replace("0.0001", "x", 1), lines[2]]) + "\n")
    with pytest.raises(CaptureError, match=rf"{path}:2: column dx_m: expected a number, found 'x'"):
        load_tcp_measurements(path, 6)
    path.write_text("# comment\nq1_rad,fx_n\n0,1\n")
    with pytest.raises(CaptureError, match=rf"{path}:2: header lacks q2_rad"):
        load_tcp_measurements(path, 6)
    with pytest.raises(InputMissing, match=r"missing\.csv: no such file") as missing:
        load_tcp_measurements(tmp_path / "missing.csv", 6)
    assert missing.value.exit_code == EX_NOINPUT


def test_bad_requests_raise_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(EstimationError, match="--q needs 6 joint angles"):
        run("predict", "--robot", IRB, "--q", "0", "0", "--force", "0", "0", "1")
    with pytest.raises(InfeasibleRequestError, match="joint axis_3 \\(closed chain\\)") as err:
        run(
            "predict",
            "--robot",
            IRB,
            "--q",
            "0",
            "20",
            "100",
            "0",
            "40",
            "0",
            "--degrees",
            "--force",
            "0",
            "300",
            "0",
        )
    assert err.value.exit_code == EX_DATAERR
    with pytest.raises(InfeasibleRequestError) as err:
        run("design", "--robot", UR5E, "--measurements", "3", "--starts", "1")
    assert err.value.subject == "joint wrist_3"
    with pytest.raises(InfeasibleRequestError, match="beyond the reach"):
        run("design", "--robot", IRB, "--measurements", "2", "--target", "5", "0", "0")
    bad = tmp_path / "e.json"
    bad.write_text("{not json")
    with pytest.raises(CaptureError, match="invalid JSON"):
        run(
            "predict",
            "--robot",
            IRB,
            "--q",
            "0",
            "0",
            "0",
            "0",
            "0",
            "0",
            "--force",
            "1",
            "0",
            "0",
            "--estimate",
            str(bad),
        )
