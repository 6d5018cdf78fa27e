"""Stiffness and identification results in the joint-health history, and `jha report` from it."""

from __future__ import annotations

import argparse
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from agent.cli import identify as cli_identify
from agent.cli import report as cli_report
from agent.cli import stiffness as cli_stiffness
from agent.cli.common import record_joint_estimates
from agent.errors import EX_CONFIG, EX_NOINPUT, EX_OK, EX_USAGE, AgentError
from agent.estimation.identification.result import IndicatorRow
from agent.history.records import Estimate
from agent.history.store import HistoryStore
from agent.report.history import report_from_history
from agent.report.html.page import render_html
from agent.report.model import report_to_dict
from agent.report.table import summary_table
from tests.support.paths import ROBOTS

IRB = str(ROBOTS / "irb6660.yaml")
IRB_JOINTS = ["axis_1", "axis_2", "axis_3", "axis_4", "axis_5", "axis_6"]
K_NOMINAL = np.array([3.4e6, 3.4e6, 1.35e6, 1.0e6, 6.7e5, 3.7e5])

CONFIG = """\
agent:
  state_dir: {state}
controllers:
  - name: cell1
    driver: sim
    joints:
      - name: axis_2
        index: 2
        gear_ratio: 40
        backlash_cycle: {{motor_speed_rps: 100, load_turns: 6, sample_rate_hz: 500}}
        thresholds: {{backlash_watch_rad: 4.0e-4, backlash_alert_rad: 8.0e-4}}
"""


def jha(*argv: str) -> int:
    """A `jha` command as agent.cli.main.main runs it: AgentError -> its exit code."""
    parser = argparse.ArgumentParser(prog="jha")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_stiffness.register(sub)
    cli_identify.register(sub)
    cli_report.register(sub)
    args = parser.parse_args(list(argv))
    try:
        code: int = args.func(args)
    except AgentError as exc:
        print(f"jha: {exc}")
        code = exc.exit_code
    return code


@pytest.fixture(scope="module")
def measurements(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A designed and simulated TCP measurement file of the IRB 6660 (k = 1.2 x nominal)."""
    d = tmp_path_factory.mktemp("stiffness")
    design, meas = d / "design.json", d / "meas.csv"
    assert (
        jha(
            "stiffness",
            "design",
            "--robot",
            IRB,
            "--measurements",
            "5",
            "--criterion",
            "D",
            "--starts",
            "1",
            "-o",
            str(design),
        )
        == EX_OK
    )
    assert (
        jha(
            "stiffness",
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
    return meas


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(CONFIG.format(state=tmp_path / "state"))
    return path


def record_stiffness(meas: Path, config: Path, controller: str = "cell1") -> int:
    return jha(
        "stiffness",
        "estimate",
        str(meas),
        "--robot",
        IRB,
        "--record",
        "--config",
        str(config),
        "--controller",
        controller,
    )


def report_json(config: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert jha("report", "--config", str(config), "--json") == EX_OK
    return json.loads(capsys.readouterr().out)


def test_recorded_stiffness_appears_for_every_joint_of_the_report(
    measurements: Path, config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert record_stiffness(measurements, config) == EX_OK
    assert "recorded stiffness of 6 joints" in capsys.readouterr().err

    d = report_json(config, capsys)
    assert d["schema"] == "jha.report/1" and d["machines"] == ["cell1"]
    # No backlash cycle yet: every robot-file joint is an indicator-only joint, with no status.
    assert d["joints"] == [] and d["summary"]["worst_status"] == "ok"
    shown = {j["joint"]: j for j in d["indicator_joints"]}
    assert list(shown) == IRB_JOINTS
    for name, k_true in zip(IRB_JOINTS, 1.2 * K_NOMINAL, strict=True):
        (ind,) = shown[name]["indicators"]
        assert (ind["indicator"], ind["unit"], ind["n_points"]) == (
            "stiffness_nm_rad",
            "N·m/rad",
            1,
        )
        assert ind["latest_value"] == pytest.approx(k_true, rel=0.05)
        assert ind["trend"] is None

    with HistoryStore(tmp_path / "state" / "history.sqlite") as store:
        cycle = store.latest("cell1", "axis_3")
        assert cycle is not None and (cycle.kind, cycle.outcome) == ("stiffness", "ok")
        est = cycle.estimate("stiffness_nm_rad")
        assert est is not None
        lo, hi = est.detail["interval"]
        assert lo < 1.2 * K_NOMINAL[2] < hi and 0 < est.detail["std"] < 0.05 * est.value
        assert est.detail["confidence"] == pytest.approx(0.95)

    html_path = tmp_path / "report.html"
    capsys.readouterr()
    assert jha("report", "--config", str(config), "--html", str(html_path)) == EX_OK
    table = capsys.readouterr().out
    assert all(f"cell1/{n}" in table for n in IRB_JOINTS) and "stiffness_nm_rad" in table
    page = html_path.read_text()
    assert page.count("<h4>Indicators</h4>") == 6 and "kN·m/rad" in page
    assert page.count('<section class="machine"') == 1


def test_recording_twice_gives_two_trend_points_and_a_plot(
    measurements: Path, config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert record_stiffness(measurements, config) == EX_OK
    assert record_stiffness(measurements, config) == EX_OK
    d = report_json(config, capsys)
    for j in d["indicator_joints"]:
        (ind,) = j["indicators"]
        assert ind["n_points"] == 2 and len(ind["history"]) == 2
        assert ind["history"][0]["time"] <= ind["history"][1]["time"]
    with HistoryStore(tmp_path / "state" / "history.sqlite") as store:
        assert len(store.history("cell1", "axis_1", "stiffness_nm_rad")) == 2
        assert store.indicators("cell1", "axis_1") == [("stiffness_nm_rad", "N·m/rad")]
    capsys.readouterr()
    html_path = tmp_path / "r.html"
    assert jha("report", "--config", str(config), "--html", str(html_path)) == EX_OK
    page = html_path.read_text()
    assert page.count("<svg") == 6 and page.count("Trend of stiffness</title>") == 6


def test_unknown_controller_or_missing_options_are_refused(
    measurements: Path, config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert record_stiffness(measurements, config, controller="cel1") == EX_CONFIG
    out = capsys.readouterr().out
    assert "'cel1'" in out and "controllers: cell1" in out
    assert not (tmp_path / "state" / "history.sqlite").exists()
    assert jha("stiffness", "estimate", str(measurements), "--robot", IRB, "--record") == EX_USAGE
    assert (
        jha("stiffness", "estimate", str(measurements), "--robot", IRB, "--config", str(config))
        == EX_USAGE
    )
    # identify checks the controller before it reads a capture
    assert (
        jha(
            "identify",
            str(tmp_path / "none"),
            "--robot",
            IRB,
            "--record",
            "--config",
            str(config),
            "--controller",
            "nope",
        )
        == EX_CONFIG
    )
    assert jha("report", "--config", str(config), "--controller", "nope") == EX_CONFIG
    # A UR5e's joints recorded under a cell whose joints have other names: refused before the
    # capture is read, naming both sets; nothing is written.
    capsys.readouterr()
    ur5e = str(ROBOTS / "ur5e.yaml")
    code = jha(
        "identify",
        str(tmp_path / "none"),
        "--robot",
        ur5e,
        "--record",
        "--config",
        str(config),
        "--controller",
        "cell1",
    )
    out = capsys.readouterr().out
    assert code == EX_USAGE and "controller cell1 has none of the joints shoulder_pan" in out
    assert "(its joints: axis_2)" in out
    # with a robot file in the controller, every recorded joint must be one of its joints
    named = tmp_path / "named.yaml"
    named.write_text(
        config.read_text().replace("    driver: sim\n", f"    driver: sim\n    robot: {IRB}\n")
    )
    code = jha(
        "stiffness",
        "estimate",
        str(measurements),
        "--robot",
        ur5e,
        "--record",
        "--config",
        str(named),
        "--controller",
        "cell1",
    )
    out = capsys.readouterr().out
    assert code == EX_USAGE and f"robot file {IRB} has no joint shoulder_pan" in out
    assert not (tmp_path / "state" / "history.sqlite").exists()


def test_identification_rows_are_recorded_per_joint_with_their_uncertainty(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        IndicatorRow("joint_1", "coulomb_friction_nm", 2.5, "N·m", 3.1),
        IndicatorRow("joint_1", "stiffness_nm_rad", 1.1e4, "N·m/rad", 0.8),
        IndicatorRow("joint_1", "torque_nmse_nm", float("nan"), "N·m", None),
        IndicatorRow("joint_2", "viscous_friction_nm_s_rad", 0.4, "N·m·s/rad", None),
    ]
    found = cli_identify.identification_estimates(rows, {"method": "wls"})
    assert [e.indicator for e in found["joint_1"]] == ["coulomb_friction_nm", "stiffness_nm_rad"]
    assert found["joint_1"][0].detail == {"method": "wls", "rel_std_pct": 3.1}
    path = tmp_path / "state" / "history.sqlite"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for day in range(3):
        scaled = {
            j: [Estimate(e.indicator, e.value * (1 + 0.1 * day), e.unit, e.detail) for e in es]
            for j, es in found.items()
        }
        record_joint_estimates(path, "cell1", "identification", scaled, start + timedelta(days=day))
    with HistoryStore(path) as store:
        assert store.joints("cell1") == ["joint_1", "joint_2"]
        assert store.indicators("cell1", "joint_1") == [
            ("coulomb_friction_nm", "N·m"),
            ("stiffness_nm_rad", "N·m/rad"),
        ]
        report = report_from_history(store, "cell1")
    (j1, j2) = report.indicator_joints
    fc = j1.indicators[0]
    assert fc.indicator == "coulomb_friction_nm" and len(fc.history) == 3
    assert fc.trend is not None and fc.trend.slope_per_day == pytest.approx(0.25)
    assert fc.trend.forecast_watch is None and fc.trend.forecast_alert is None
    assert j2.indicators[0].latest is not None
    assert j2.indicators[0].latest.value == pytest.approx(0.48)
    d = report_to_dict(report)
    assert d["indicator_joints"][0]["indicators"][0]["trend"]["slope_per_day"] == (
        pytest.approx(0.25)
    )
    json.dumps(d, allow_nan=False)
    assert "+0.25 N·m/day" in render_html(report)
    assert "cell1/joint_2" in summary_table(report)


def test_a_backlash_joint_shows_its_other_indicators_beside_its_verdict(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "state" / "history.sqlite"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with HistoryStore(path) as store:
        for day, backlash in enumerate((3e-4, 5e-4, 6e-4)):
            store.record_cycle(
                controller="cell1",
                joint="axis_2",
                kind="backlash",
                started_at=start + timedelta(days=day),
                finished_at=None,
                estimates=[
                    Estimate("amplitude_rad_s", 1.0, "rad/s"),
                    Estimate("backlash_rad", backlash, "rad"),
                ],
            )
        store.record_cycle(
            controller="cell1",
            joint="axis_2",
            kind="stiffness",
            started_at=start,
            finished_at=None,
            estimates=[Estimate("stiffness_nm_rad", 3.4e6, "N·m/rad")],
        )
        store.record_rejected(
            controller="cell1",
            joint="axis_9",
            kind="backlash",
            started_at=start,
            finished_at=None,
            reason="interlock refused",
        )
    d = report_json(config, capsys)
    (bl, failed) = d["joints"]
    assert (bl["joint"], bl["status"], bl["indicator"], bl["value"]) == (
        "axis_2",
        "watch",
        "backlash_rad",
        6e-4,
    )
    assert bl["trend"]["n_points"] == 3 and bl["trend"]["forecast_alert"] is not None
    # Every further indicator, the unjudged backlash one (amplitude) included.
    assert [i["indicator"] for i in bl["indicators"]] == ["amplitude_rad_s", "stiffness_nm_rad"]
    assert (failed["joint"], failed["status"]) == ("axis_9", "unknown")
    assert (bl["ne107"], failed["ne107"]) == ("maintenance_required", "check_function")
    assert "interlock refused" in failed["reason"]
    assert "indicator_joints" not in d


def test_report_from_history_ne107_after_an_error_or_a_refusal(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last backlash cycle decides NE 107: an analysis error makes the joint 'failure' (its
    health cannot be measured now); a refused cycle only adds a note to the last verdict."""
    path = tmp_path / "state" / "history.sqlite"
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with HistoryStore(path) as store:
        for joint in ("axis_2", "axis_3"):
            for day, backlash in enumerate((3e-4, 5e-4, 6e-4)):
                store.record_cycle(
                    controller="cell1",
                    joint=joint,
                    kind="backlash",
                    started_at=start + timedelta(days=day),
                    finished_at=None,
                    estimates=[Estimate("backlash_rad", backlash, "rad")],
                    status="ok",
                    trigger="schedule",
                )
        store.record_rejected(
            controller="cell1",
            joint="axis_3",
            kind="backlash",
            started_at=start + timedelta(days=4),
            finished_at=None,
            reason="analysis failed: NaN in capture",
            outcome="error",
        )
        store.record_rejected(
            controller="cell1",
            joint="axis_2",
            kind="backlash",
            started_at=start + timedelta(days=4),
            finished_at=None,
            reason="interlock: override 80 %",
        )
        # A later stiffness cycle is not a backlash cycle: it does not hide the error.
        store.record_cycle(
            controller="cell1",
            joint="axis_3",
            kind="stiffness",
            started_at=start + timedelta(days=5),
            finished_at=None,
            estimates=[Estimate("stiffness_nm_rad", 3.4e6, "N·m/rad")],
            trigger="manual",
        )
    d = report_json(config, capsys)
    assert uuid.UUID(d["message_id"]).version == 4
    refused, failed = d["joints"]
    assert (failed["joint"], failed["status"], failed["ne107"], failed["outcome"]) == (
        "axis_3",
        "unknown",
        "failure",
        "error",
    )
    assert failed["reason"].startswith("cycle failed: analysis failed: NaN in capture")
    assert failed["trend"]["n_points"] == 3  # the history is still shown
    assert (refused["joint"], refused["status"], refused["ne107"], refused["outcome"]) == (
        "axis_2",
        "watch",
        "maintenance_required",
        "rejected",
    )
    assert "(last cycle rejected: interlock: override 80 %)" in refused["reason"]
    assert d["summary"]["ne107_counts"]["failure"] == 1
    capsys.readouterr()
    assert jha("report", "--config", str(config)) == EX_OK
    table = capsys.readouterr().out.splitlines()
    # the failed joint (NE 107 F) comes before the refused one (C): act on it first
    assert table[2].startswith("cell1/axis_3") and "0.6 mrad  UNKNOWN  F   error: " in table[2]


def test_report_command_outputs_and_an_empty_history(
    config: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = tmp_path / "state"
    capsys.readouterr()
    # No history yet: an empty report that says so and fails, and the reader creates nothing.
    assert jha("report", "--config", str(config), "--json") == EX_NOINPUT
    out = capsys.readouterr()
    assert json.loads(out.out)["joints"] == [] and "no history yet" in out.err
    assert jha("report", "--config", str(config)) == EX_NOINPUT
    out = capsys.readouterr()
    assert "worst" not in out.out and "nothing to report" in out.err
    assert not state.exists()
    # A history without this controller's joints is no report either.
    with HistoryStore(state / "history.sqlite") as store:
        store.record_cycle(
            controller="other_cell",
            joint="axis_1",
            kind="backlash",
            started_at=datetime(2026, 1, 1, tzinfo=UTC),
            finished_at=None,
            estimates=[Estimate("backlash_rad", 5e-4, "rad")],
        )
    assert jha("report", "--config", str(config)) == EX_NOINPUT
    assert "no joint of cell1 in history" in capsys.readouterr().err
    with HistoryStore(state / "history.sqlite") as store:
        store.record_cycle(
            controller="cell1",
            joint="axis_2",
            kind="backlash",
            started_at=datetime(2026, 1, 1, tzinfo=UTC),
            finished_at=None,
            estimates=[Estimate("backlash_rad", 5e-4, "rad")],
        )
    # --html and --json together: the page in the file, the JSON on stdout.
    page = tmp_path / "out" / "report.html"
    page.parent.mkdir()
    assert jha("report", "--config", str(config), "--html", str(page), "--json") == EX_OK
    d = json.loads(capsys.readouterr().out)
    assert d["joints"][0]["status"] == "watch" and d["joints"][0]["ne107"] == (
        "maintenance_required"
    )
    assert "axis_2" in page.read_text(encoding="utf-8")
    # Without --config the installed service's config is used, if there is one.
    monkeypatch.setattr(cli_report, "DEFAULT_CONFIG", tmp_path / "etc" / "config.yaml")
    assert jha("report") == EX_USAGE
    assert "no --config FILE given" in capsys.readouterr().out
    cli_report.DEFAULT_CONFIG.parent.mkdir()
    cli_report.DEFAULT_CONFIG.write_text(config.read_text())
    assert jha("report") == EX_OK
    assert "cell1/axis_2" in capsys.readouterr().out
