"""The plan page as served (token and all), rendered by headless Chromium: its script, allowed
by the page's Content-Security-Policy, draws every joint's row in the plan's order; the hostile
names are text, not elements; every sparkline is drawn with a size; the stale machine's rows
are marked; dates and intervals are the JSON API's; every row links its report; nothing
complains in the console. The screenshot is left in var/screenshots/fleet-plan.png for people
to look at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fleet.conftest import HOSTILE_JOINT, HOSTILE_MACHINE, Plant
from tests.fleet.running import get
from tests.support.report.chromium import assert_not_blank, chromium, look_at, save_screenshot

_DOM = """(() => {
  const column = (n) => [...document.querySelectorAll(`tbody tr td:nth-child(${n})`)]
    .map(td => td.textContent);
  return {
    rows: document.querySelectorAll('tbody tr').length,
    classes: [...document.querySelectorAll('tbody tr')].map(tr => tr.className),
    machines: column(4),
    stale: [...document.querySelectorAll('tr.stale td:nth-child(4)')].map(td => td.textContent),
    staleTitles: [...document.querySelectorAll('tr.stale .tag')].map(s => s.title),
    sparks: [...document.querySelectorAll('svg.spark polyline')].map(p => {
      const r = p.getBoundingClientRect(); return [r.width, r.height]; }),
    forecasts: column(10),
    intervals: column(11),
    links: [...document.querySelectorAll('tbody tr td:nth-child(13)')].map(td =>
      [...td.querySelectorAll('a')].map(a => a.getAttribute('href')).join()),
    scripts: [...document.querySelectorAll('script')].map(s => s.type || 'code'),
    images: document.querySelectorAll('img').length,
    text: document.body.innerText,
  };
})()"""


def test_the_page_in_headless_chromium(plant: Plant, tmp_path: Path) -> None:
    served = get(plant.base, "/")
    assert served.status == 200
    joints = get(plant.base, "/api/plan").json()["joints"]
    page = tmp_path / "plan.html"
    # Self-contained, its policy in a <meta> too: the file renders as the served page.
    page.write_bytes(served.body)
    with chromium(tmp_path / "profile") as browser:
        look = look_at(browser, page, _DOM, width=1400, height=600)
    save_screenshot("fleet-plan", look.png)
    assert_not_blank(look.png, (600, 1400))
    dom = look.dom
    assert look.problems == []  # the policy let the page's script run, and nothing else
    # The hostile names stayed text: the page's two scripts (its data, its code), no other.
    assert dom["scripts"] == ["application/json", "code"] and dom["images"] == 0
    assert HOSTILE_MACHINE in dom["text"] and HOSTILE_JOINT in dom["text"]
    assert dom["rows"] == 5
    # The plan's order and statuses, as the JSON API has them.
    assert [m.removesuffix("stale") for m in dom["machines"]] == [j["machine"] for j in joints]
    assert dom["machines"][0] == "press1"  # the alert row first
    assert [c.split()[0] for c in dom["classes"]] == [j["status"] for j in joints]
    assert [c.split()[0] for c in dom["classes"]] == ["alert", "watch", "watch", "ok", "ok"]
    assert [s.removesuffix("stale") for s in dom["stale"]] == ["old-robot"]
    assert [c.endswith(" stale") for c in dom["classes"]] == [j["stale"] for j in joints]
    assert all(t.startswith("no report since ") for t in dom["staleTitles"]), dom["staleTitles"]
    assert len(dom["sparks"]) == 5
    assert all(w > 50 for w, _ in dom["sparks"]), dom["sparks"]
    # The rising trends (alert, watch, watch) climb; the two flat ones are a level line.
    assert [h > 5 for _, h in dom["sparks"]] == [True, True, True, False, False]
    # The forecast's date and 95 % interval: the API's (UTC) dates, "never" for an open end;
    # none for the alert (issue 31: "service now" beside a date confused a planner).
    expected = [_dates(j) for j in joints]
    assert list(zip(dom["forecasts"], dom["intervals"], strict=True)) == expected
    assert sum(bool(i) for i in dom["intervals"]) >= 2  # the watch joints have one
    assert dom["links"] == [f"/reports/{j['report_id']}" for j in joints]


def _dates(joint: dict[str, Any]) -> tuple[str, str]:
    """A forecast as the page shows it: its date and its interval ("low to high", one date
    "(zero width)" when both ends are that date); none beside an alert (serve it now)."""
    forecast = joint.get("forecast")
    if forecast is None or joint["status"] == "alert":
        return "", ""
    low, high = (str(t or "")[:10] for t in forecast["interval"])
    span = f"{low} (zero width)" if low and low == high else f"{low} to {high or 'never'}"
    return str(forecast["at"] or "")[:10], span
