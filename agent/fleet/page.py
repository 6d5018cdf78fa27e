"""The plan's HTML page and a stored report's page: self-contained (no script, no external
resource), every name escaped (machine and joint names come from the agents, which a plant does
not fully control), trends as inline SVG sparklines.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from agent.fleet.plan import FILTERS, PlanFilter, PlanRow
from agent.fleet.spark import HEIGHT, WIDTH, spark_points, spark_values

_ZERO = timedelta(0)
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


def _date(t: datetime | None) -> str:
    if t is None:
        return ""
    return (t if t.utcoffset() == _ZERO else t.astimezone(UTC)).date().isoformat()


def _value(row: PlanRow) -> str:
    if row.value is None:
        return ""
    return f"{row.value:.4g} {_e(row.unit or '')}"


def sparkline(points: str | None) -> str:
    """An inline SVG of a trend's polyline coordinates (agent.fleet.spark); '' without one."""
    if not points:
        return ""
    return (
        f'<svg class="spark" width="{WIDTH}" height="{HEIGHT}" role="img">'
        f'<polyline points="{_e(points)}"/></svg>'
    )


def plan_page(rows: Sequence[PlanRow], f: PlanFilter, now: datetime) -> str:
    stale_machines = len({(r.prefix, r.machine) for r in rows if r.stale})
    inputs = "".join(
        f'<label>{name} <input name="{name}" value="{_e(getattr(f, name))}"></label> '
        for name in FILTERS
    )
    body = "".join(_row(r) for r in rows)
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        "<title>Maintenance plan</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>Maintenance plan</h1><p>{len(rows)} joints, {stale_machines} stale machine(s); "
        f"as of {_e(now.astimezone(UTC).isoformat(timespec='seconds'))}. "
        f'<a href="/api/plan?{_e(_query(f))}">JSON</a></p>'
        f'<form method="get" action="/">{inputs}<button>Filter</button></form>'
        "<table><thead><tr><th>Status</th><th>Site</th><th>Line</th><th>Machine</th>"
        "<th>Joint</th><th>Indicator</th><th>Value</th><th>Trend</th><th>Next limit</th>"
        "<th>Forecast</th><th>Interval (95 %)</th><th>Action</th><th>Report</th></tr></thead>"
        f"<tbody>{body}</tbody></table></body></html>"
    )


def _row(r: PlanRow) -> str:
    classes = r.status.value + (" stale" if r.stale else "")
    stale = (
        f'<span class="tag" title="no report since {_e(r.last_report_at.isoformat())}">stale</span>'
        if r.stale
        else ""
    )
    high = (
        "never" if r.next_limit is not None and r.forecast_high is None else _date(r.forecast_high)
    )
    interval = f"{_date(r.forecast_low)} to {high}" if r.next_limit is not None else ""
    action = (r.recommendation or {}).get("action", "")
    report = (
        f'<a href="/reports/{quote(r.report_id)}">report</a>'
        if r.report_stored
        else '<span title="the full report did not reach the fleet">-</span>'
    )
    return (
        f'<tr class="{_e(classes)}"><td class="st">{_e(r.status.value)} ({_e(r.ne107)})</td>'
        f"<td>{_e(r.site)}</td><td>{_e(r.line)}</td><td>{_e(r.machine)}{stale}</td>"
        f"<td>{_e(r.joint)}</td><td>{_e(r.indicator)}</td><td>{_value(r)}</td>"
        f"<td>{sparkline(r.spark)}</td><td>{_e(r.next_limit or '')}</td>"
        f"<td>{_date(r.forecast_at)}</td><td>{_e(interval)}</td><td>{_e(action)}</td>"
        f"<td>{report}</td></tr>"
    )


def _query(f: PlanFilter) -> str:
    return urlencode({k: getattr(f, k) for k in FILTERS if getattr(f, k) is not None})


def report_page(report_id: str, doc: dict[str, Any]) -> str:
    """A stored report as the agent sent it: its joints with status, value, reason, action."""
    rows = []
    for j in (*_list(doc.get("joints")), *_list(doc.get("indicator_joints"))):
        rec = j.get("recommendation") if isinstance(j.get("recommendation"), dict) else {}
        value = j.get("value")
        shown = f"{value:.4g} {_e(j.get('unit') or '')}" if isinstance(value, int | float) else ""
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
