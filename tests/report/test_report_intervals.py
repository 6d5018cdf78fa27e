"""A backlash estimate is shown with its 95 % interval everywhere a person reads it: the report's
JSON, the terminal table, the HTML page (value, diagnostics, trend bars), and a report made
from the history alone; an ambiguous fit says so."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from agent.estimation.backlash.result import BacklashResult
from agent.history.records import estimates_for
from agent.history.store import HistoryStore
from agent.report.history import report_from_history
from agent.report.html.page import render_html
from agent.report.model import Report, joint_report, report_to_dict
from agent.report.table import summary_table
from tests.support.report.samples import LIMITS, T0, points, result


def with_intervals(res: BacklashResult, ambiguous: bool = False) -> BacklashResult:
    band = {
        "low_rad": 1.04e-3,
        "high_rad": 1.65e-3,
        "model_half_width_rad": 2.6e-4,
        "noise_half_width_rad": 4e-7,
        "calibration_rmse_rad": 8e-6,
        "confidence": 0.95,
    }
    return replace(
        res,
        amplitude_sd_rad_s=0.002,
        amplitude_low_rad_s=res.amplitude_rad_s - 0.004,
        amplitude_high_rad_s=res.amplitude_rad_s + 0.004,
        backlash_low_rad=1.04e-3,
        backlash_high_rad=1.65e-3,
        ambiguous=ambiguous,
        uncertainty={
            "amplitude": {"sd_rad_s": 0.002, "sd_white_rad_s": 0.0015, "noise_rms_rad_s": 0.003},
            "backlash": band,
        },
    )


def test_the_value_comes_with_its_interval_in_json_table_and_page() -> None:
    res = with_intervals(result(backlash=1.2e-3), ambiguous=True)
    pts = [*points([0.8e-3, 0.9e-3, 1.05e-3])]
    last = replace(points([0, 0, 0, 1.2e-3])[-1], low=1.04e-3, high=1.65e-3, ambiguous=True)
    jr = joint_report("robot1", "J1", res, LIMITS, [*pts, last])
    rep = Report("2024-03-22T06:00:00Z", ("robot1",), (jr,))
    d = report_to_dict(rep)["joints"][0]
    assert d["interval"] == {"low": 1.04e-3, "high": 1.65e-3, "confidence": 0.95}
    assert d["ambiguous"] is True
    assert d["result"]["backlash_interval_rad"] == [1.04e-3, 1.65e-3]
    assert d["history"][-1] == {
        "time": last.time_iso, "value": 1.2e-3, "low": 1.04e-3, "high": 1.65e-3, "ambiguous": True,
    }  # fmt: skip
    assert set(d["history"][0]) == {"time", "value"}  # a point without an interval
    json.dumps(d, allow_nan=False)
    row = summary_table(rep).splitlines()[2]
    assert "1.2 mrad (1.04-1.65)" in row and "ambiguous" in row
    page = render_html(rep)
    assert "1.2 mrad (95 %: 1.04-1.65)" in page
    assert "95 % interval 1.04-1.65" in page  # the diagnostics
    assert "model mismatch within the joint model" in page and "0.26 mrad" in page
    assert "bars: 95 % interval" in page
    # One bar for the one point with an interval: a vertical line at a marker's x.
    markers = set(re.findall(r'<circle cx="([\d.]+)"', page))
    bars = re.findall(r'<line x1="([\d.]+)" y1="[\d.]+" x2="\1" y2="[\d.]+" stroke="#1f5fa8"', page)
    assert len(bars) == 1 and bars[0] in markers


def test_a_report_from_the_history_shows_the_last_interval(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    with HistoryStore(db) as store:
        for day, res in enumerate(
            [result(backlash=0.9e-3), with_intervals(result(backlash=1.2e-3))]
        ):
            store.record_cycle(
                controller="robot1", joint="J1", kind="backlash",
                started_at=T0 + timedelta(days=day), finished_at=T0 + timedelta(days=day),
                estimates=estimates_for(res), status="watch",
            )  # fmt: skip
        report = report_from_history(store, "robot1", {"J1": LIMITS})
    (j,) = report.joints
    assert j.value == 1.2e-3 and j.interval == (1.04e-3, 1.65e-3) and not j.ambiguous
    assert [p.interval for p in j.history] == [None, (1.04e-3, 1.65e-3)]
    assert "1.2 mrad (1.04-1.65)" in summary_table(report)


def test_the_mqtt_health_payload_carries_the_interval() -> None:
    from agent.publish.mqtt.payloads import report_messages

    jr = joint_report("robot1", "J1", with_intervals(result(backlash=1.2e-3)), LIMITS)
    msgs = report_messages(Report("2024-03-22T06:00:00Z", ("robot1",), (jr,)), "jha", "q")
    judged = json.loads(msgs[1].payload)["indicators"][0]
    assert judged["interval"] == {"low": 1.04e-3, "high": 1.65e-3, "confidence": 0.95}
    assert judged["ambiguous"] is False
