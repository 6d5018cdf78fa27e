"""The HTML report in a real browser: headless Chromium driven over the DevTools protocol.

One page with two machines and ten joints (every status, an analysis error, a refused cycle, a
dry run, evidence plots, an indicator-only joint, a hostile joint name). Chromium loads it from
a file; the test collects every console message, uncaught exception and log entry (a failed
resource load is one), takes a screenshot (kept in var/screenshots/run-report.png) and decodes
the PNG itself (zlib + the PNG row filters), reads the rendered DOM, and prints to PDF with
print media.

The protocol runs over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated JSON), so no
port is opened and nothing but the standard library is needed.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from agent.config.model import ThresholdSettings
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import Ne107, Status, TrendPoint
from agent.health.trend import trend
from agent.report.action import by_severity
from agent.report.evidence import EvidencePlot, EvidenceSeries
from agent.report.html.page import render_html
from agent.report.model import IndicatorSummary, JointReport, Report, joint_report
from agent.report.svg import clean_text
from tests.support.report.chromium import Browser, chromium, decode_png, save_screenshot

T0 = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
LIMITS = ThresholdSettings(
    backlash_watch_rad=1e-3,
    backlash_alert_rad=2e-3,
    amplitude_watch_rad_s=0.1,
    amplitude_alert_rad_s=0.2,
)
HOSTILE = '<script>alert("x")</script> & </section>'


# -- the report --------------------------------------------------------------------------------


def result(amplitude: float, backlash: float | None, seed: int) -> BacklashResult:
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 2.0, 800)
    fitted = amplitude * np.exp(-8 * (t % 0.5)) * np.sin(2 * np.pi * 30 * t)
    return BacklashResult(
        amplitude_rad_s=amplitude,
        backlash_rad=backlash,
        rmse_rad_s=0.003,
        residual_rms_rad_s=0.02,
        params={"A_rad_s": amplitude, "Tf_s": 0.5},
        evaluations=1800,
        restarts=1,
        converged=True,
        stop_reason="tolfun",
        fit_seconds=2.1,
        seed=seed,
        period_metadata_s=0.5,
        period_estimated_s=0.501,
        period_mismatch=0.002,
        time_s=t,
        residual_rad_s=fitted + rng.normal(0, 0.003, t.size),
        fitted_rad_s=fitted,
    )


def points(values: list[float], start_day: int = 0) -> list[TrendPoint]:
    return [
        TrendPoint((T0 + timedelta(days=start_day + 5 * i)).isoformat(), v)
        for i, v in enumerate(values)
    ]


def torque_evidence(joint: str, seed: int) -> EvidencePlot:
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 10.0, 1000)
    predicted = 40 * np.sin(2 * np.pi * 0.3 * t) + 12 * np.sign(np.cos(2 * np.pi * 0.3 * t))
    return EvidencePlot(
        title=f"{joint}: measured vs predicted motor torque",
        x_label="time [s]",
        y_label="torque [N·m]",
        series=(
            EvidenceSeries("measured", t, predicted + rng.normal(0, 2.0, t.size)),
            EvidenceSeries("predicted (identified model)", t, predicted),
        ),
    )


def indicator(name: str, unit: str, values: list[float]) -> IndicatorSummary:
    pts = points(values)
    return IndicatorSummary(name, unit, pts, trend(pts, indicator=name))


def ten_joints() -> Report:
    backlash = [0.6e-3, 0.7e-3, 0.75e-3, 0.85e-3]
    joints = [
        joint_report(
            "robot-1",
            "axis_1",
            result(0.05, 0.5e-3, 1),
            LIMITS,
            points([0.45e-3, 0.48e-3, 0.47e-3, 0.5e-3]),
            "/var/c/a1.npz",
            outcome="ok",
        ),
        joint_report(
            "robot-1",
            "axis_2",
            result(0.06, 1.2e-3, 2),
            LIMITS,
            points([*backlash, 1.2e-3]),
            "/var/c/a2.npz",
            outcome="ok",
        ),
        joint_report(
            "robot-1",
            "axis_3",
            result(0.09, 2.4e-3, 3),
            LIMITS,
            points([1.5e-3, 1.9e-3, 2.1e-3, 2.4e-3]),
            outcome="ok",
        ),
        joint_report(
            "robot-1",
            "axis_4",
            None,
            LIMITS,
            points(backlash),
            error="analysis failed: ValueError: capture holds NaN",
            outcome="error",
            indicator="backlash_rad",
        ),
        joint_report(
            "robot-1",
            "axis_5",
            None,
            LIMITS,
            error="interlock: speed override 80 %",
            outcome="rejected",
            indicator="backlash_rad",
        ),
        joint_report(
            "robot-1",
            "axis_6",
            result(0.04, 0.3e-3, 6),
            LIMITS,
            points([0.3e-3] * 3),
            outcome="ok",
            indicators=(
                indicator("coulomb_friction_nm", "N·m", [11.0, 11.5, 12.4, 13.0]),
                indicator("stiffness_nm_rad", "N·m/rad", [3.4e6, 3.3e6, 3.3e6, 3.1e6]),
                indicator("torque_nmse_nm", "N·m", [0.02, 0.025, 0.03, 0.04]),
            ),
            evidence=(torque_evidence("axis_6", 6), torque_evidence("axis_6 (validation)", 7)),
        ),
        joint_report(
            "cnc-2", "X", result(0.12, None, 8), LIMITS, points([0.08, 0.1, 0.12]), outcome="ok"
        ),
        # `jha run --dry-run`: interlocks checked, nothing moved (agent.service.jobs)
        joint_report(
            "cnc-2",
            "Y",
            None,
            LIMITS,
            error="dry run: interlocks hold, no motion",
            outcome="dry_run",
            indicator="backlash_rad",
        ),
        joint_report(
            "cnc-2",
            HOSTILE,
            result(0.03, None, 9),
            LIMITS,
            points([0.03]),
            outcome="ok",
            running=True,
        ),
    ]
    # An indicator-only joint as cli_report builds it: no backlash history, no verdict.
    others = [
        JointReport(
            controller="robot-1",
            joint="axis_7",
            status=Status.UNKNOWN,
            verdict_reason="",
            result=None,
            error=None,
            thresholds=LIMITS,
            trend=None,
            history=(),
            capture_path=None,
            indicators=(indicator("stiffness_nm_rad", "N·m/rad", [2.0e6, 1.9e6]),),
        )
    ]
    return Report(
        T0.isoformat(),
        ("robot-1", "cnc-2"),
        tuple(joints),
        host="edge-7",
        indicator_joints=tuple(others),
    )


# -- the page in Chromium ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as b:
        yield b


@dataclass(frozen=True)
class Rendered:
    png: bytes
    pdf: bytes
    dom: dict[str, Any]
    print_styles: dict[str, Any]
    problems: list[str]


@pytest.fixture(scope="module")
def rendered(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    page = tmp_path_factory.mktemp("report") / "report.html"
    page.write_text(render_html(ten_joints()), encoding="utf-8")
    b = browser
    target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
        b.call(domain, session=sid)
    b.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 4000, "deviceScaleFactor": 1, "mobile": False},
        session=sid,
    )
    b.call("Page.navigate", {"url": page.as_uri()}, session=sid)
    b.wait_for(lambda m: m.get("method") == "Page.loadEventFired")
    png = base64.b64decode(
        b.call("Page.captureScreenshot", {"format": "png", "optimizeForSpeed": True}, session=sid)[
            "data"
        ]
    )
    dom = _evaluate(
        b,
        sid,
        """({
        text: document.body.innerText,
        joints: [...document.querySelectorAll('section.joint h3')].map(h => h.textContent),
        summaryJoints: [...document.querySelectorAll('table.summary tbody tr td:nth-child(2)')]
                       .map(td => td.textContent),
        summaryHeads: [...document.querySelectorAll('table.summary thead th')]
                      .map(th => th.textContent),
        summaryRows: [...document.querySelectorAll('table.summary tbody tr')]
                     .map(tr => [...tr.cells].map(td => td.textContent)),
        meta: document.querySelector('p.meta').textContent,
        openDetails: document.querySelectorAll('details[open]').length,
        foldedTables: [...document.querySelectorAll('details.diag')]
                      .map(d => d.querySelector('table') !== null).length,
        machines: [...document.querySelectorAll('section.machine h2')].map(h => h.textContent),
        scripts: document.scripts.length,
        plots: document.querySelectorAll('svg.plot').length,
        brokenAnchors: [...document.querySelectorAll('a[href^="#"]')]
                       .filter(a => !document.getElementById(a.getAttribute('href').slice(1)))
                       .length,
        widest: Math.max(...[...document.querySelectorAll('svg.plot')]
                         .map(s => s.getBoundingClientRect().right)),
        viewport: document.documentElement.clientWidth,
    })""",
    )
    b.call("Emulation.setEmulatedMedia", {"media": "print"}, session=sid)
    print_styles = _evaluate(
        b,
        sid,
        """(() => {
        const badge = getComputedStyle(document.querySelector('.badge.s-alert'));
        const ne = getComputedStyle(document.querySelector('.badge.ne-F'));
        const machines = [...document.querySelectorAll('section.machine')];
        return {
            badge: [badge.color, badge.backgroundColor, badge.borderTopStyle],
            ne107: [ne.color, ne.backgroundColor],
            breaks: machines.map(m => getComputedStyle(m).breakBefore),
            figures: [...new Set([...document.querySelectorAll('figure')]
                                 .map(f => getComputedStyle(f).breakInside))],
        };
    })()""",
    )
    pdf = base64.b64decode(
        b.call("Page.printToPDF", {"preferCSSPageSize": True}, session=sid)["data"]
    )
    b.call("Target.closeTarget", {"targetId": target})
    problems = [
        json.dumps(e["params"])[:300]
        for e in b.events
        if e.get("method") in ("Runtime.exceptionThrown", "Runtime.consoleAPICalled")
        or (
            e.get("method") == "Log.entryAdded"
            and e["params"]["entry"]["level"] in ("error", "warning")
        )
    ]
    return Rendered(png, pdf, dom, print_styles, problems)


def _evaluate(b: Browser, sid: str, expression: str) -> dict[str, Any]:
    answer = b.call(
        "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=sid
    )
    assert "exceptionDetails" not in answer, answer
    value: dict[str, Any] = answer["result"]["value"]
    return value


# -- the checks --------------------------------------------------------------------------------


def test_no_console_errors_exceptions_or_failed_loads(rendered: Rendered) -> None:
    assert rendered.problems == []
    assert rendered.dom["scripts"] == 0 and rendered.dom["brokenAnchors"] == 0


def test_screenshot_decodes_and_is_not_blank(rendered: Rendered) -> None:
    save_screenshot("run-report", rendered.png)
    img = decode_png(rendered.png)
    assert img.shape[:2] == (4000, 1280)
    rgb = img[..., :3].astype(np.float64)
    assert rgb.std() > 20.0  # a blank page has none
    not_white = (rgb < 235).any(axis=2)
    assert 0.02 < not_white.mean() < 0.6
    # Badges and plot lines are in colour: some pixels are far from grey.
    saturated = (rgb.max(axis=2) - rgb.min(axis=2)) > 80
    assert saturated.sum() > 2000
    # Content reaches down the page (the first 4000 px are not one short table).
    rows_with_ink = np.flatnonzero(not_white.any(axis=1))
    assert rows_with_ink[-1] > 3000


def test_every_joint_is_shown_once_with_its_plots(rendered: Rendered) -> None:
    report = ten_joints()
    page = render_html(report)
    # an indicator-only joint without an identification verdict says why it has none, once
    bare = [j for j in report.indicator_joints if j.identification is None]
    assert page.count("Indicators only: no test cycle of its own") == len(bare) > 0
    assert "No backlash cycle recorded" not in page
    everyone = (*report.joints, *report.indicator_joints)
    assert len(everyone) >= 8
    dom = rendered.dom
    # per machine, the joint to act on first comes first (agent.report.action)
    by_machine = [j for m in report.machines for j in by_severity(everyone) if j.controller == m]
    assert len(dom["joints"]) == len(by_machine) == len(everyone)
    for j, heading in zip(by_machine, dom["joints"], strict=True):
        assert heading.startswith(clean_text(j.joint))  # the text itself, not markup
        assert clean_text(j.joint) in dom["text"]
    assert dom["summaryJoints"] == [clean_text(j.joint) for j in by_severity(everyone)]
    assert dom["machines"] == ["Machine robot-1", "Machine cnc-2"]
    assert HOSTILE in dom["text"]  # shown as text: it did not become markup
    # Signatures (6 results), judged trends (7 with history), other-indicator trends (3 + 1),
    # evidence (2).
    assert dom["plots"] == 6 + 7 + 4 + 2
    assert dom["widest"] <= dom["viewport"]  # no plot runs off the page
    text = dom["text"]
    for phrase in (
        "NE 107 F: failure",
        "NE 107 C: check function",
        "NE 107 S: out of specification",
        "NE 107 M: maintenance required",
        "NE 107 N: normal",
        "measured vs predicted motor torque",
        "Cycle failed: analysis failed",
        "At this rate it reaches the alert limit",
    ):
        assert phrase in text, phrase
    failed = next(j for j in report.joints if j.joint == "axis_4")
    refused = next(j for j in report.joints if j.joint == "axis_5")
    assert (failed.ne107, refused.ne107) == (Ne107.FAILURE, Ne107.CHECK_FUNCTION)


def test_print_media_black_on_white_badges_and_page_per_machine(rendered: Rendered) -> None:
    styles = rendered.print_styles
    assert styles["badge"] == ["rgb(0, 0, 0)", "rgb(255, 255, 255)", "solid"]
    assert styles["ne107"] == ["rgb(0, 0, 0)", "rgb(255, 255, 255)"]
    assert styles["breaks"] == ["auto", "page"]
    assert styles["figures"] == ["avoid"]
    pdf = rendered.pdf
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")
    pages = [int(n) for n in re.findall(rb"/Count (\d+)", pdf)]
    assert pages and max(pages) >= 3  # ten joints over two machines: several pages


def test_the_planner_reads_action_severity_host_and_dry_run(rendered: Rendered) -> None:
    """Issue 16 points 6, 8 and 9 as the browser shows them."""
    dom = rendered.dom
    assert dom["summaryHeads"] == [
        "machine", "joint", "value", "status", "NE 107", "action", "reason"
    ]  # fmt: skip
    rows = {r[1]: r for r in dom["summaryRows"]}
    assert rows["axis_3"][5] == "service now: past the alert limit"
    assert rows["axis_2"][5].startswith("plan service")
    # the dry run has DRY RUN in the status column, and its reason is no failure
    assert rows["Y"][3] == "DRY RUN"
    assert "failed" not in rows["Y"][6] and "dry run" in rows["Y"][6]
    # sorted by severity: out of specification first, then failure, maintenance, check, normal
    # (a dry run measured nothing and asks for nothing: it goes with the normal ones)
    rank = {"S": 4, "F": 3, "M": 2, "C": 1, "N": 0}
    shown = [
        rank[r[4][7]]
        for r in dom["summaryRows"]
        if r[4].startswith("NE 107 ") and r[3] != "DRY RUN"
    ]
    assert shown == sorted(shown, reverse=True) and shown[0] == 4 and shown[-1] == 0
    assert "on edge-7 by jha" in dom["meta"] and "unknown host" not in dom["meta"]
    # raw fit values folded away
    assert dom["openDetails"] == 0 and dom["foldedTables"] >= 6
