"""The report as one self-contained HTML page that also reads well printed: the page's head and
style, the summary table, and one section per machine with its joints
(agent.report.html.joint).

No network and no JavaScript: inline CSS and inline SVG (in HTML5 an inline <svg> needs no
xmlns, so the page holds no URL at all). The markup is also well-formed XML, so a test can parse
it.

Print: one machine per page run (a page break before each further machine), plots and tables
never cut across pages, and badges black on white with their text, so a grey-scale print loses
nothing that colour told.
"""

from __future__ import annotations

from agent.health.display import indicator_info
from agent.health.identification.baseline import LimitKind
from agent.health.identification.joint import JointIdentificationVerdict
from agent.report.action import by_severity, recommend
from agent.report.html.joint import joint_section
from agent.report.html.markup import badge, dry_run_badge, esc, ne107_badge
from agent.report.model import REPORT_SCHEMA, JointReport, Report
from agent.report.table import DRY_RUN, others_words, reason_text, value_text
from agent.report.words import joint_words

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
.s-dry { background: #3f51b5; }
ul.warnings li { color: #8a5300; }
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
  .badge, .status, .ne107, .s-ok, .s-watch, .s-alert, .s-unknown, .s-dry,
  .ne-F, .ne-C, .ne-S, .ne-M, .ne-N {
    background: #fff !important; color: #000 !important; border: 1.5pt solid #000; }
  .error { color: #000; }
  a { color: inherit; text-decoration: none; }
}
"""


def identification_value(v: JointIdentificationVerdict) -> str:
    """The worst identification indicator's change on its baseline, in words: 'viscous
    friction +40 %' (the terminal table's short symbols are for 100 columns)."""
    w = v.worst
    info = indicator_info(w.indicator)
    if w.change is None:
        return f"{info.label} {info.format(w.value)}"
    if w.limits.kind == LimitKind.RATIO:
        return f"{info.label} x{w.change + 1.0:.3g}"
    return f"{info.label} {100 * w.change:+.2g} %"


def _summary_html(everyone: tuple[JointReport, ...]) -> str:
    rows = []
    for i, j in enumerate(everyone):
        link = f'<a href="#joint-{i}">{esc(j.joint)}</a>'
        v = j.identification
        if j.indicator_only and v is None:
            cells = (
                '<td class="num">-</td><td>-</td><td>-</td><td>-</td>'
                f'<td class="reason">{esc(others_words(j))}</td>'
            )
        elif not j.indicator_only:
            status = dry_run_badge() if j.outcome == DRY_RUN else badge(j.status)
            cells = (
                f'<td class="num">{esc(value_text(j))}</td><td class="status">{status}</td>'
                f"<td>{ne107_badge(j.signal)}</td>"
                f'<td class="action">{esc(j.recommendation.action)}</td>'
                f'<td class="reason">{esc(reason_text(j))}</td>'
            )
        if not (j.indicator_only and v is not None):
            rows.append(f"<tr><td>{esc(j.controller)}</td><td>{link}</td>{cells}</tr>")
        if v is not None:
            what = "" if j.indicator_only else " <small>(identification)</small>"
            # an indicator-only joint's recommendation is its identification verdict's
            action = j.recommendation.action if j.indicator_only else _ident_action(v)
            rows.append(
                f"<tr><td>{esc(j.controller)}</td><td>{link}{what}</td>"
                f'<td class="num">{esc(identification_value(v))}</td>'
                f'<td class="status">{badge(v.status)}</td>'
                f'<td>{ne107_badge(v.ne107)}</td><td class="action">{esc(action)}</td>'
                f'<td class="reason">{esc(joint_words(v))}</td></tr>'
            )
    return (
        '<table class="summary"><thead><tr><th>machine</th><th>joint</th><th>value</th>'
        "<th>status</th><th>NE 107</th><th>action</th><th>reason</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _ident_action(v: JointIdentificationVerdict) -> str:
    """What to do about a joint's identification verdict (agent.report.action's words)."""
    return recommend(v.status, v.ne107, None, reason=joint_words(v)).action


def _warnings_html(report: Report) -> str:
    """The estimator's warnings (what `jha identify` printed), and what was judged against."""
    parts = []
    if report.basis:
        parts.append(f'<p class="note basis">{esc(report.basis)}</p>')
    if report.warnings:
        items = "".join(f"<li>{esc(w)}</li>" for w in report.warnings)
        parts.append(f'<h2>Warnings</h2>\n<ul class="warnings">{items}</ul>')
    return "\n".join(parts) + ("\n" if parts else "")


def _machines(report: Report) -> list[str]:
    """The report's machines, then any controller of a joint that the list lacks."""
    found = list(dict.fromkeys(report.machines))
    for j in (*report.joints, *report.indicator_joints):
        if j.controller not in found:
            found.append(j.controller)
    return found


def render_html(report: Report, json_beside: bool = False) -> str:
    """The whole report as one self-contained HTML page (also well-formed XML). `json_beside`:
    the writer puts report.json next to it (agent.report.write), and the footer says so."""
    # the joint to act on first comes first, in the summary and in each machine's section
    everyone = tuple(by_severity((*report.joints, *report.indicator_joints)))
    machines = _machines(report)
    head = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8"/>\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>\n'
        f"<title>Joint health report {esc(report.created_at_iso)}</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n"
    )
    worst_ident = report.identification_worst
    if not report.joints and worst_ident is not None:
        # Identification only (jha identify --html): no backlash verdict to call the worst.
        worst = f"Worst identification status: {badge(worst_ident)}"
    else:
        ident_worst = (
            "" if worst_ident is None else f"; identification indicators: {badge(worst_ident)}"
        )
        worst = f"Worst status: {badge(report.worst_status)}{ident_worst}"
    header = (
        f'<h1>Joint health report</h1>\n<p class="meta">Created {esc(report.created_at_iso)}'
        f" on {esc(report.host or 'unknown host')} by jha {esc(report.agent_version)}."
        f" Machines: {esc(', '.join(machines) or 'none')}. {worst}</p>\n"
    )
    summary = f"<h2>Summary</h2>\n{_summary_html(everyone)}\n{_warnings_html(report)}"
    sections = []
    for i, machine in enumerate(machines):
        body = "\n".join(
            joint_section(f"joint-{k}", j)
            for k, j in enumerate(everyone)
            if j.controller == machine
        )
        sections.append(
            f'<section class="machine" id="machine-{i}">\n'
            f"<h2>Machine {esc(machine)}</h2>\n"
            + (body or '<p class="note">No joint of this machine in the history.</p>')
            + "\n</section>"
        )
    beside = "; the same data is in report.json beside this file" if json_beside else ""
    foot = (
        f'\n<p class="note">Report {esc(report.message_id)}, schema {esc(REPORT_SCHEMA)}'
        f"{beside}.</p>\n</body>\n</html>\n"
    )
    return head + header + summary + "\n".join(sections) + foot
