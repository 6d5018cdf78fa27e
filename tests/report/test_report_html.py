"""The report as people read it: the self-contained HTML page (escaping, evidence plots, a
section per machine, the trend plot with its limits and forecast) and the terminal table."""

from __future__ import annotations

import json
import re
import unicodedata
import xml.etree.ElementTree as ET

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.report.evidence import EvidencePlot, EvidenceSeries
from agent.report.html.page import render_html
from agent.report.html.plots import trend_svg
from agent.report.model import Report, joint_report, report_to_dict
from agent.report.svg import SVG_NS, clean_text
from agent.report.table import summary_table
from tests.support.report.samples import HOSTILE, LIMITS, points, result, sample_report


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
    # most severe first: alert (S), a failed cycle (F), watch (M), then the rest
    assert lines[2].split()[-6:-4] == ["ALERT", "S"] and "\x1b" not in table
    assert lines[3].split()[2:4] == ["UNKNOWN", "F"] and "interlock" in lines[3]
    assert "robot1/J1" in lines[4] and "1.2 mrad" in lines[4]
    assert lines[4].split()[3:5] == ["WATCH", "M"]
    assert "alert in ~" in lines[4]
    assert "A 0.03 rad/s" in lines[5] and "OK" in lines[5]
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


# -- evidence plots, machines, trend plot ----------------------------------------------------


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


def test_trend_axes_fit_the_history() -> None:
    """Minutes of history are plotted in hours (in days they piled up at x = 0); a forecast
    line drawn shorter than the forecast says so in its label."""
    from datetime import UTC, datetime, timedelta

    from agent.health.status import TrendPoint
    from agent.health.trend import trend

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    short = [
        TrendPoint((t0 + timedelta(minutes=2 * k)).isoformat(), 5e-4 + 1e-6 * k) for k in range(5)
    ]
    svg = trend_svg(short, trend(short, 8e-4, 1e-3, "backlash_rad"), "backlash_rad", (8e-4, 1e-3))
    assert "hours since" in svg and "days since" not in svg
    assert "forecast:" not in svg  # too little history: no forecast line either
    weeks = [
        TrendPoint((t0 + timedelta(days=2 * k)).isoformat(), 5e-4 + 1e-6 * k) for k in range(6)
    ]
    tr = trend(weeks, 8e-4, 1e-3, "backlash_rad")
    assert tr is not None and tr.forecast_watch is not None and tr.forecast_watch.days > 10
    svg = trend_svg(weeks, tr, "backlash_rad", (8e-4, 1e-3))
    assert "days since" in svg
    assert f"watch limit in {tr.forecast_watch.days:.3g} days (drawn for the next 10 days)" in svg


def test_only_a_page_with_report_json_beside_it_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`jha report --html F` and `jha identify --html F` write no report.json: no claim."""
    from agent.report.write import write_report

    report = sample_report()
    assert "report.json beside" not in render_html(report)
    _, html_path = write_report(report, tmp_path / "r")
    assert "report.json beside this file" in html_path.read_text()
    assert (tmp_path / "r" / "report.json").exists()


def test_the_raw_fit_values_are_folded_under_details() -> None:
    page = render_html(sample_report())
    folded = re.findall(
        r'<details class="diag"><summary>Fit details \((\d+) values\)</summary>', page
    )
    assert folded and max(int(n) for n in folded) >= 10  # a fitted joint: ~15 raw values
    assert '<details class="diag" open' not in page  # collapsed until someone opens it
    # the planner's lines are outside it: verdict and action in the summary table
    summary = page[page.index('<table class="summary">') : page.index("</table>")]
    assert "plan service" in summary or "service now" in summary
