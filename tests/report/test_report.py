"""SVG plots, the JSON + HTML report, the terminal table, and the store -> report round trip."""

from __future__ import annotations

import itertools
import json
import math
import re
import unicodedata
import uuid
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.model import ThresholdSettings
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import Ne107, Status, TrendPoint
from agent.history.records import estimates_for
from agent.history.store import HistoryStore
from agent.report.evidence import EvidencePlot, EvidenceSeries
from agent.report.html.page import render_html
from agent.report.html.plots import trend_svg
from agent.report.model import REPORT_SCHEMA, JointReport, Report, joint_report, report_to_dict
from agent.report.svg import (
    LEGEND_CHAR_PX,
    SVG_NS,
    HLine,
    Series,
    clean_text,
    decimate,
    label_text,
    legend_layout,
    line_plot,
    nice_ticks,
)
from agent.report.table import summary_table
from agent.report.write import report_dir, write_report

T0 = datetime(2024, 3, 1, 6, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script>&amp;\x1b[2J\ud800'
LIMITS = ThresholdSettings(
    backlash_watch_rad=1e-3,
    backlash_alert_rad=2e-3,
    amplitude_watch_rad_s=0.1,
    amplitude_alert_rad_s=0.2,
)


def result(
    amplitude: float = 0.05, backlash: float | None = 8e-4, n: int = 1500, seed: int = 0
) -> BacklashResult:
    """A hand-built fit: a damped sine as the signature, plus seeded noise as the residual."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 3.0, n)
    fitted = amplitude * np.exp(-8 * (t % 0.5)) * np.sin(2 * np.pi * 35 * t)
    return BacklashResult(
        amplitude_rad_s=amplitude,
        backlash_rad=backlash,
        rmse_rad_s=0.004,
        residual_rms_rad_s=0.02,
        params={"A_rad_s": amplitude, "tau_per_s": 8.0, "omega_rad_s": 2 * np.pi * 35},
        evaluations=2400,
        restarts=2,
        converged=True,
        stop_reason="tolfun",
        fit_seconds=3.4,
        seed=seed,
        period_metadata_s=1.0,
        period_estimated_s=1.002,
        period_mismatch=float("nan"),
        warnings=("period from metadata",),
        time_s=t,
        residual_rad_s=fitted + rng.normal(0, 0.004, n),
        fitted_rad_s=fitted,
    )


def points(values: list[float]) -> list[TrendPoint]:
    return [TrendPoint((T0 + timedelta(days=7 * i)).isoformat(), v) for i, v in enumerate(values)]


def sample_report() -> Report:
    joints = (
        joint_report(
            "robot1",
            "J1",
            result(backlash=1.2e-3),
            LIMITS,
            points([0.8e-3, 0.9e-3, 1.05e-3, 1.2e-3]),
            capture_path="/var/c/j1.npz",
        ),
        joint_report(
            "robot1", "J2", result(amplitude=0.03, backlash=None), LIMITS, points([0.02, 0.03])
        ),
        joint_report(
            "robot1",
            "J3",
            None,
            LIMITS,
            error="interlock: joint not in pose",
            indicator="backlash_rad",
        ),
        joint_report("cnc<&>", HOSTILE, result(backlash=2.5e-3, seed=1), LIMITS, points([2.5e-3])),
    )
    return Report("2024-03-22T06:00:00Z", ("robot1", "cnc<&>"), joints, host="edge-01")


# -- svg ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6), st.integers(2, 10))
def test_nice_ticks_cover_the_range_on_a_125_grid(lo: float, span: float, max_ticks: int) -> None:
    hi = lo + span
    ticks = nice_ticks(lo, hi, max_ticks)
    step = ticks[1] - ticks[0]
    assert ticks[0] <= lo + 1e-9 * step and ticks[-1] >= hi - 1e-9 * step
    assert len(ticks) <= max_ticks + 3
    mantissa = step / 10 ** math.floor(math.log10(step))
    # Loose: ticks near 2048 a micro-unit apart carry float rounding of ~1e-6 relative.
    assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-3
    assert np.allclose(np.diff(ticks), step, rtol=1e-3, atol=0)


def test_nice_ticks_examples() -> None:
    assert nice_ticks(0.0, 10.0, 5) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert nice_ticks(0.13, 0.87, 4) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert len(nice_ticks(3.0, 3.0)) >= 2  # a constant series still gets an axis


def test_line_plot_is_valid_xml_with_series_legend_and_limits() -> None:
    x = np.linspace(0, 1, 50)
    svg = line_plot(
        [
            Series("residual", x, np.sin(6 * x)),
            Series("fit <A&B>", x, np.cos(6 * x), dashed=True, markers=True),
        ],
        title='Signature "J1" <test>',
        x_label="time [s]",
        y_label="speed [rad/s]",
        hlines=[HLine(1.5, "alert limit")],
    )
    root = ET.fromstring(svg)
    assert root.tag == f"{{{SVG_NS}}}svg"
    texts = [t.text for t in root.iter(f"{{{SVG_NS}}}text")]
    assert 'Signature "J1" <test>' in texts and "fit <A&B>" in texts and "alert limit" in texts
    assert len(list(root.iter(f"{{{SVG_NS}}}polyline"))) == 2
    assert len(list(root.iter(f"{{{SVG_NS}}}circle"))) == 50
    assert "<test>" not in svg  # escaped in the source


def test_line_plot_survives_empty_constant_and_nan_series() -> None:
    svg = line_plot(
        [
            Series("empty", [], []),
            Series("flat", [1, 2, 3], [5, 5, 5]),
            Series("holes", [0, 1, 2], [1, float("nan"), float("inf")]),
        ],
        "t",
        "x",
        "y",
        hlines=[HLine(float("nan"), "no limit")],
    )
    ET.fromstring(svg)
    inline = line_plot([Series("a", [0, 1], [0, 1])], "t", "x", "y", xmlns=False)
    assert "xmlns" not in inline and ET.fromstring(inline).tag == "svg"
    with pytest.raises(ValueError, match="series 'bad'"):
        line_plot([Series("bad", [0, 1, 2], [0, 1])], "t", "x", "y")


def test_decimation_keeps_peaks_and_bounds_the_size() -> None:
    rng = np.random.default_rng(5)
    x = np.arange(100_000, dtype=float)
    y = rng.normal(0, 1, x.size)
    y[31_337], y[77_001] = 40.0, -35.0
    dx, dy = decimate(x, y)
    assert len(dx) <= 2000 and np.all(np.diff(dx) > 0)
    assert dy.max() == 40.0 and dy.min() == -35.0
    svg = line_plot([Series("long", x, y)], "t", "x", "y")
    (polyline,) = ET.fromstring(svg).iter(f"{{{SVG_NS}}}polyline")
    assert len(polyline.attrib["points"].split()) <= 2000
    short_x, short_y = decimate(x[:10], y[:10])
    assert np.array_equal(short_x, x[:10]) and np.array_equal(short_y, y[:10])


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
        "forecast",
        "indicator",
        "value",
        "unit",
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
    assert page == render_html(rep)
    assert sorted(p.name for p in json_path.parent.iterdir()) == ["report.html", "report.json"]


def test_html_is_self_contained_well_formed_and_escaped() -> None:
    rep = sample_report()
    page = render_html(rep)
    root = ET.fromstring(page)  # XHTML-compatible markup: parses as XML
    assert root.tag == "html"
    # Self-contained: no URL of any scheme, no external resource, no script.
    assert "http" not in page.lower() and "//" not in page.replace("://", "")
    assert not re.search(r"\b(src|xlink:href)=", page)
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', page))
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "@media print" in page
    # Every joint appears; a signature and a trend plot for each of the 3 joints with a result
    # (J3 failed and has no history: a note stands in for both).
    text = "".join(root.itertext())
    for j in rep.joints:
        assert clean_text(j.joint) in text and j.controller in text
    assert "\ufffd[2J\ufffd" in text  # the escape and the lone surrogate were replaced
    assert page.count("<svg") == 6 and "No history yet" in page
    assert page.count('class="badge status s-alert"') >= 2  # summary row + section (+ header)
    assert page.count("NE 107 S: out of specification") == 2  # summary row + section
    assert "Theil-Sen trend" in page and "alert limit in 40.1 days" in page
    for label in ("fit RMSE", "evaluations / restarts", "fit time", "converged", "amplitude A"):
        assert label in page
    assert "Cycle failed: interlock: joint not in pose" in text


def test_summary_table_fits_one_screen() -> None:
    table = summary_table(sample_report())
    lines = table.splitlines()
    assert all(_columns(line) <= 100 for line in lines)
    assert lines[0].split()[:5] == ["JOINT", "BACKLASH", "STATUS", "NE", "REASON"]
    assert "robot1/J1" in lines[2] and "1.2 mrad" in lines[2]
    assert lines[2].split()[3:5] == ["WATCH", "M"]
    assert "alert in ~" in lines[2]
    assert "A 0.03 rad/s" in lines[3] and "OK" in lines[3]
    assert lines[4].split()[2:4] == ["UNKNOWN", "F"] and "interlock" in lines[4]
    assert "ALERT" in lines[5] and "\x1b" not in table
    assert lines[-1].startswith("worst: ALERT")


def _columns(line: str) -> int:
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1
        for c in line
    )


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.text(max_size=60), st.text(max_size=60)), min_size=1, max_size=5))
def test_summary_table_width_for_any_names(names: list[tuple[str, str]]) -> None:
    joints = [joint_report(c, j, result(backlash=1.5e-3), LIMITS) for c, j in names]
    table = summary_table(Report("2024-03-22T06:00:00Z", ["x"], joints))
    lines = table.splitlines()
    assert len(lines) == len(names) + 3
    assert all(_columns(line) <= 100 and line.isprintable() for line in lines)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.text(), st.lists(st.floats(-1e9, 1e9), min_size=0, max_size=50))
def test_any_label_and_data_give_valid_xml(label: str, ys: list[float]) -> None:
    svg = line_plot(
        [Series(label, list(range(len(ys))), ys)], label, label, label, hlines=[HLine(1.0, label)]
    )
    root = ET.fromstring(svg)
    assert label_text(label) in [t.text or "" for t in root.iter(f"{{{SVG_NS}}}text")]


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


# -- evidence plots, NE 107, message ids, machines -------------------------------------------


def torque_plot(title: str = "J6: measured vs predicted motor torque") -> EvidencePlot:
    t = np.linspace(0.0, 4.0, 400)
    predicted = 30 * np.sin(2 * np.pi * 0.5 * t)
    noise = np.random.default_rng(3).normal(0, 1.5, t.size)
    return EvidencePlot(
        title,
        "time [s]",
        "torque [N·m]",
        (
            EvidenceSeries("measured", t, predicted + noise),
            EvidenceSeries("predicted", t, predicted),
        ),
    )


def test_evidence_plots_are_rendered_and_exported_on_request() -> None:
    hostile_plot = EvidencePlot(
        HOSTILE,
        "x <b>",
        "y & z",
        (EvidenceSeries("<i>series</i>", np.arange(3.0), np.array([1.0, np.nan, 2.0])),),
    )
    jr = joint_report(
        "robot1",
        "J6",
        result(),
        LIMITS,
        points([0.8e-3, 0.8e-3, 0.8e-3]),
        evidence=(torque_plot(), hostile_plot),
        outcome="ok",
    )
    rep = Report("2024-03-22T06:00:00Z", ("robot1",), (jr,))
    page = render_html(rep)
    root = ET.fromstring(page)
    titles = [t.text for t in root.iter("title")]
    assert "J6: measured vs predicted motor torque" in titles
    assert clean_text(HOSTILE).replace("\n", " ") in titles  # as text, never markup
    assert "<b>" not in page and "<i>series</i>" not in page and "&lt;i&gt;series" in page
    legend = "".join(root.itertext())
    assert "measured" in legend and "predicted" in legend
    # signature + trend + 2 evidence plots
    assert page.count("<svg") == 4 and page.count("<h4>Evidence</h4>") == 1
    assert "evidence" not in report_to_dict(rep)["joints"][0]
    exported = report_to_dict(rep, evidence=True)["joints"][0]["evidence"]
    assert [p["title"] for p in exported] == [torque_plot().title, HOSTILE]
    assert len(exported[0]["series"][0]["x"]) == 400
    assert exported[1]["series"][0]["y"] == [1.0, None, 2.0]  # NaN -> null
    json.dumps(exported, allow_nan=False)
    empty = EvidencePlot("nothing measured", "t", "y", ())
    only = joint_report("robot1", "J7", None, LIMITS, evidence=(empty,), indicator="backlash_rad")
    assert "nothing measured: no data." in render_html(Report("t", ("robot1",), (only,)))


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


def test_machines_are_sections_with_a_page_break_between_them_in_print() -> None:
    page = render_html(sample_report())
    root = ET.fromstring(page)
    machines = [s for s in root.iter("section") if s.get("class") == "machine"]
    assert [m.find("h2").text for m in machines] == ["Machine robot1", "Machine cnc<&>"]
    joints_per_machine = [
        len([s for s in m.iter("section") if s.get("class") == "joint"]) for m in machines
    ]
    assert joints_per_machine == [3, 1]
    rep = sample_report()
    assert [j.joint for j in rep.joints_of("robot1")] == ["J1", "J2", "J3"]
    assert rep.to_dict() == report_to_dict(rep)
    assert rep.joints[0].to_dict()["joint"] == "J1"
    css = page[page.index("@media print") : page.index("</style>")]
    assert "section.machine + section.machine { break-before: page" in css
    assert "break-inside: avoid" in css and "background: #fff !important" in css
    assert "color: #000 !important" in css
    # Badges carry their meaning as text, not colour alone.
    assert ">WATCH</span>" in page and "NE 107 M: maintenance required" in page


def test_trend_plot_shows_limits_and_the_forecast_line() -> None:
    jr = sample_report().joints[0]  # WATCH, rising: the alert limit is ahead
    svg = trend_svg(jr.history, jr.trend, jr.indicator_name, jr.limits, passed="watch")
    root = ET.fromstring(svg.replace("<svg ", f'<svg xmlns="{SVG_NS}" ', 1))
    texts = [t.text or "" for t in root.iter(f"{{{SVG_NS}}}text")]
    assert "watch limit" in texts and "alert limit" in texts and "Theil-Sen trend" in texts
    assert any(t.startswith("forecast: alert limit in 40.1 days") for t in texts)
    dashed = [p for p in root.iter(f"{{{SVG_NS}}}polyline") if p.get("stroke-dasharray")]
    assert len(dashed) == 2  # trend line and its forecast continuation
    assert "reaches the alert limit 2 mrad in about 40.1 days" in jr.forecast


def test_legend_entries_never_overlap() -> None:
    labels = [
        "torque-prediction NMSE per cycle",
        "Theil-Sen trend",
        "forecast: alert limit in 52.5 days",
        "q",
        "a much longer label" * 3,
    ]
    for width in (320, 480, 720):
        series = [Series(label, [0.0, 1.0], [0.0, float(i)]) for i, label in enumerate(labels)]
        root = ET.fromstring(
            line_plot(series, "t", "x", "y", width=width, hlines=[HLine(1.0, "watch limit")])
        )
        texts = [t for t in root.iter(f"{{{SVG_NS}}}text") if t.text in {*labels, "watch limit"}]
        assert len(texts) == len(labels) + 1
        boxes = sorted(
            (
                float(t.get("y", 0)),
                float(t.get("x", 0)),
                float(t.get("x", 0)) + LEGEND_CHAR_PX * len(t.text or ""),
            )
            for t in texts
        )
        for (y1, _, end1), (y2, start2, _) in itertools.pairwise(boxes):
            assert y1 != y2 or end1 <= start2
    # Short labels keep the three tidy columns.
    assert legend_layout(["a", "b", "c", "d"], 64, 640) == [
        (64, 0),
        (64 + 640 / 3, 0),
        (64 + 2 * 640 / 3, 0),
        (64, 1),
    ]
