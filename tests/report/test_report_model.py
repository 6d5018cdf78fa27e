"""The report as data: verdicts and NE 107 signals of each joint, the JSON schema, message ids,
the files written, and the store -> report round trip that adds a point per run."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from agent.config.model import ThresholdSettings
from agent.health.status import Ne107, Status
from agent.history.records import estimates_for
from agent.history.store import HistoryStore
from agent.report.html.page import render_html
from agent.report.model import REPORT_SCHEMA, JointReport, Report, joint_report, report_to_dict
from agent.report.write import report_dir, write_report
from tests.support.report.samples import LIMITS, T0, result, sample_report

# -- report ------------------------------------------------------------------------------------


def test_joint_report_verdicts_and_trend() -> None:
    rep = sample_report()
    j1, j2, j3, j4 = rep.joints
    assert (j1.status, j1.indicator_name, j1.value) == (Status.WATCH, "backlash_rad", 1.2e-3)
    assert j1.trend is not None and j1.trend.forecast_alert is not None
    assert j1.trend.slope_per_day > 0
    assert (j2.status, j2.indicator_name, j2.trend) == (Status.OK, "amplitude_rad_s", None)
    assert j3.status is Status.UNKNOWN and "interlock" in j3.verdict_reason and j3.value is None
    assert j4.status is Status.ALERT
    assert rep.worst_status is Status.ALERT
    assert isinstance(j1.history, tuple)


def test_report_json_schema() -> None:
    d = report_to_dict(sample_report())
    assert d["schema"] == REPORT_SCHEMA == "jha.report/1"
    assert set(d) == {
        "schema",
        "message_id",
        "created_at",
        "agent_version",
        "host",
        "machines",
        "summary",
        "joints",
    }
    assert uuid.UUID(d["message_id"]).version == 4
    assert d["summary"] == {
        "worst_status": "alert",
        "counts": {"ok": 1, "watch": 1, "alert": 1, "unknown": 1},
        "ne107_counts": {
            "normal": 1,
            "maintenance_required": 1,
            "out_of_specification": 1,
            "failure": 1,
            "check_function": 0,
        },
    }
    j1 = d["joints"][0]
    assert set(j1) == {
        "controller",
        "joint",
        "status",
        "ne107",
        "reason",
        "recommendation",
        "forecast",
        "indicator",
        "value",
        "unit",
        "interval",
        "ambiguous",
        "limits",
        "error",
        "outcome",
        "capture_path",
        "result",
        "trend",
        "history",
    }
    assert (j1["status"], j1["ne107"], j1["unit"], j1["limits"]) == (
        "watch",
        "maintenance_required",
        "rad",
        {"watch": 1e-3, "alert": 2e-3},
    )
    assert "alert limit 2 mrad in about 40.1 days" in j1["forecast"]
    assert d["joints"][2]["ne107"] == "failure"  # an error without an outcome: failed
    assert j1["result"]["period_mismatch"] is None  # NaN -> null
    assert "evidence" not in j1["result"]
    assert j1["trend"]["forecast_alert"]["limit"] == 2e-3
    assert len(j1["history"]) == 4 and set(j1["history"][0]) == {"time", "value"}
    # A hand-made fit without intervals (as one recorded before they were) has none to show.
    assert j1["interval"] is None and j1["ambiguous"] is False
    assert d["joints"][2]["result"] is None and d["joints"][2]["error"]
    json.dumps(d, allow_nan=False)
    with_evidence = report_to_dict(sample_report(), evidence=True)
    assert len(with_evidence["joints"][0]["result"]["evidence"]["time_s"]) == 1500


def test_write_report_files(tmp_path: Path) -> None:
    rep = sample_report()
    json_path, html_path = write_report(rep, tmp_path / "reports" / "20240322T060000Z")
    assert (json_path.name, html_path.name) == ("report.json", "report.html")
    assert json.loads(json_path.read_text(encoding="utf-8")) == report_to_dict(rep)
    page = html_path.read_text(encoding="utf-8")
    assert page == render_html(rep, json_beside=True)
    assert sorted(p.name for p in json_path.parent.iterdir()) == ["report.html", "report.json"]


def test_report_dir_is_unique(tmp_path: Path) -> None:
    first = report_dir(tmp_path, T0)
    assert first == tmp_path / "reports" / "20240301T060000Z"
    first.mkdir(parents=True)
    assert report_dir(tmp_path, T0).name == "20240301T060000Z-1"


def test_each_run_adds_a_point_to_the_trend(tmp_path: Path) -> None:
    """The `jha` flow: record the cycle, read its history back, report; twice."""
    db = tmp_path / "history.sqlite"
    pages = []
    for run in range(4):
        res = result(backlash=0.8e-3 + 0.1e-3 * run, seed=run)
        started = T0 + timedelta(days=run)
        jr = joint_report("robot1", "J1", res, LIMITS)
        with HistoryStore(db) as store:
            store.record_cycle(
                controller="robot1",
                joint="J1",
                kind="backlash",
                started_at=started,
                finished_at=started + timedelta(minutes=1),
                estimates=estimates_for(res),
                status=jr.status,
                status_reason=jr.verdict_reason,
            )
            hist = store.history("robot1", "J1", jr.indicator_name)
        jr = joint_report("robot1", "J1", res, LIMITS, hist)
        rep = Report(started.isoformat(), ["robot1"], [jr])
        json_path, _ = write_report(rep, report_dir(tmp_path, started))
        data = json.loads(json_path.read_text(encoding="utf-8"))
        assert len(data["joints"][0]["history"]) == run + 1
        assert (data["joints"][0]["trend"] is None) == (run < 2)
        pages.append(json_path)
    last = json.loads(pages[-1].read_text(encoding="utf-8"))["joints"][0]
    assert last["trend"]["slope_per_day"] == pytest.approx(0.1e-3)
    assert last["status"] == "watch"
    with HistoryStore(db) as store:
        assert [c.status for c in store.cycles()] == ["watch", "watch", "ok", "ok"]


def test_joint_report_is_frozen() -> None:
    jr = JointReport("c", "j", Status.OK, "", None, None, ThresholdSettings(), None, [], None)
    with pytest.raises(AttributeError):
        jr.status = Status.ALERT  # type: ignore[misc]


def test_ne107_of_every_joint() -> None:
    ok = joint_report("r", "a", result(backlash=0.5e-3), LIMITS, outcome="ok")
    watch = joint_report("r", "b", result(backlash=1.5e-3), LIMITS)
    alert = joint_report("r", "c", result(backlash=2.5e-3), LIMITS)
    failed = joint_report("r", "d", None, LIMITS, error="fit blew up", outcome="error")
    refused = joint_report("r", "e", None, LIMITS, error="interlock: mode", outcome="rejected")
    no_estimate = joint_report("r", "f", None, LIMITS)
    running = joint_report("r", "g", result(backlash=2.5e-3), LIMITS, running=True)
    uncalibrated = joint_report("r", "h", result(backlash=1e-3), ThresholdSettings())
    signals = [
        j.ne107 for j in (ok, watch, alert, failed, refused, no_estimate, running, uncalibrated)
    ]
    assert signals == [
        Ne107.NORMAL,
        Ne107.MAINTENANCE_REQUIRED,
        Ne107.OUT_OF_SPECIFICATION,
        Ne107.FAILURE,
        Ne107.CHECK_FUNCTION,
        Ne107.CHECK_FUNCTION,
        Ne107.CHECK_FUNCTION,
        Ne107.CHECK_FUNCTION,
    ]
    # Built directly, a JointReport derives it too.
    direct = JointReport(
        "c",
        "j",
        Status.UNKNOWN,
        "",
        None,
        "boom",
        ThresholdSettings(),
        None,
        [],
        None,
        outcome="error",
    )
    assert direct.ne107 is Ne107.FAILURE
    d = report_to_dict(Report("t", ("r",), (ok, failed)))
    assert [j["ne107"] for j in d["joints"]] == ["normal", "failure"]
    assert d["summary"]["ne107_counts"]["failure"] == 1


def test_message_id_is_one_uuid4_per_report_and_kept_in_its_files(tmp_path: Path) -> None:
    a, b = sample_report(), sample_report()
    assert a.message_id != b.message_id
    assert uuid.UUID(a.message_id).version == 4
    json_path, html_path = write_report(a, tmp_path / "r")
    assert json.loads(json_path.read_text(encoding="utf-8"))["message_id"] == a.message_id
    assert a.message_id in html_path.read_text(encoding="utf-8")
    assert report_to_dict(a)["message_id"] == report_to_dict(a)["message_id"]
    fixed = Report("t", ("m",), (), message_id="5f0c7d0e-0000-4000-8000-000000000000")
    assert report_to_dict(fixed)["message_id"] == fixed.message_id
