"""`jha report --html` (the report from the history alone) in headless Chromium: the points of
issue 16 a maintenance planner reads, checked in the rendered DOM, and a screenshot kept in
var/screenshots/history-report.png.

The history: axis1 weekly over five weeks, its backlash rising past the watch limit (a forecast
of the alert limit, so a service-by date); axis2 five cycles two minutes apart (too little
history for a forecast: the page says so instead of extrapolating).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.history.records import Estimate, Trigger
from agent.history.store import HistoryStore
from tests.support.report.chromium import (
    Browser,
    Look,
    assert_not_blank,
    chromium,
    look_at,
    save_screenshot,
)
from tests.support.service.config_files import VALID_CONFIG

T0 = datetime(2026, 9, 7, 6, 0, tzinfo=UTC)
HEIGHT = 2600

DOM = """({
    meta: document.querySelector('p.meta').textContent,
    heads: [...document.querySelectorAll('table.summary thead th')].map(th => th.textContent),
    rows: [...document.querySelectorAll('table.summary tbody tr')]
          .map(tr => [...tr.cells].map(td => td.textContent)),
    sections: [...document.querySelectorAll('section.joint')].map(s => ({
        heading: s.querySelector('h3').textContent,
        text: s.innerText,
        plots: s.querySelectorAll('svg.plot').length,
    })),
    details: [...document.querySelectorAll('details')].map(d => ({
        open: d.open,
        summary: d.querySelector('summary').textContent,
        visibleRows: [...d.querySelectorAll('tr')].filter(r => r.checkVisibility()).length,
    })),
    foot: document.querySelector('body > p.note:last-of-type').textContent,
})"""


def _history(state_dir: Path) -> None:
    weekly = [0.6e-3, 0.7e-3, 0.8e-3, 0.9e-3, 1.0e-3, 1.1e-3]
    with HistoryStore(state_dir / "history.sqlite") as store:
        for i, value in enumerate(weekly):
            when = T0 + timedelta(days=7 * i)
            store.record_cycle(
                controller="robot1", joint="axis1", kind="backlash", started_at=when,
                finished_at=when + timedelta(seconds=30),
                estimates=[Estimate("backlash_rad", value, "rad")], trigger=Trigger.SCHEDULE,
            )  # fmt: skip
        last = T0 + timedelta(days=35)
        for i in range(5):
            when = last + timedelta(minutes=2 * i)
            store.record_cycle(
                controller="robot1", joint="axis2", kind="backlash", started_at=when,
                finished_at=when + timedelta(seconds=30),
                estimates=[Estimate("amplitude_rad_s", 0.2 + 0.01 * i, "rad/s")],
                trigger=Trigger.ON_DEMAND,
            )  # fmt: skip


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as b:
        yield b


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("history-report")
    state = root / "state"
    state.mkdir()
    _history(state)
    config = root / "agent.yaml"
    config.write_text(VALID_CONFIG.replace("/var/lib/jha", str(state)))
    out = root / "out" / "report.html"
    out.parent.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "report", "--config", str(config), "--html",
         str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out, done.stdout


@pytest.fixture(scope="module")
def look(browser: Browser, page: tuple[Path, str]) -> Look:
    return look_at(browser, page[0], DOM, height=HEIGHT)


def test_the_page_loads_clean_and_its_screenshot_is_kept(look: Look) -> None:
    assert look.problems == []
    assert save_screenshot("history-report", look.png).stat().st_size == len(look.png)
    assert_not_blank(look.png, (HEIGHT, 1280))


def test_action_column_severity_order_and_host(look: Look) -> None:
    dom: dict[str, Any] = look.dom
    assert dom["heads"] == ["machine", "joint", "value", "status", "NE 107", "action", "reason"]
    # past the watch limit comes first, with a date to service it by
    assert [r[1] for r in dom["rows"]] == ["axis1", "axis2"]
    axis1, axis2 = dom["rows"]
    assert axis1[3] == "WATCH" and axis1[5].startswith("plan service before 2026-")
    assert axis2[3] == "OK" and axis2[5] == "none"
    assert "unknown host" not in dom["meta"] and " on  by" not in dom["meta"]


def test_short_history_says_so_instead_of_a_forecast(look: Look) -> None:
    sections = {s["heading"].split()[0]: s for s in look.dom["sections"]}
    short = sections["axis2"]["text"]
    assert "Not enough history yet for a forecast: 5 cycles over 8 min" in short
    # no rate per day from eight minutes either, in the text or the indicator table
    assert "/day" not in short
    # the five-week joint is extrapolated, and its trend is plotted
    assert "At this rate it reaches the alert limit" in sections["axis1"]["text"]
    assert sections["axis1"]["plots"] == 1


def test_raw_values_are_folded_and_the_footer_claims_nothing_unwritten(
    look: Look, page: tuple[Path, str]
) -> None:
    assert look.dom["details"], "each judged joint has its cycle details folded"
    for d in look.dom["details"]:
        assert not d["open"] and d["visibleRows"] == 0, d
    assert "report.json" not in look.dom["foot"]
    assert not (page[0].parent / "report.json").exists()
    assert f"report: {page[0]}" in page[1]
