"""The plan page as served (token and all), rendered by headless Chromium: the hostile names
are text, not elements; every joint's row and sparkline is drawn with a size; the stale
machine's rows are marked; nothing complains in the console. The screenshot is left in
var/screenshots/fleet-plan.png for people to look at."""

from __future__ import annotations

from pathlib import Path

from tests.fleet.conftest import HOSTILE_JOINT, HOSTILE_MACHINE, Plant
from tests.fleet.running import get
from tests.support.report.chromium import assert_not_blank, chromium, look_at, save_screenshot

_DOM = """(() => ({
  rows: document.querySelectorAll('tbody tr').length,
  stale: [...document.querySelectorAll('tr.stale td:nth-child(4)')].map(td => td.textContent),
  sparks: [...document.querySelectorAll('svg.spark polyline')].map(p => {
    const r = p.getBoundingClientRect(); return [r.width, r.height]; }),
  scripts: document.querySelectorAll('script').length,
  images: document.querySelectorAll('img').length,
  firstMachine: document.querySelector('tbody tr td:nth-child(4)').textContent,
  text: document.body.innerText,
}))()"""


def test_the_page_in_headless_chromium(plant: Plant, tmp_path: Path) -> None:
    served = get(plant.base, "/")
    assert served.status == 200
    page = tmp_path / "plan.html"
    page.write_bytes(served.body)  # self-contained: the file renders as the served page
    with chromium(tmp_path / "profile") as browser:
        look = look_at(browser, page, _DOM, width=1400, height=600)
    save_screenshot("fleet-plan", look.png)
    assert_not_blank(look.png, (600, 1400))
    dom = look.dom
    assert look.problems == []
    assert dom["scripts"] == 0 and dom["images"] == 0  # the hostile names stayed text
    assert HOSTILE_MACHINE in dom["text"] and HOSTILE_JOINT in dom["text"]
    assert dom["rows"] == 5
    assert dom["firstMachine"] == "press1"  # the alert row first
    assert [s.removesuffix("stale") for s in dom["stale"]] == ["old-robot"]
    assert len(dom["sparks"]) == 5
    assert all(w > 50 for w, _ in dom["sparks"]), dom["sparks"]
    # The rising trends (alert, watch, watch) climb; the two flat ones are a level line.
    assert [h > 5 for _, h in dom["sparks"]] == [True, True, True, False, False]
