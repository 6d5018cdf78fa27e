"""The plan over HTTP, from messages the agent's payload builder made, stored by the real
service: the JSON API's sort order and filters, the page (hostile names escaped, a stale
machine, sparklines, the link to the stored report), and the token."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest

from agent.fleet.page import plan_page
from agent.fleet.page_script import DATA_ID
from agent.fleet.plan import PlanFilter, PlanRow
from agent.health.status import Status
from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.fleet.conftest import HOSTILE_JOINT, HOSTILE_MACHINE, TOKEN, Plant
from tests.fleet.running import base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until
from tests.support.summary import security


def plan(p: Plant, query: str = "") -> list[dict[str, Any]]:
    r = get(p.base, f"/api/plan{query}")
    assert r.status == 200, r.text
    joints: list[dict[str, Any]] = r.json()["joints"]
    return joints


def test_plan_sorted_by_status_then_forecast_date(plant: Plant) -> None:
    rows = plan(plant)
    keys = [(r["machine"], r["joint"], r["status"]) for r in rows]
    assert keys[:3] == [
        ("press1", "J1", "alert"),
        ("press1", "J2", "watch"),  # alert limit forecast sooner than the next watch joint's
        (HOSTILE_MACHINE, HOSTILE_JOINT, "watch"),
    ]
    assert sorted(keys[3:]) == [("old-robot", "J1", "ok"), ("press1", "J3", "ok")]
    first_watch, second_watch = rows[1]["forecast"], rows[2]["forecast"]
    assert first_watch["at"] < second_watch["at"]
    for r in rows[1:3]:
        low, high = r["forecast"]["interval"]
        assert low <= r["forecast"]["at"] and (high is None or r["forecast"]["at"] <= high)
    stale = {r["machine"]: r["stale"] for r in rows}
    assert stale == {"press1": False, HOSTILE_MACHINE: False, "old-robot": True}
    assert {(r["machine"], r["site"], r["line"]) for r in rows} == {
        ("press1", "plant-a", "line-1"),
        (HOSTILE_MACHINE, "plant-b", "line-7"),
        ("old-robot", "plant-b", "line-7"),
    }


def test_plan_filters(plant: Plant) -> None:
    assert {r["machine"] for r in plan(plant, "?site=plant-b")} == {HOSTILE_MACHINE, "old-robot"}
    assert {r["machine"] for r in plan(plant, "?line=line-1")} == {"press1"}
    assert [r["joint"] for r in plan(plant, "?machine=press1")] == ["J1", "J2", "J3"]
    assert [r["joint"] for r in plan(plant, "?machine=press1&line=line-7")] == []
    assert len(plan(plant, "?indicator=backlash_rad")) == 5
    # A further indicator of every joint (the fit's amplitude), not the judged one.
    assert len(plan(plant, "?indicator=amplitude_rad_s")) == 5
    assert plan(plant, "?indicator=stiffness_nm_per_rad") == []
    # The trends' points only when asked for: the page needs just the sparkline.
    assert all("history" not in r for r in plan(plant))
    assert [len(r["history"]) for r in plan(plant, "?history=1")] == [3] * 5
    assert get(plant.base, "/api/plan?colour=red").status == 400
    assert get(plant.base, "/api/plan?site=a%00b").status == 400


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Elements:
    e = Elements()
    e.feed(html)
    return e


# A row of the page's data, by name (the layout in agent.fleet.page_script).
_ROW = (
    *("status", "ne107", "machine", "joint", "indicator", "value", "unit", "trend"),
    *("limit", "at", "low", "high", "action", "report"),
)


def page_data(html: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The plan page's embedded rows: its string table, and each row with its machine's site,
    line, name, stale_since and offline_since resolved into it (strings as indices into the
    table)."""
    (raw,) = re.findall(f'<script type="application/json" id="{DATA_ID}">(.*?)</script>', html)
    assert "<" not in raw and ">" not in raw  # nothing to end the element early
    data = json.loads(raw)
    rows = []
    for r in data["r"]:
        row = dict(zip(_ROW, r, strict=True))
        row.update(
            zip(
                ("site", "line", "name", "stale_since", "offline_since"),
                data["m"][row["machine"]],
                strict=True,
            )
        )
        rows.append(row)
    return data["t"], rows


def test_page_escapes_names_marks_stale_draws_trends_and_links_reports(plant: Plant) -> None:
    r = get(plant.base, "/")
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("text/html")
    policy = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    page = parse(r.text)
    tags = [t for t, _ in page.tags]
    # The hostile names stayed text: no image, and no script but the page's two (its rows as
    # data, and the code that draws them, the one script the policy lets run).
    assert "img" not in tags
    assert [a for t, a in page.tags if t == "script"] == [
        {"type": "application/json", "id": DATA_ID},
        {},
    ]
    (code,) = re.findall("<script>(.*?)</script>", r.text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == f"'sha256-{digest}'"
    strings, rows = page_data(r.text)
    assert HOSTILE_MACHINE in strings and HOSTILE_JOINT in strings
    assert len(rows) == 5
    assert sum(bool(row["stale_since"]) for row in rows) == 1
    assert [len(row["trend"]) for row in rows] == [3] * 5  # every joint has three points
    links = sorted({f"/reports/{strings[row['report']]}" for row in rows if row["report"]})
    assert links == sorted(f"/reports/{r.message_id}" for r in plant.reports.values())
    # The link serves the report the agent sent, as a page and as its JSON.
    hostile = plant.reports["hostile"]
    shown = get(plant.base, f"/reports/{hostile.message_id}")
    assert shown.status == 200
    assert "script" not in [t for t, _ in parse(shown.text).tags]
    assert HOSTILE_JOINT in "".join(parse(shown.text).text)
    doc = get(plant.base, f"/api/reports/{hostile.message_id}").json()
    assert doc["message_id"] == hostile.message_id
    assert doc["joints"][0]["joint"] == HOSTILE_JOINT
    assert get(plant.base, "/reports/00000000-0000-0000-0000-000000000000").status == 404
    assert get(plant.base, "/reports/..%2F..%2Fetc%2Fpasswd").status == 404


# Names that would end the data's <script> element, open a comment in it, or end a line of
# JavaScript, if they reached the page unescaped.
BREAKOUTS = (
    "</script><script>alert(1)</script>",
    "</SCRIPT ><img src=x onerror=alert(2)>",
    "<!--<script>",
    "a\u2028b\u2029c",
    "&lt;&amp; ]]>",
)


def test_page_data_cannot_end_its_script_element() -> None:
    now = datetime(2027, 6, 1, tzinfo=UTC)
    rows = [
        PlanRow(
            site=name,
            line=name,
            prefix="jha",
            machine=name,
            joint=name,
            status=Status.WATCH,
            ne107=name,
            reason=None,
            indicator=name,
            value=1e-3,
            unit=name,
            estimated_at=now,
            next_limit=name,
            forecast_at=now,
            forecast_low=now,
            forecast_high=None,
            recommendation={"action": name},
            history=(),
            spark="1,19 99,1",
            report_id=name,
            report_stored=True,
            last_report_at=now,
            stale=True,
        )
        for name in BREAKOUTS
    ]
    html = plan_page(rows, PlanFilter(machine=BREAKOUTS[0]), now)
    page = parse(html)
    assert [t for t, _ in page.tags if t in ("script", "img")] == ["script", "script"]
    strings, decoded = page_data(html)
    for name, row in zip(BREAKOUTS, decoded, strict=True):
        shown = {k: strings[row[k]] for k in ("site", "line", "name", "joint", "action")}
        assert set(shown.values()) == {name}, shown
    assert "\u2028" not in html and "\u2029" not in html


def test_every_request_needs_the_token(plant: Plant) -> None:
    for path in ("/", "/api/plan", "/api/stats", f"/reports/{plant.reports['old'].message_id}"):
        refused = get(plant.base, path, token=None)
        assert refused.status == 401
        assert refused.headers["WWW-Authenticate"].startswith("Basic")
        assert b"joint" not in refused.body
        assert get(plant.base, path, token="wrong-token").status == 401
        assert get(plant.base, path, token=TOKEN[:-1]).status == 401
        assert get(plant.base, path, token=TOKEN, basic=True).status == 200
    security("fleet: the plan refuses requests without the token", passed=True)


def test_the_plan_is_read_only(plant: Plant) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        plant.base + "/api/plan",
        data=b"{}",
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405


def test_stale_after_is_the_configured_time(
    broker: MosquittoBroker, database: str, tmp_path: Any
) -> None:
    from tests.fleet.conftest import write_fleet_config

    files = write_fleet_config(tmp_path / "f", broker.port, database, stale_after_s=7 * 86400.0)
    report = machine_report(
        "old-robot", {"J1": [2e-4, 2e-4]}, end=datetime.now(UTC) - timedelta(days=3)
    )
    sender = RawPublisher(broker.port)
    try:
        with running_fleet(files.config) as fleet:
            sender.send_messages(messages_of(report))
            wait_until(lambda: fleet.ingest.stats().stored == 2, 30, "the report")
            (row,) = get(base_url(fleet), "/api/plan").json()["joints"]
    finally:
        sender.close()
    assert row["stale"] is False  # 3 days old, stale only after 7


def test_gzip_for_clients_that_take_it(plant: Plant) -> None:
    import gzip
    import urllib.request

    def fetch(encoding: str) -> tuple[dict[str, str], bytes]:
        request = urllib.request.Request(plant.base + "/api/plan")
        request.add_header("Authorization", f"Bearer {TOKEN}")
        request.add_header("Accept-Encoding", encoding)
        with urllib.request.urlopen(request, timeout=30) as r:
            return dict(r.headers), r.read()

    zipped_headers, zipped = fetch("gzip")
    plain_headers, plain = fetch("identity")
    assert zipped_headers["Content-Encoding"] == "gzip"
    assert "Content-Encoding" not in plain_headers
    assert len(zipped) < len(plain)
    unzipped = json.loads(gzip.decompress(zipped))
    assert [j["joint"] for j in unzipped["joints"]] == [
        j["joint"] for j in json.loads(plain)["joints"]
    ]


def test_fuzzed_requests_never_fail_the_server(plant: Plant) -> None:
    import urllib.parse

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.support.summary import counted

    tally = counted("fuzzing", "fleet: HTTP paths and filters")
    keys = st.sampled_from(["site", "line", "machine", "indicator", "history", "x", "", "%00"])

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        path=st.sampled_from(["/", "/api/plan", "/reports/", "/api/reports/", "/api/stats", "/x"]),
        tail=st.text(max_size=40),
        params=st.lists(st.tuples(keys, st.text(max_size=300)), max_size=4),
    )
    def request(path: str, tail: str, params: list[tuple[str, str]]) -> None:
        tally.case()
        query = urllib.parse.urlencode(params)
        url = path + urllib.parse.quote(tail) + (f"?{query}" if query else "")
        r = get(plant.base, url)
        if r.status not in (200, 400, 404):
            tally.crash(f"{r.status} for {url!r}")
        assert r.status in (200, 400, 404), (url, r.status, r.body[:200])

    request()
    assert get(plant.base, "/api/plan").status == 200  # still serving


def _row(status: Status, indicator: str, value: float, unit: str, now: datetime) -> PlanRow:
    return PlanRow(
        site="s", line="l", prefix="jha", machine="m", joint="J1", status=status, ne107="M",
        reason=None, indicator=indicator, value=value, unit=unit, estimated_at=now,
        next_limit="alert", forecast_at=now + timedelta(days=9),
        forecast_low=now + timedelta(days=5), forecast_high=now + timedelta(days=20),
        recommendation={"action": "service now" if status is Status.ALERT else "plan"},
        history=(), spark=None, report_id="r1", report_stored=True, last_report_at=now,
        stale=False,
    )  # fmt: skip


def test_page_values_in_the_reasons_units_and_no_forecast_beside_service_now() -> None:
    """Issue 31, point 5: values were shown in rad beside reasons in mrad, and an alert row
    saying "service now" showed a forecast date too."""
    now = datetime(2027, 6, 1, tzinfo=UTC)
    rows = [
        _row(Status.WATCH, "backlash_rad", 1.5e-3, "rad", now),
        _row(Status.ALERT, "stiffness_nm_rad", 14500.0, "N·m/rad", now),
    ]
    strings, decoded = page_data(plan_page(rows, PlanFilter(), now))
    watch, alert = decoded
    assert watch["value"] == "1.5" and strings[watch["unit"]] == "mrad"
    assert alert["value"] == "14.5" and strings[alert["unit"]] == "kN·m/rad"
    assert watch["at"] is not None and strings[watch["limit"]] == "alert"
    assert alert["at"] is None and alert["low"] is None and alert["limit"] == 0  # none shown
