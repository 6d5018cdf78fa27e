"""The joint-health report: versioned JSON, one self-contained HTML page, and a terminal table.

JSON schema "jha.report/1" (keys only ever get added within a major version):
  schema, created_at, agent_version, host, machines[], summary{worst_status, counts{status: n}},
  joints[]{controller, joint, status, reason, indicator, value, unit, limits{watch, alert},
           error, capture_path, result (BacklashResult.to_dict, or null), trend (Trend.to_dict,
           or null), history[]{time, value}, indicators[] (see below)}
  (indicators and indicator_joints are there only when not empty.)
  indicator_joints[]: joints with no backlash cycle but other indicators (stiffness,
           identification); same keys as joints[], status "unknown", not counted in summary.
  indicators[]{indicator, unit, latest_value, latest_time, n_points, trend (no limits, or
           null), history[]{time, value}}: each non-backlash indicator of the joint's history.
Non-finite numbers are written as null so that the file is strict JSON.

The HTML needs no network and no JavaScript: inline CSS, inline SVG (in HTML5 an inline <svg>
needs no xmlns, so the page holds no URL at all) and a print stylesheet.
"""

from __future__ import annotations

import html
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from agent import __version__
from agent.atomic import atomic_write_text
from agent.config import ThresholdSettings
from agent.estimation.results import BacklashResult
from agent.health import Status, Trend, assess_backlash, days_since, indicator_info, trend, worst
from agent.store import HistoryStore, TrendPoint
from agent.svg import HLine, Series, clean_text, line_plot

REPORT_SCHEMA = "jha.report/1"
TABLE_WIDTH = 100


@dataclass(frozen=True)
class IndicatorSummary:
    """One non-backlash indicator of a joint (stiffness, friction...) over its history."""

    indicator: str
    unit: str
    history: Sequence[TrendPoint]
    trend: Trend | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", tuple(self.history))

    @property
    def latest(self) -> TrendPoint | None:
        return self.history[-1] if self.history else None

    def to_dict(self) -> dict[str, Any]:
        last = self.latest
        return {
            "indicator": self.indicator,
            "unit": self.unit,
            "latest_value": None if last is None else last.value,
            "latest_time": None if last is None else last.time_iso,
            "n_points": len(self.history),
            "trend": None if self.trend is None else self.trend.to_dict(),
            "history": [p.to_dict() for p in self.history],
        }


def indicator_summaries(
    store: HistoryStore, controller: str, joint: str
) -> tuple[IndicatorSummary, ...]:
    """Every non-backlash indicator of the joint in the history, with a trend (no limits)."""
    found = []
    for name, unit in store.indicators(controller, joint):
        points = store.history(controller, joint, name)
        found.append(IndicatorSummary(name, unit, points, trend(points, indicator=name)))
    return tuple(found)


@dataclass(frozen=True)
class JointReport:
    controller: str
    joint: str
    status: Status
    verdict_reason: str
    result: BacklashResult | None
    error: str | None
    thresholds: ThresholdSettings
    trend: Trend | None
    history: Sequence[TrendPoint]
    capture_path: str | None
    # The indicator judged and trended; derived from the result when not given.
    indicator: str | None = None
    # The judged value when there is no result in hand (a report built from the history).
    latest_value: float | None = None
    indicators: Sequence[IndicatorSummary] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", tuple(self.history))
        object.__setattr__(self, "indicators", tuple(self.indicators))

    @property
    def indicator_name(self) -> str:
        if self.indicator:
            return self.indicator
        if self.result is not None and self.result.backlash_rad is not None:
            return "backlash_rad"
        return "amplitude_rad_s"

    @property
    def value(self) -> float | None:
        if self.result is None:
            return self.latest_value
        if self.indicator_name == "backlash_rad":
            return self.result.backlash_rad
        return self.result.amplitude_rad_s

    @property
    def limits(self) -> tuple[float | None, float | None]:
        return limits_for(self.indicator_name, self.thresholds)


@dataclass(frozen=True)
class Report:
    created_at_iso: str
    machines: tuple[str, ...]
    joints: tuple[JointReport, ...]
    agent_version: str = __version__
    host: str = ""
    # Joints with other indicators only (no backlash cycle): shown, but given no status.
    indicator_joints: tuple[JointReport, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "machines", tuple(self.machines))
        object.__setattr__(self, "joints", tuple(self.joints))
        object.__setattr__(self, "indicator_joints", tuple(self.indicator_joints))

    @property
    def worst_status(self) -> Status:
        return worst([j.status for j in self.joints])


def limits_for(indicator: str, thresholds: ThresholdSettings) -> tuple[float | None, float | None]:
    """(watch, alert) limits of an indicator in SI units."""
    if indicator == "backlash_rad":
        return thresholds.backlash_watch_rad, thresholds.backlash_alert_rad
    if indicator == "amplitude_rad_s":
        return thresholds.amplitude_watch_rad_s, thresholds.amplitude_alert_rad_s
    return None, None


def joint_report(
    controller: str,
    joint: str,
    result: BacklashResult | None,
    thresholds: ThresholdSettings,
    history: Sequence[TrendPoint] = (),
    capture_path: str | None = None,
    error: str | None = None,
    indicator: str | None = None,
    indicators: Sequence[IndicatorSummary] = (),
) -> JointReport:
    """Verdict and trend of one joint. `history` is the judged indicator's, this cycle included."""
    verdict = assess_backlash(result, thresholds)
    name = indicator or verdict.indicator
    status, reason = verdict.status, verdict.reason
    if error is not None:
        status, reason = Status.UNKNOWN, f"cycle failed: {error}"
    watch, alert = limits_for(name, thresholds)
    return JointReport(
        controller=controller, joint=joint, status=status, verdict_reason=reason, result=result,
        error=error, thresholds=thresholds, trend=trend(history, watch, alert, name),
        history=history, capture_path=capture_path, indicator=name, indicators=indicators,
    )


def report_dir(state_dir: str | Path, created_at: datetime) -> Path:
    """`<state_dir>/reports/<UTC time>`, with a -N suffix if that directory already exists."""
    stamp = created_at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = Path(state_dir) / "reports"
    candidate = base / stamp
    n = 1
    while candidate.exists():
        candidate = base / f"{stamp}-{n}"
        n += 1
    return candidate


# -- JSON --------------------------------------------------------------------------------------


def joint_to_dict(j: JointReport, evidence: bool = False) -> dict[str, Any]:
    watch, alert = j.limits
    found = {
        "controller": j.controller,
        "joint": j.joint,
        "status": j.status.value,
        "reason": j.verdict_reason,
        "indicator": j.indicator_name,
        "value": j.value,
        "unit": indicator_info(j.indicator_name).unit,
        "limits": {"watch": watch, "alert": alert},
        "error": j.error,
        "capture_path": j.capture_path,
        "result": None if j.result is None else j.result.to_dict(evidence=evidence),
        "trend": None if j.trend is None else j.trend.to_dict(),
        "history": [p.to_dict() for p in j.history],
    }
    if j.indicators:
        found["indicators"] = [s.to_dict() for s in j.indicators]
    return found


def report_to_dict(report: Report, evidence: bool = False) -> dict[str, Any]:
    counts = {s.value: 0 for s in Status}
    for j in report.joints:
        counts[j.status.value] += 1
    found = {
        "schema": REPORT_SCHEMA,
        "created_at": report.created_at_iso,
        "agent_version": report.agent_version,
        "host": report.host,
        "machines": list(report.machines),
        "summary": {"worst_status": report.worst_status.value, "counts": counts},
        "joints": [joint_to_dict(j, evidence) for j in report.joints],
    }
    if report.indicator_joints:
        found["indicator_joints"] = [joint_to_dict(j, evidence) for j in report.indicator_joints]
    return _json_safe(found)


def write_report(report: Report, directory: str | Path) -> tuple[Path, Path]:
    """Write report.json and report.html (each atomically) into `directory`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / "report.json", out / "report.html"
    text = json.dumps(report_to_dict(report), indent=2, allow_nan=False)
    atomic_write_text(json_path, text + "\n")
    atomic_write_text(html_path, render_html(report))
    return json_path, html_path


def _json_safe(value: Any) -> Any:
    if isinstance(value, float | np.floating):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_json_safe(v) for v in value]
    return value


# -- terminal table ----------------------------------------------------------------------------


def _printable(text: str) -> str:
    """No control characters reach the terminal (a joint name could hold escape sequences)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _columns(c: str) -> int:
    """Terminal columns of one character: wide East Asian 2, combining marks 0."""
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def _cell(text: str, width: int, right: bool = False) -> str:
    """`text` cut (with ...) and padded to exactly `width` terminal columns."""
    text = _printable(text)
    if sum(_columns(c) for c in text) > width:
        kept, used = [], 0
        for c in text:
            if used + _columns(c) > width - 3:
                break
            kept.append(c)
            used += _columns(c)
        text = "".join(kept) + "..."
    pad = " " * (width - sum(_columns(c) for c in text))
    return pad + text if right else text + pad


def reason_text(j: JointReport) -> str:
    """The verdict's reason, with the error when the reason does not already tell it."""
    if j.error and j.error not in j.verdict_reason:
        return f"error: {j.error}; {j.verdict_reason}"
    return j.verdict_reason


def short_reason(j: JointReport) -> str:
    """The reason in a few words for the terminal table (the value has its own column)."""
    if j.error:
        return f"error: {j.error}"
    info = indicator_info(j.indicator_name)
    watch, alert = j.limits
    if j.status is Status.ALERT and alert is not None:
        text = f">= alert {info.format(alert)}"
    elif j.status is Status.WATCH and watch is not None:
        text = f">= watch {info.format(watch)}"
    elif j.status is Status.OK and (watch is not None or alert is not None):
        text = f"< watch {info.format(watch)}" if watch is not None else (
            f"< alert {info.format(alert)}")
    else:
        text = j.verdict_reason
    # The next limit ahead: watch while OK, alert after that.
    fc = None
    if j.trend is not None:
        fc = j.trend.forecast_watch
        if fc is None or fc.reached or j.status is not Status.OK:
            fc = j.trend.forecast_alert
    if fc is not None and not fc.reached:
        high = "?" if fc.days_high is None else f"{fc.days_high:.0f}"
        text += f"; {fc.limit_name} in ~{fc.days:.0f} d ({fc.days_low:.0f}-{high})"
    if j.result is not None and not j.result.converged:
        text += "; fit not converged"
    return text


def value_text(j: JointReport) -> str:
    """Backlash in mrad, or the amplitude A when uncalibrated."""
    if j.value is None:
        return "-"
    info = indicator_info(j.indicator_name)
    prefix = "A " if j.indicator_name == "amplitude_rad_s" else ""
    return prefix + info.format(j.value)


def summary_table(report: Report, width: int = TABLE_WIDTH) -> str:
    """One screen: joint, backlash (or amplitude), status, short reason; at most `width` wide."""
    jw, vw, sw = 26, 16, 7
    rw = max(10, width - jw - vw - sw - 6)

    def row(a: str, b: str, c: str, d: str) -> str:
        return f"{_cell(a, jw)}  {_cell(b, vw, right=True)}  {_cell(c, sw)}  {_cell(d, rw)}"

    lines = [row("JOINT", "BACKLASH", "STATUS", "REASON"), "-" * min(width, jw + vw + sw + rw + 6)]
    for j in report.joints:
        lines.append(row(f"{j.controller}/{j.joint}", value_text(j), j.status.value.upper(),
                         short_reason(j)))
    for j in report.indicator_joints:
        text = ", ".join(f"{s.indicator} {_num(s.latest.value, '.4g', s.unit)}"
                         for s in j.indicators if s.latest is not None)
        lines.append(row(f"{j.controller}/{j.joint}", "-", "-", text))
    lines.append(_cell(f"worst: {report.worst_status.value.upper()}  ({len(report.joints)} joints)",
                       width))
    return "\n".join(line.rstrip() for line in lines)


# -- HTML --------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 64em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
.meta, .note { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status { font-weight: bold; padding: 0.1em 0.5em; border-radius: 0.3em; color: #fff; }
.s-ok { background: #2b8a3e; } .s-watch { background: #e8a200; color: #222; }
.s-alert { background: #c0392b; } .s-unknown { background: #777; }
.error { color: #c0392b; font-weight: bold; }
svg.plot { max-width: 100%; height: auto; display: block; margin: 0.5em 0; }
section.joint { margin-top: 2em; }
@media print {
  body { margin: 0; max-width: none; font-size: 10pt; }
  section.joint { break-inside: avoid; page-break-inside: avoid; }
  section.joint + section.joint { break-before: page; page-break-before: always; }
  .status, .s-ok, .s-watch, .s-alert, .s-unknown {
    -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  a { color: inherit; text-decoration: none; }
}
"""


def _e(value: object) -> str:
    return html.escape(clean_text(str(value)), quote=True)


def _badge(status: Status) -> str:
    return f'<span class="status s-{_e(status.value)}">{_e(status.value.upper())}</span>'


def _num(value: float | None, fmt: str = ".4g", unit: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:{fmt}}" + (f" {unit}" if unit else "")


def _summary_html(report: Report) -> str:
    rows = []
    for i, j in enumerate(report.joints):
        rows.append(
            f'<tr><td>{_e(j.controller)}</td><td><a href="#joint-{i}">{_e(j.joint)}</a></td>'
            f'<td class="num">{_e(value_text(j))}</td><td>{_badge(j.status)}</td>'
            f"<td>{_e(reason_text(j))}</td></tr>"
        )
    for i, j in enumerate(report.indicator_joints, len(report.joints)):
        shown = ", ".join(f"{s.indicator} {_num(s.latest.value, '.4g', s.unit)}"
                          for s in j.indicators if s.latest is not None)
        rows.append(
            f'<tr><td>{_e(j.controller)}</td><td><a href="#joint-{i}">{_e(j.joint)}</a></td>'
            f'<td class="num">-</td><td>-</td><td>{_e(shown)}</td></tr>'
        )
    return (
        "<table><thead><tr><th>controller</th><th>joint</th><th>value</th><th>status</th>"
        "<th>reason</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _signature_svg(r: BacklashResult) -> str:
    if r.time_s.size == 0:
        return '<p class="note">No evidence arrays in this result.</p>'
    # Two load turns show both gap closures readably; the whole capture is in the capture file.
    tf = r.params.get("Tf_s", 0.0)
    keep = r.time_s <= r.time_s[0] + 2.0 * tf if tf > 0 else np.ones(r.time_s.size, bool)
    turns = " (first two load turns)" if tf > 0 and not keep.all() else ""
    return line_plot(
        [Series("speed residual r(t)", r.time_s[keep], r.residual_rad_s[keep], color="#7f9fc7"),
         Series("fitted signature h(t)", r.time_s[keep], r.fitted_rad_s[keep], color="#d9730d")],
        title="Speed residual and fitted backlash signature" + turns,
        x_label="time [s]", y_label="speed [rad/s]", xmlns=False,
    )


def _trend_svg(j: JointReport) -> str:
    info = indicator_info(j.indicator_name)
    if not j.history:
        return '<p class="note">No history yet: the trend starts with the next cycle.</p>'
    days = days_since(j.history)
    values = np.array([p.value for p in j.history]) * info.scale
    series = [Series(f"{info.label} per cycle", days, values, markers=True)]
    if j.trend is not None:
        x_line = np.array([0.0, float(days[-1])])
        series.append(Series("Theil-Sen trend", x_line,
                             np.array([j.trend.line_at(x) for x in x_line]) * info.scale,
                             color="#555555", dashed=True))
    watch, alert = j.limits
    hlines = [HLine(v * info.scale, f"{name} limit", color)
              for v, name, color in ((watch, "watch", "#e8a200"), (alert, "alert", "#c0392b"))
              if v is not None]
    unit = f" [{info.display_unit}]" if info.display_unit else ""
    svg = line_plot(series, title=f"Trend of {info.label}",
                    x_label=f"days since {_when(j.history[0].time_iso)}",
                    y_label=f"{info.label}{unit}", hlines=hlines, xmlns=False)
    if j.trend is None:
        text = f"{len(j.history)} point(s): the trend needs at least 3 at different times."
    else:
        text = j.trend.describe()
    return svg + f'\n<p class="forecast">{_e(text)}</p>'


def _when(time_iso: str) -> str:
    try:
        return datetime.fromisoformat(time_iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return time_iso


def _diagnostics_html(j: JointReport) -> str:
    r = j.result
    rows: list[tuple[str, str]] = []
    if r is not None:
        rows += [
            ("amplitude A", _num(r.amplitude_rad_s, unit="rad/s")),
            ("backlash", "not calibrated" if r.backlash_rad is None
             else _num(r.backlash_rad * 1e3, ".4g", "mrad")),
            ("fit RMSE", _num(r.rmse_rad_s, unit="rad/s")),
            ("residual RMS before the fit", _num(r.residual_rms_rad_s, unit="rad/s")),
            ("explained share of the residual", _num(100 * r.explained_fraction, ".1f", "%")),
            ("evaluations / restarts", f"{r.evaluations} / {r.restarts}"),
            ("fit time", _num(r.fit_seconds, ".3g", "s")),
            ("converged", f"{'yes' if r.converged else 'no'} ({r.stop_reason})"),
            ("seed", str(r.seed)),
            ("load-turn period: metadata / estimated",
             f"{_num(r.period_metadata_s, '.5g', 's')} / {_num(r.period_estimated_s, '.5g', 's')}"),
            ("warnings", "; ".join(r.warnings) or "none"),
        ]
        rows += [(f"parameter {k}", _num(v, ".5g")) for k, v in sorted(r.params.items())]
    rows.append(("capture", j.capture_path or "n/a"))
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table class=\"diag\"><tbody>{body}</tbody></table>"


def _indicators_html(j: JointReport) -> str:
    """'Other indicators': a compact table and one small trend plot per indicator."""
    rows = []
    for s in j.indicators:
        slope = "n/a" if s.trend is None else _num(s.trend.slope_per_day, "+.3g", f"{s.unit}/day")
        latest = "n/a" if s.latest is None else _num(s.latest.value, ".5g", s.unit)
        rows.append(f"<tr><td>{_e(s.indicator)}</td><td class=\"num\">{_e(latest)}</td>"
                    f'<td class="num">{len(s.history)}</td><td class="num">{_e(slope)}</td></tr>')
    parts = [
        "<h3>Other indicators</h3>",
        '<table class="indicators"><thead><tr><th>indicator</th><th>latest</th><th>points</th>'
        "<th>trend per day</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>",
    ]
    for s in j.indicators:
        if len(s.history) < 2:
            continue  # one point is in the table; a plot of it says nothing more
        days = days_since(s.history)
        series = [Series(s.indicator, days, np.array([p.value for p in s.history]), markers=True)]
        if s.trend is not None:
            x = np.array([0.0, float(days[-1])])
            series.append(Series("Theil-Sen trend", x, np.array([s.trend.line_at(v) for v in x]),
                                 color="#555555", dashed=True))
        parts.append(line_plot(series, title=f"Trend of {s.indicator}", width=480, height=220,
                               x_label=f"days since {_when(s.history[0].time_iso)}",
                               y_label=f"{s.indicator} [{s.unit}]", xmlns=False))
    return "\n".join(parts)


def _joint_html(i: int, j: JointReport) -> str:
    if j.result is None and j.value is None and not j.history and j.indicators and not j.error:
        # Only other indicators: no backlash verdict to show.
        return "\n".join([
            f'<section class="joint" id="joint-{i}">',
            f"<h2>{_e(j.controller)} / {_e(j.joint)}</h2>",
            _indicators_html(j), "</section>",
        ])
    parts = [
        f'<section class="joint" id="joint-{i}">',
        f"<h2>{_e(j.controller)} / {_e(j.joint)} {_badge(j.status)}</h2>",
    ]
    if not (j.error and j.error in j.verdict_reason):
        parts.append(f'<p class="reason">{_e(j.verdict_reason)}</p>')
    if j.error:
        parts.append(f'<p class="error">Cycle failed: {_e(j.error)}</p>')
    if j.result is not None:
        parts.append(_signature_svg(j.result))
    parts.append(_trend_svg(j))
    parts.append(f"<h3>{'Fit diagnostics' if j.result is not None else 'Evidence'}</h3>")
    parts.append(_diagnostics_html(j))
    if j.indicators:
        parts.append(_indicators_html(j))
    parts.append("</section>")
    return "\n".join(parts)


def render_html(report: Report) -> str:
    """The whole report as one self-contained HTML page (also well-formed XML)."""
    machines = ", ".join(report.machines) or "none"
    head = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8"/>\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>\n'
        f"<title>Joint health report {_e(report.created_at_iso)}</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n"
    )
    header = (
        f"<h1>Joint health report</h1>\n<p class=\"meta\">Created {_e(report.created_at_iso)}"
        f" on {_e(report.host or 'unknown host')} by jha {_e(report.agent_version)}."
        f" Machines: {_e(machines)}. Worst status: {_badge(report.worst_status)}</p>\n"
    )
    summary = f"<h2>Summary</h2>\n{_summary_html(report)}\n"
    everyone = (*report.joints, *report.indicator_joints)
    joints = "\n".join(_joint_html(i, j) for i, j in enumerate(everyone))
    foot = (f'\n<p class="note">Report schema {_e(REPORT_SCHEMA)}; the same data is in '
            "report.json beside this file.</p>\n</body>\n</html>\n")
    return head + header + summary + joints + foot
