"""The report as one self-contained HTML page that also reads well printed.

No network and no JavaScript: inline CSS and inline SVG (in HTML5 an inline <svg> needs no
xmlns, so the page holds no URL at all). The markup is also well-formed XML, so a test can parse
it. Every text from config or data goes through _e (escaped, XML-invalid characters replaced).

Print: one machine per page run (a page break before each further machine), plots and tables
never cut across pages, and badges black on white with their text, so a grey-scale print loses
nothing that colour told.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from agent.estimation.backlash.result import BacklashResult
from agent.health.identification import JointIdentificationVerdict
from agent.health.status import Ne107, Status, TrendPoint
from agent.health.trend import Trend, days_since, next_forecast, passed_limit
from agent.health.verdicts import indicator_info
from agent.report.evidence import EvidencePlot
from agent.report.model import REPORT_SCHEMA, IndicatorSummary, JointReport, Report
from agent.report.svg import HLine, Series, clean_text, line_plot
from agent.report.table import (
    identification_value,
    num,
    others_text,
    reason_text,
    value_text,
)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 64em; color: #222;
       background: #fff; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.3em; border-bottom: 2px solid #333; padding-bottom: 0.2em; margin-top: 1.5em; }
h3 { font-size: 1.1em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
h4 { font-size: 1em; margin: 1em 0 0.3em; }
.meta, .note { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.badge { display: inline-block; font-weight: bold; padding: 0.1em 0.5em; border-radius: 0.3em;
         border: 1px solid transparent; white-space: nowrap; font-size: 0.85em; }
.status { color: #fff; }
.s-ok { background: #2b8a3e; } .s-watch { background: #e8a200; color: #222; }
.s-alert { background: #c0392b; } .s-unknown { background: #777; }
.ne107 { background: #fff; color: #222; border-color: #222; }
.ne-F { background: #c0392b; color: #fff; } .ne-C { background: #e67e22; color: #222; }
.ne-S { background: #f1c40f; color: #222; } .ne-M { background: #1f5fa8; color: #fff; }
.ne-N { background: #2b8a3e; color: #fff; }
.error { color: #c0392b; font-weight: bold; }
.forecast { font-style: italic; }
svg.plot { max-width: 100%; height: auto; display: block; margin: 0.5em 0; }
figure { margin: 0.5em 0; }
section.joint { margin-top: 1.5em; }
@page { margin: 12mm; }
@media print {
  body { margin: 0; max-width: none; font-size: 10pt; color: #000; }
  section.machine + section.machine { break-before: page; page-break-before: always; }
  figure, svg.plot, table, tr, p.forecast { break-inside: avoid; page-break-inside: avoid; }
  h2, h3, h4 { break-after: avoid; page-break-after: avoid; }
  .badge, .status, .ne107, .s-ok, .s-watch, .s-alert, .s-unknown,
  .ne-F, .ne-C, .ne-S, .ne-M, .ne-N {
    background: #fff !important; color: #000 !important; border: 1.5pt solid #000; }
  .error { color: #000; }
  a { color: inherit; text-decoration: none; }
}
"""

_NE107_TEXT = {
    Ne107.NORMAL: "normal",
    Ne107.MAINTENANCE_REQUIRED: "maintenance required",
    Ne107.OUT_OF_SPECIFICATION: "out of specification",
    Ne107.FAILURE: "failure",
    Ne107.CHECK_FUNCTION: "check function",
}


def _e(value: object) -> str:
    return html.escape(clean_text(str(value)), quote=True)


def _badge(status: Status) -> str:
    return f'<span class="badge status s-{_e(status.value)}">{_e(status.value.upper())}</span>'


def _ne107_letter(signal: Ne107) -> str:
    """The NE 107 badge with the letter only, for narrow table cells."""
    return (
        f'<span class="badge ne107 ne-{signal.letter}" title="NAMUR NE 107: '
        f'{_NE107_TEXT[signal]}">{signal.letter}</span>'
    )


def _ne107_badge(signal: Ne107) -> str:
    return (
        f'<span class="badge ne107 ne-{signal.letter}" title="NAMUR NE 107">'
        f"NE 107 {signal.letter}: {_NE107_TEXT[signal]}</span>"
    )


def _when(time_iso: str) -> str:
    try:
        return datetime.fromisoformat(time_iso).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return time_iso


def _unit(indicator: str, stored_unit: str = "") -> tuple[float, str]:
    """(scale, unit) to show an indicator in: its display unit, else the stored SI unit."""
    info = indicator_info(indicator)
    return (info.scale, info.display_unit) if info.display_unit else (1.0, stored_unit)


# -- plots -------------------------------------------------------------------------------------


def trend_svg(
    history: Sequence[TrendPoint],
    tr: Trend | None,
    indicator: str,
    limits: tuple[float | None, float | None] = (None, None),
    stored_unit: str = "",
    small: bool = False,
    passed: str | None = None,
) -> str:
    """Points per cycle, the Theil-Sen line, the limits, and the line on to the next limit."""
    info = indicator_info(indicator)
    scale, unit = _unit(indicator, stored_unit)
    days = days_since(history)
    values = np.array([p.value for p in history]) * scale
    series = [Series(f"{info.label} per cycle", days, values, markers=True)]
    if tr is not None:
        # The line is drawn over the points it was fitted to: after a change of slope, from
        # the break on (Trend.basis), so the plot shows which regime the forecast follows.
        start = float(days_since([history[0], TrendPoint(tr.first_time_iso, 0.0)])[1])
        x_line = np.array([start, float(days[-1])])
        label = (
            "Theil-Sen trend"
            if tr.basis != "since_break"
            else f"Theil-Sen trend since {tr.since_text()} (slope changed)"
        )
        series.append(
            Series(
                label,
                x_line,
                np.array([tr.line_at(x - start) for x in x_line]) * scale,
                color="#555555",
                dashed=True,
            )
        )
        fc = next_forecast(tr, passed)
        if fc is not None:
            # Up to the crossing when it is near, else as far ahead as the history reaches back
            # (a line to a crossing years away would squash the measured part of the plot).
            ahead = min(fc.days, max(tr.span_days, 1.0))
            x_fc = np.array([float(days[-1]), float(days[-1]) + ahead])
            series.append(
                Series(
                    f"forecast: {fc.limit_name} limit in {fc.days:.3g} days",
                    x_fc,
                    np.array([tr.line_at(x - start) for x in x_fc]) * scale,
                    color="#8e44ad",
                    dashed=True,
                )
            )
    watch, alert = limits
    hlines = [
        HLine(v * scale, f"{name} limit", color)
        for v, name, color in ((watch, "watch", "#e8a200"), (alert, "alert", "#c0392b"))
        if v is not None
    ]
    return line_plot(
        series,
        title=f"Trend of {info.label}",
        x_label=f"days since {_when(history[0].time_iso)}",
        y_label=f"{info.label} [{unit}]" if unit else info.label,
        hlines=hlines,
        xmlns=False,
        width=480 if small else 720,
        height=220 if small else 300,
    )


def signature_svg(r: BacklashResult) -> str:
    if r.time_s.size == 0:
        return '<p class="note">No evidence arrays in this result.</p>'
    # Two load turns show both gap closures readably; the whole capture is in the capture file.
    tf = r.params.get("Tf_s", 0.0)
    keep = r.time_s <= r.time_s[0] + 2.0 * tf if tf > 0 else np.ones(r.time_s.size, bool)
    turns = " (first two load turns)" if tf > 0 and not keep.all() else ""
    return line_plot(
        [
            Series("speed residual r(t)", r.time_s[keep], r.residual_rad_s[keep], color="#7f9fc7"),
            Series("fitted signature h(t)", r.time_s[keep], r.fitted_rad_s[keep], color="#d9730d"),
        ],
        title="Speed residual and fitted backlash signature" + turns,
        x_label="time [s]",
        y_label="speed [rad/s]",
        xmlns=False,
    )


def evidence_svg(plot: EvidencePlot) -> str:
    """Any evidence plot (e.g. measured vs predicted torque): one line per series."""
    if not plot.series:
        return f'<p class="note">{_e(plot.title)}: no data.</p>'
    return line_plot(
        [Series(s.label, s.x, s.y) for s in plot.series],
        title=plot.title,
        x_label=plot.x_label,
        y_label=plot.y_label,
        xmlns=False,
    )


def _figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


# -- tables ------------------------------------------------------------------------------------


def _summary_html(everyone: tuple[JointReport, ...]) -> str:
    rows = []
    for i, j in enumerate(everyone):
        link = f'<a href="#joint-{i}">{_e(j.joint)}</a>'
        v = j.identification
        if j.indicator_only and v is None:
            cells = f'<td class="num">-</td><td>-</td><td>-</td><td>{_e(others_text(j))}</td>'
        elif not j.indicator_only:
            cells = (
                f'<td class="num">{_e(value_text(j))}</td><td>{_badge(j.status)}</td>'
                f"<td>{_ne107_badge(j.signal)}</td><td>{_e(reason_text(j))}</td>"
            )
        if not (j.indicator_only and v is not None):
            rows.append(f"<tr><td>{_e(j.controller)}</td><td>{link}</td>{cells}</tr>")
        if v is not None:
            what = "" if j.indicator_only else " <small>(identification)</small>"
            rows.append(
                f"<tr><td>{_e(j.controller)}</td><td>{link}{what}</td>"
                f'<td class="num">{_e(identification_value(v))}</td><td>{_badge(v.status)}</td>'
                f"<td>{_ne107_badge(v.ne107)}</td><td>{_e(v.reason)}</td></tr>"
            )
    return (
        '<table class="summary"><thead><tr><th>machine</th><th>joint</th><th>value</th>'
        "<th>status</th><th>NE 107</th><th>reason</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _indicator_row(
    name: str,
    stored_unit: str,
    latest: float | None,
    n_points: int,
    tr: Trend | None,
    limits: tuple[float | None, float | None],
    passed: str | None = None,
) -> str:
    info = indicator_info(name)
    scale, unit = _unit(name, stored_unit)

    def shown(v: float | None, fmt: str = ".4g") -> str:
        return "-" if v is None else num(v * scale, fmt, unit)

    slope = "n/a" if tr is None else num(tr.slope_per_day * scale, "+.3g", f"{unit}/day")
    fc = next_forecast(tr, passed)
    ahead = "-" if fc is None else f"{fc.limit_name} in {fc.days:.3g} d"
    cells = [
        info.label,
        shown(latest),
        shown(limits[0]),
        shown(limits[1]),
        slope,
        ahead,
        str(n_points),
    ]
    tds = "".join(f'<td class="num">{_e(c)}</td>' for c in cells[1:])
    return f"<tr><td>{_e(cells[0])} <small>({_e(name)})</small></td>{tds}</tr>"


def _indicators_table(j: JointReport) -> str:
    rows = []
    if not j.indicator_only:
        rows.append(
            _indicator_row(
                j.indicator_name,
                indicator_info(j.indicator_name).unit,
                j.value,
                len(j.history),
                j.trend,
                j.limits,
                passed_limit(j.status),
            )
        )
    for s in j.indicators:
        v = s.verdict
        rows.append(
            _indicator_row(
                s.indicator,
                s.unit,
                None if s.latest is None else s.latest.value,
                len(s.history),
                s.trend if v is None else v.trend,
                (None, None) if v is None else (v.watch, v.alert),
                None if v is None else passed_limit(v.status),
            )
        )
    return (
        '<table class="indicators"><thead><tr><th>indicator</th><th>latest</th>'
        "<th>watch limit</th><th>alert limit</th><th>trend per day</th><th>next limit</th>"
        "<th>points</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _diagnostics_html(j: JointReport) -> str:
    r = j.result
    rows: list[tuple[str, str]] = []
    if r is not None:
        rows += [
            ("amplitude A", num(r.amplitude_rad_s, unit="rad/s")),
            (
                "backlash",
                "not calibrated"
                if r.backlash_rad is None
                else num(r.backlash_rad * 1e3, ".4g", "mrad"),
            ),
            ("fit RMSE", num(r.rmse_rad_s, unit="rad/s")),
            ("residual RMS before the fit", num(r.residual_rms_rad_s, unit="rad/s")),
            ("explained share of the residual", num(100 * r.explained_fraction, ".1f", "%")),
            ("evaluations / restarts", f"{r.evaluations} / {r.restarts}"),
            ("fit time", num(r.fit_seconds, ".3g", "s")),
            ("converged", f"{'yes' if r.converged else 'no'} ({r.stop_reason})"),
            ("seed", str(r.seed)),
            (
                "load-turn period: metadata / estimated",
                f"{num(r.period_metadata_s, '.5g', 's')} / {num(r.period_estimated_s, '.5g', 's')}",
            ),
            ("warnings", "; ".join(r.warnings) or "none"),
        ]
        rows += [(f"parameter {k}", num(v, ".5g")) for k, v in sorted(r.params.items())]
    if j.outcome is not None:
        rows.append(("last cycle", j.outcome))
    rows.append(("capture", j.capture_path or "n/a"))
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="diag"><tbody>{body}</tbody></table>'


def _other_trends(indicators: tuple[IndicatorSummary, ...]) -> list[str]:
    # One point is in the table already; a plot of it says nothing more.
    return [
        _figure(
            trend_svg(
                s.history,
                s.trend if s.verdict is None else s.verdict.trend,
                s.indicator,
                stored_unit=s.unit,
                small=True,
                limits=(None, None) if s.verdict is None else (s.verdict.watch, s.verdict.alert),
                passed=None if s.verdict is None else passed_limit(s.verdict.status),
            )
        )
        for s in indicators
        if len(s.history) >= 2
    ]


def _identification_html(v: JointIdentificationVerdict) -> str:
    """The identification verdict of a joint: each indicator against its baseline, then the
    reason of each one that is not OK."""
    rows, notes = [], []
    for w in v.indicators:
        info = indicator_info(w.indicator)
        base = "-" if w.baseline is None else info.format(w.baseline.value, 4)
        source = "" if w.baseline is None else f"<br/><small>{_e(w.baseline.describe())}</small>"
        if w.change is None or w.sigma is None:
            change = f"baseline {w.n_points} of {w.needed}" if w.baseline is None else "-"
        else:
            moved = (
                f"x{w.change + 1:.3g}" if w.limits.kind == "ratio" else f"{100 * w.change:+.3g} %"
            )
            change = f"{moved} (1 sd {100 * w.sigma:.2g} %)"
        limits = f"{w.limits.text(w.limits.watch)} / {w.limits.text(w.limits.alert)}"
        fc = w.forecast
        ahead = "-" if fc is None else f"{fc.limit_name} in {fc.days:.3g} d"
        rows.append(
            f'<tr><td>{_e(info.label)}</td><td class="num">{_e(info.format(w.value, 4))}</td>'
            f'<td class="num">{_e(base)}{source}</td>'
            + "".join(f'<td class="num">{_e(c)}</td>' for c in (change, limits, ahead))
            + f"<td>{_badge(w.status)} {_ne107_letter(w.ne107)}</td></tr>"
        )
        if w.status is not Status.OK or "within the noise" in w.reason:
            notes.append(f"<li>{_e(w.reason)}</li>")
    return "\n".join(
        [
            f"<h4>Identification verdict {_badge(v.status)} {_ne107_badge(v.ne107)}</h4>",
            f'<p class="reason">{_e(v.reason)}</p>',
            f'<p class="forecast">{_e(v.forecast_text)}</p>',
            '<table class="identification"><thead><tr><th>indicator</th><th>latest</th>'
            "<th>baseline</th><th>change</th><th>watch / alert</th><th>next limit</th>"
            "<th>status</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>",
            *([f'<ul class="reasons">{"".join(notes)}</ul>'] if notes else []),
        ]
    )


# -- sections ----------------------------------------------------------------------------------


def _joint_html(anchor: str, j: JointReport) -> str:
    ident = [] if j.identification is None else [_identification_html(j.identification)]
    if j.indicator_only:
        badges = "" if j.identification is None else f" {_badge(j.status)} {_ne107_badge(j.signal)}"
        verdict = (
            "indicators only, no verdict."
            if j.identification is None
            else "the verdict is the identification's."
        )
        return "\n".join(
            [
                f'<section class="joint" id="{anchor}">',
                f"<h3>{_e(j.joint)} <small>({_e(j.controller)})</small>{badges}</h3>",
                f'<p class="note">No backlash cycle recorded: {verdict}</p>',
                *ident,
                "<h4>Indicators</h4>",
                _indicators_table(j),
                *_other_trends(tuple(j.indicators)),
                *(_figure(evidence_svg(p)) for p in j.evidence),
                "</section>",
            ]
        )
    parts = [
        f'<section class="joint" id="{anchor}">',
        f"<h3>{_e(j.joint)} <small>({_e(j.controller)})</small> {_badge(j.status)} "
        f"{_ne107_badge(j.signal)}</h3>",
    ]
    if not (j.error and j.error in j.verdict_reason):
        parts.append(f'<p class="reason">{_e(j.verdict_reason)}</p>')
    if j.error:
        parts.append(f'<p class="error">Cycle failed: {_e(j.error)}</p>')
    parts.append(f'<p class="forecast">{_e(j.forecast)}</p>')
    parts += [*ident, "<h4>Indicators</h4>", _indicators_table(j)]
    if j.history:
        parts.append(
            _figure(
                trend_svg(
                    j.history, j.trend, j.indicator_name, j.limits, passed=passed_limit(j.status)
                )
            )
        )
    else:
        parts.append('<p class="note">No history yet: the trend starts with the next cycle.</p>')
    parts += _other_trends(tuple(j.indicators))
    if j.result is not None or j.evidence:
        parts.append("<h4>Evidence</h4>")
    if j.result is not None:
        parts.append(_figure(signature_svg(j.result)))
    parts += [_figure(evidence_svg(p)) for p in j.evidence]
    parts.append(f"<h4>{'Fit diagnostics' if j.result is not None else 'Cycle'}</h4>")
    parts.append(_diagnostics_html(j))
    parts.append("</section>")
    return "\n".join(parts)


def _machines(report: Report) -> list[str]:
    """The report's machines, then any controller of a joint that the list lacks."""
    found = list(dict.fromkeys(report.machines))
    for j in (*report.joints, *report.indicator_joints):
        if j.controller not in found:
            found.append(j.controller)
    return found


def render_html(report: Report) -> str:
    """The whole report as one self-contained HTML page (also well-formed XML)."""
    everyone = (*report.joints, *report.indicator_joints)
    machines = _machines(report)
    head = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8"/>\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>\n'
        f"<title>Joint health report {_e(report.created_at_iso)}</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n"
    )
    worst_ident = report.identification_worst
    ident_worst = (
        "" if worst_ident is None else f"; identification indicators: {_badge(worst_ident)}"
    )
    header = (
        f'<h1>Joint health report</h1>\n<p class="meta">Created {_e(report.created_at_iso)}'
        f" on {_e(report.host or 'unknown host')} by jha {_e(report.agent_version)}."
        f" Machines: {_e(', '.join(machines) or 'none')}. Worst status: "
        f"{_badge(report.worst_status)}{ident_worst}</p>\n"
    )
    summary = f"<h2>Summary</h2>\n{_summary_html(everyone)}\n"
    sections = []
    for i, machine in enumerate(machines):
        body = "\n".join(
            _joint_html(f"joint-{k}", j) for k, j in enumerate(everyone) if j.controller == machine
        )
        sections.append(
            f'<section class="machine" id="machine-{i}">\n'
            f"<h2>Machine {_e(machine)}</h2>\n"
            + (body or '<p class="note">No joint of this machine in the history.</p>')
            + "\n</section>"
        )
    foot = (
        f'\n<p class="note">Report {_e(report.message_id)}, schema {_e(REPORT_SCHEMA)}; the '
        "same data is in report.json beside this file.</p>\n</body>\n</html>\n"
    )
    return head + header + summary + "\n".join(sections) + foot
