"""`jha identify --html` in headless Chromium: the identification page of issue 16 point 8,
checked in the rendered DOM, and a screenshot kept in var/screenshots/identification.png.

Two identifications of planar2 are recorded (`--record`, baseline_identifications 1): a healthy
one, the joint's baseline, then one with joint_1's friction 1.4 times (past the +30 % watch limit
of both friction indicators); joint_2 is a thousand times stiffer in both (its gear twist too
small to see well, so the fit warns). The page is the second's, judged against the history as
agent.report.identification says (never against the robot file's design values).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.health.identification.baseline import IDENTIFICATION_INDICATORS
from tests.support.paths import ROBOTS
from tests.support.report.chromium import (
    Browser,
    Look,
    assert_not_blank,
    chromium,
    look_at,
    save_screenshot,
)

ROBOT = ROBOTS / "planar2.yaml"
HEIGHT = 6000
MEASURED, PREDICTED = (0x9C, 0xC3, 0xE6), (0xB3, 0x47, 0x00)  # agent.report.html.plots
FIELD_NAMES = (*IDENTIFICATION_INDICATORS, "rotor_inertia_kg_m2")

DOM = """({
    meta: document.querySelector('p.meta').textContent,
    heads: [...document.querySelectorAll('table.summary thead th')].map(th => th.textContent),
    rows: [...document.querySelectorAll('table.summary tbody tr')]
          .map(tr => [...tr.cells].map(td => td.textContent)),
    reasons: [...document.querySelectorAll('.reason, ul.reasons li')].map(e => e.textContent),
    cells: [...document.querySelectorAll(
               'table.identification tbody tr, table.indicators tbody tr')]
           .map(tr => tr.innerText),
    warnings: [...document.querySelectorAll('ul.warnings li')].map(li => li.textContent),
    basis: document.querySelector('p.basis') && document.querySelector('p.basis').textContent,
    torque: [...document.querySelectorAll('figure svg.plot')]
        .filter(s => s.querySelector('title').textContent.includes('measured vs predicted'))
        .map(s => ({
            title: s.querySelector('title').textContent,
            lines: [...s.querySelectorAll('polyline')].map(p => ({
                stroke: p.getAttribute('stroke'),
                dashed: p.hasAttribute('stroke-dasharray'),
                points: p.getAttribute('points').split(' ').length,
            })),
            legend: [...s.querySelectorAll('text')].map(t => t.textContent),
            box: (r => [r.top, r.bottom, r.left, r.right])(s.getBoundingClientRect()),
        })),
    foot: document.querySelector('body > p.note:last-of-type').textContent,
})"""


def _jha(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as b:
        yield b


@pytest.fixture(scope="module")
def identified(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The page of the worn identification, and the warnings `jha identify` printed for it."""
    root = tmp_path_factory.mktemp("identify")
    config = root / "agent.yaml"
    config.write_text(
        f"agent: {{state_dir: {root / 'state'}}}\n"
        "controllers:\n"
        "  - name: cell1\n"
        "    driver: sim\n"
        f"    robot: {ROBOT}\n"
        "    identification:\n"
        f"      robot: {ROBOT}\n"
        "      every_s: null\n"
        # The NMSE rises x9 with this wear (the simulator's friction shape the model lacks
        # grows with it): past 4x, an alert; this page's test is about friction and words.
        "      limits: {baseline_identifications: 1, nmse_ratio_watch: 20, nmse_ratio_alert: 40}\n"
        "    joints:\n"
        "      - {name: joint_1, index: 1, gear_ratio: 100, backlash_cycle: {motor_speed_rps: 9}}\n"
        "      - {name: joint_2, index: 2, gear_ratio: 100, backlash_cycle: {motor_speed_rps: 9}}\n"
    )
    record = ("--record", "--config", str(config), "--controller", "cell1")
    page = root / "out" / "identification.html"
    page.parent.mkdir()
    for name, friction in (("healthy", "joint_1=1.0"), ("worn", "joint_1=1.4")):
        capture = root / f"{name}.npz"
        made = _jha(
            "simulate", "identification", "--robot", str(ROBOT), "-o", str(capture),
            "--friction-scale", friction, "--stiffness-scale", "joint_2=1000",
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        html = ("--html", str(page)) if name == "worn" else ()
        done = _jha("identify", str(capture), "--robot", str(ROBOT), *html, *record)
        assert done.returncode == 0, done.stderr
    assert f"report: {page}" in done.stderr
    printed = [
        line.removeprefix("warning").strip()
        for line in done.stdout.splitlines()
        if line.startswith("warning ")
    ]
    return page, printed


@pytest.fixture(scope="module")
def look(browser: Browser, identified: tuple[Path, list[str]]) -> Look:
    return look_at(browser, identified[0], DOM, height=HEIGHT)


def test_the_page_loads_clean_and_its_screenshot_is_kept(look: Look) -> None:
    assert look.problems == []
    assert save_screenshot("identification", look.png).stat().st_size == len(look.png)
    assert_not_blank(look.png, (HEIGHT, 1280))


def test_every_joint_has_a_status_and_ne107(look: Look) -> None:
    dom: dict[str, Any] = look.dom
    assert dom["heads"] == ["machine", "joint", "value", "status", "NE 107", "action", "reason"]
    rows = {r[1]: r for r in dom["rows"]}
    assert set(rows) == {"joint_1", "joint_2"}
    # friction 1.4 times its baseline: past the +30 % watch limit; the stiff joint's friction
    # is identified too poorly (relative sd 60-70 %) to judge a +30 % step: "cannot judge"
    assert rows["joint_1"][3] == "WATCH" and rows["joint_1"][4].startswith("NE 107 M")
    assert rows["joint_2"][3] == "UNKNOWN" and rows["joint_2"][4].startswith("NE 107 C")
    assert "cannot judge" in rows["joint_2"][6] and "richer excitation" in rows["joint_2"][6]
    assert rows["joint_1"][5].startswith("plan service")
    assert "-" not in (rows["joint_1"][2], rows["joint_1"][3], rows["joint_1"][4])
    assert "Worst identification status: WATCH" in dom["meta"]
    assert "UNKNOWN" not in dom["meta"]
    assert dom["basis"] and "baseline in the history" in dom["basis"]


def test_reasons_are_words_not_field_names(look: Look) -> None:
    reasons = look.dom["reasons"]
    said = " ".join(reasons)
    assert re.search(r"Coulomb friction rose (3[5-9]|4\d) % \([\d.]+ -> 2\.\d+ N·m\)", said), said
    assert re.search(r"viscous friction rose \d\d % \([\d.]+ -> 2\.\d+ N·m·s/rad\)", said), said
    assert "past the watch limit +30 %" in said
    for text in [*reasons, *look.dom["cells"], *(r[6] for r in look.dom["rows"])]:
        assert not any(name in text for name in FIELD_NAMES), text


def test_the_page_shows_the_warnings_the_command_printed(
    look: Look, identified: tuple[Path, list[str]]
) -> None:
    printed = identified[1]
    assert printed, "this capture makes the fit warn (a stiffness the twist barely shows)"
    assert look.dom["warnings"] == printed


def test_measured_and_predicted_torque_are_both_drawn_and_told_apart(look: Look) -> None:
    plots = look.dom["torque"]
    assert [p["title"] for p in plots] == [
        "joint_1: measured vs predicted motor torque",
        "joint_2: measured vs predicted motor torque",
    ]
    for p in plots:
        measured, predicted = p["lines"]
        assert measured["points"] > 100 and predicted["points"] > 100
        assert measured["stroke"] != predicted["stroke"]
        assert predicted["dashed"] and not measured["dashed"]
        assert "measured" in p["legend"] and "predicted" in p["legend"]
    # and on the screen both colours show inside the first plot (the prediction does not hide
    # the measurement it lies on)
    rgb = assert_not_blank(look.png, (HEIGHT, 1280))
    top, bottom, left, right = (int(v) for v in plots[0]["box"])
    assert bottom <= HEIGHT, "the first torque plot is inside the screenshot"
    area = rgb[top:bottom, left:right]
    for colour in (MEASURED, PREDICTED):
        near = (np.abs(area - np.array(colour, dtype=np.float64)).max(axis=2) < 40).sum()
        assert near > 300, (colour, near)


def test_the_footer_claims_no_report_json_and_none_is_written(
    look: Look, identified: tuple[Path, list[str]]
) -> None:
    assert "report.json" not in look.dom["foot"]
    assert sorted(p.name for p in identified[0].parent.iterdir()) == ["identification.html"]
