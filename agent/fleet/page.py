"""The plan's HTML page and a stored report's page, self-contained (no external resource).

A report's page is markup only (every name escaped: machine and joint names come from the
agents, which a plant does not fully control; trends as inline SVG sparklines). The plan's page
carries its rows as escaped JSON that one inline script, allowed by its hash, draws
(agent.fleet.page_script): 12,000 joints as markup were 6.6 MB, as data they are about 1 MB.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, date, datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from agent.fleet.page_script import CSP, DATA_ID, PLAN_SCRIPT, ROWS_ID
from agent.fleet.plan import FILTERS, PlanFilter, PlanRow
from agent.fleet.spark import HEIGHT, WIDTH, spark_points, spark_values
from agent.health.display import indicator_info
from agent.health.status import Status

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1em;color:#222}
table{border-collapse:collapse;width:100%}th,td{padding:3px 6px;border-bottom:1px solid #ddd;
text-align:left;vertical-align:middle}th{background:#f4f4f4;position:sticky;top:0}
.alert td.st{background:#f8d0d0}.watch td.st{background:#fbe9b0}.unknown td.st{background:#e4e4f4}
.ok td.st{background:#d8f0d8}tr.stale{color:#888}.spark polyline{fill:none;stroke:#36c;
stroke-width:1.5}td:nth-child(n+9):nth-child(-n+11){white-space:nowrap}
.tag{font-size:11px;border:1px solid #888;border-radius:3px;padding:0 3px;margin-left:4px}
form{margin:0 0 1em}input{width:9em}
"""


def _e(value: object) -> str:
    return _escaped("" if value is None else str(value))


# Site, line, machine, indicator and status names repeat on thousands of rows.
@functools.lru_cache(maxsize=65536)
def _escaped(text: str) -> str:
    return escape(text, quote=True)


def sparkline(points: str | None) -> str:
    """An inline SVG of a trend's polyline coordinates (agent.fleet.spark); '' without one."""
    if not points:
        return ""
    return (
        f'<svg class="spark" width="{WIDTH}" height="{HEIGHT}" role="img">'
        f'<polyline points="{_e(points)}"/></svg>'
    )


def plan_page(rows: Sequence[PlanRow], f: PlanFilter, now: datetime) -> str:
    """The plan as a page: the header, the filters and the JSON link as markup, the rows as
    data that the page's script draws (agent.fleet.page_script): a sixth of the rows as markup."""
    stale_machines = len({(r.prefix, r.machine) for r in rows if r.stale})
    offline_machines = len({(r.prefix, r.machine) for r in rows if r.agent_state == "offline"})
    inputs = "".join(
        f'<label>{name} <input name="{name}" value="{_e(getattr(f, name))}"></label> '
        for name in FILTERS
    )
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        # Also in the page, so that a saved copy runs nothing but its own script either.
        f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">'
        "<title>Maintenance plan</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>Maintenance plan</h1><p>{len(rows)} joints, {stale_machines} stale machine(s), "
        f"{offline_machines} with their agent offline; "
        f"as of {_e(now.astimezone(UTC).isoformat(timespec='seconds'))}. "
        f'<a href="/api/plan?{_e(_query(f))}">JSON</a></p>'
        f'<form method="get" action="/">{inputs}<button>Filter</button></form>'
        "<noscript><p>The table is drawn by the page's script; without it, the plan is in the "
        "JSON above.</p></noscript>"
        "<table><thead><tr><th>Status</th><th>Site</th><th>Line</th><th>Machine</th>"
        "<th>Joint</th><th>Indicator</th><th>Value</th><th>Trend</th><th>Next limit</th>"
        "<th>Forecast</th><th>Interval (95 %)</th><th>Action</th><th>Report</th></tr></thead>"
        f'<tbody id="{ROWS_ID}"></tbody></table>'
        f'<script type="application/json" id="{DATA_ID}">{script_json(plan_data(rows, now))}'
        f"</script><script>{PLAN_SCRIPT}</script></body></html>"
    )


def plan_data(rows: Sequence[PlanRow], now: datetime) -> dict[str, Any]:
    """The rows as the page's script reads them (the layout in agent.fleet.page_script)."""
    # Each distinct string once: a plant's thousands of rows share a few names, statuses,
    # actions and report ids. Index 0 is the empty string, and stands for none.
    strings: dict[str, int] = {"": 0}

    def s(text: str | None) -> int:
        return strings.setdefault(text or "", len(strings))

    # What a row shows of its machine, once per machine (keyed by all of it, so a row never
    # borrows another's staleness).
    machines: dict[tuple[Any, ...], int] = {}
    machine_rows: list[list[int]] = []
    base = now.astimezone(UTC).toordinal()
    out = []
    for r in rows:
        offline = r.agent_state == "offline"
        key = (r.prefix, r.machine, r.site, r.line, r.stale, r.last_report_at, offline)
        m = machines.get(key)
        if m is None:
            m = machines[key] = len(machine_rows)
            since = r.last_report_at.isoformat() if r.stale else ""
            gone = _since(r.agent_since) if offline else ""
            machine_rows.append([s(r.site), s(r.line), s(r.machine), s(since), s(gone)])
        # The value in the unit the reasons and the agents' reports use (mrad, kN·m/rad).
        info = indicator_info(r.indicator)
        shown, unit = r.value, r.unit
        if shown is not None and unit == info.unit and info.display_unit:
            shown, unit = shown * info.scale, info.display_unit
        # An alert is to be served now: a date for its next limit beside it only confuses.
        forecast = r.status is not Status.ALERT
        out.append(
            [
                s(r.status.value),
                s(r.ne107),
                m,
                s(r.joint),
                s(r.indicator),
                "" if shown is None else f"{shown:.4g}",
                s(unit),
                _levels(r.spark),
                s(r.next_limit if forecast else None),
                _day(r.forecast_at if forecast else None, base),
                _day(r.forecast_low if forecast else None, base),
                _day(r.forecast_high if forecast else None, base),
                s(_action(r)),
                s(r.report_id) if r.report_stored else 0,
            ]
        )
    return {
        "t": list(strings),
        "b": base - _EPOCH_ORDINAL,
        "w": WIDTH,
        "h": HEIGHT,
        "m": machine_rows,
        "r": out,
    }


def _since(t: datetime | None) -> str:
    """When an offline agent went offline ('unknown' when its status said no time)."""
    return "unknown" if t is None else t.astimezone(UTC).isoformat(timespec="seconds")


def _action(r: PlanRow) -> str:
    action = (r.recommendation or {}).get("action")
    return "" if action is None else str(action)


def script_json(data: object) -> str:
    """JSON that is safe inside a <script> element: no '<' (so no '</script>' and no '<!--'),
    '>' and '&' escaped too, and U+2028/2029 (line ends to older JavaScript parsers) as
    escapes; JSON.parse reads them back as the same characters."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, escaped in _SCRIPT_ESCAPES:
        text = text.replace(raw, escaped)
    return text


_SCRIPT_ESCAPES = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
# A sparkline's point "x,y" as one character, the base-36 digit of y: x is evenly spaced
# (agent.fleet.spark), so the page recomputes it; y is at most HEIGHT - 1.
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
if len(_DIGITS) <= HEIGHT:
    raise ImportError("agent.fleet.spark.HEIGHT no longer fits one base-36 digit per point")
_POINT = {f"{x},{y}": _DIGITS[y] for x in range(WIDTH + 1) for y in range(HEIGHT + 1)}


def _levels(points: str | None) -> str:
    """A sparkline's y coordinates, one base-36 digit each ('' without a trend)."""
    if not points:
        return ""
    try:  # a lookup per point: 12,000 trends of 21 points in 20 ms
        return "".join(map(_POINT.__getitem__, points.split(" ")))
    except KeyError:  # not a sparkline of this box: none rather than a wrong one
        return ""


def _day(t: datetime | None, base: int) -> int | None:
    """Days from `base` (a proleptic ordinal) to t's date in UTC (the JSON API's dates)."""
    return None if t is None else t.astimezone(UTC).toordinal() - base


def _query(f: PlanFilter) -> str:
    return urlencode({k: getattr(f, k) for k in FILTERS if getattr(f, k) is not None})


def report_page(report_id: str, doc: dict[str, Any]) -> str:
    """A stored report as the agent sent it: its joints with status, value, reason, action."""
    rows = []
    for j in (*_list(doc.get("joints")), *_list(doc.get("indicator_joints"))):
        rec = j.get("recommendation") if isinstance(j.get("recommendation"), dict) else {}
        value = j.get("value")
        shown = ""
        if isinstance(value, int | float) and not isinstance(value, bool):
            info = indicator_info(str(j.get("indicator") or ""))
            unit = str(j.get("unit") or "")
            if unit == info.unit and info.display_unit:  # the reasons' unit (mrad, kN·m/rad)
                value, unit = value * info.scale, info.display_unit
            shown = f"{value:.4g} {_e(unit)}"
        points = spark_points(spark_values(j.get("history")))
        rows.append(
            f'<tr class="{_e(j.get("status"))}"><td class=st>{_e(j.get("status"))}</td>'
            f"<td>{_e(j.get('joint'))}</td><td>{_e(j.get('indicator'))}</td><td>{shown}</td>"
            f"<td>{sparkline(points)}</td><td>{_e(j.get('reason'))}</td>"
            f"<td>{_e(j.get('forecast'))}</td><td>{_e(rec.get('action'))}</td></tr>"
        )
    machines = ", ".join(str(m) for m in _list(doc.get("machines"), dicts=False))
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>Report {_e(report_id)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>Report of {_e(machines)}</h1><p>Created {_e(doc.get('created_at'))} on host "
        f"{_e(doc.get('host'))} by agent {_e(doc.get('agent_version'))}; id {_e(report_id)}. "
        f'<a href="/api/reports/{quote(report_id)}">JSON</a> <a href="/">plan</a></p>'
        "<table><thead><tr><th>Status</th><th>Joint</th><th>Indicator</th><th>Value</th>"
        "<th>Trend</th><th>Reason</th><th>Forecast</th><th>Action</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></body></html>"
    )


def _list(v: Any, dicts: bool = True) -> list[Any]:
    if not isinstance(v, list):
        return []
    return [x for x in v if isinstance(x, dict)] if dicts else v
