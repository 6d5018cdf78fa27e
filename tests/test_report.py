"""SVG plots, the JSON + HTML report, the terminal table, and the store -> report round trip."""

from __future__ import annotations

import json
import math
import re
import unicodedata
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import ThresholdSettings
from agent.estimation.results import BacklashResult
from agent.health import Status
from agent.report import (
    REPORT_SCHEMA,
    JointReport,
    Report,
    joint_report,
    render_html,
    report_dir,
    report_to_dict,
    summary_table,
    write_report,
)
from agent.store import HistoryStore, TrendPoint, estimates_for
from agent.svg import (
    SVG_NS,
    HLine,
    Series,
    clean_text,
    decimate,
    label_text,
    line_plot,
    nice_ticks,
)

T0 = datetime(2024, 3, 1, 6, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script>&amp;\x1b[2J\ud800'
LIMITS = ThresholdSettings(backlash_watch_rad=1e-3, backlash_alert_rad=2e-3,
                           amplitude_watch_rad_s=0.1, amplitude_alert_rad_s=0.2)


def result(amplitude: float = 0.05, backlash: float | None = 8e-4, n: int = 1500,
           seed: int = 0) -> BacklashResult:
    """A hand-built fit: a damped sine as the signature, plus seeded noise as the residual."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 3.0, n)
    fitted = amplitude * np.exp(-8 * (t % 0.5)) * np.sin(2 * np.pi * 35 * t)
    return BacklashResult(
        amplitude_rad_s=amplitude, backlash_rad=backlash, rmse_rad_s=0.004,
        residual_rms_rad_s=0.02, params={"A_rad_s": amplitude, "tau_per_s": 8.0,
                                         "omega_rad_s": 2 * np.pi * 35},
        evaluations=2400, restarts=2, converged=True, stop_reason="tolfun", fit_seconds=3.4,
        seed=seed, period_metadata_s=1.0, period_estimated_s=1.002,
        period_mismatch=float("nan"), warnings=("period from metadata",),
        time_s=t, residual_rad_s=fitted + rng.normal(0, 0.004, n), fitted_rad_s=fitted,
    )


def points(values: list[float]) -> list[TrendPoint]:
    return [TrendPoint((T0 + timedelta(days=7 * i)).isoformat(), v) for i, v in enumerate(values)]


def sample_report() -> Report:
    joints = (
        joint_report("robot1", "J1", result(backlash=1.2e-3), LIMITS,
                     points([0.8e-3, 0.9e-3, 1.05e-3, 1.2e-3]), capture_path="/var/c/j1.npz"),
        joint_report("robot1", "J2", result(amplitude=0.03, backlash=None), LIMITS,
                     points([0.02, 0.03])),
        joint_report("robot1", "J3", None, LIMITS, error="interlock: joint not in pose",
                     indicator="backlash_rad"),
        joint_report("cnc<&>", HOSTILE, result(backlash=2.5e-3, seed=1), LIMITS,
                     points([2.5e-3])),
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
        [Series("residual", x, np.sin(6 * x)), Series("fit <A&B>", x, np.cos(6 * x), dashed=True,
                                                      markers=True)],
        title='Signature "J1" <test>', x_label="time [s]", y_label="speed [rad/s]",
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
    svg = line_plot([Series("empty", [], []), Series("flat", [1, 2, 3], [5, 5, 5]),
                     Series("holes", [0, 1, 2], [1, float("nan"), float("inf")])],
                    "t", "x", "y", hlines=[HLine(float("nan"), "no limit")])
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
    assert set(d) == {"schema", "created_at", "agent_version", "host", "machines", "summary",
                      "joints"}
    assert d["summary"] == {"worst_status": "alert",
                            "counts": {"ok": 1, "watch": 1, "alert": 1, "unknown": 1}}
    j1 = d["joints"][0]
    assert set(j1) == {"controller", "joint", "status", "reason", "indicator", "value", "unit",
                       "limits", "error", "capture_path", "result", "trend", "history"}
    assert (j1["status"], j1["unit"], j1["limits"]) == ("watch", "rad",
                                                        {"watch": 1e-3, "alert": 2e-3})
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
    assert page.count('class="status s-alert"') >= 2  # summary row + section (+ header)
    assert "Theil-Sen trend" in page and "alert limit in 40.1 days" in page
    for label in ("fit RMSE", "evaluations / restarts", "fit time", "converged", "amplitude A"):
        assert label in page
    assert "Cycle failed: interlock: joint not in pose" in text


def test_summary_table_fits_one_screen() -> None:
    table = summary_table(sample_report())
    lines = table.splitlines()
    assert all(_columns(line) <= 100 for line in lines)
    assert lines[0].split()[:4] == ["JOINT", "BACKLASH", "STATUS", "REASON"]
    assert "robot1/J1" in lines[2] and "1.2 mrad" in lines[2] and "WATCH" in lines[2]
    assert "alert in ~" in lines[2]
    assert "A 0.03 rad/s" in lines[3] and "OK" in lines[3]
    assert "UNKNOWN" in lines[4] and "interlock" in lines[4]
    assert "ALERT" in lines[5] and "\x1b" not in table
    assert lines[-1].startswith("worst: ALERT")


def _columns(line: str) -> int:
    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in line)


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
    svg = line_plot([Series(label, list(range(len(ys))), ys)], label, label, label,
                    hlines=[HLine(1.0, label)])
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
            store.record_cycle(controller="robot1", joint="J1", kind="backlash",
                               started_at=started, finished_at=started + timedelta(minutes=1),
                               estimates=estimates_for(res), status=jr.status,
                               status_reason=jr.verdict_reason)
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
