"""The report as a terminal table: one screen, one line per joint, at most TABLE_WIDTH columns.

Every text from config or data is made printable first: a joint name could hold escape
sequences that would otherwise drive the operator's terminal.
"""

from __future__ import annotations

import math
import unicodedata

from agent.health.display import indicator_info
from agent.health.identification.joint import JointIdentificationVerdict
from agent.health.status import Status
from agent.report.action import by_severity
from agent.report.model import JointReport, Report

TABLE_WIDTH = 100
# Identification indicators in the table's few columns (the symbols of Zollo, Lopez et al. 2014
# and Madsen et al. 2020).
_SHORT = {
    "coulomb_friction_nm": "fc",
    "viscous_friction_nm_s_rad": "fv",
    "stiffness_nm_rad": "k",
    "torque_nmse_nm": "NMSE",
}


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


def num(value: float | None, fmt: str = ".4g", unit: str = "") -> str:
    """A number with its unit, or n/a."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:{fmt}}" + (f" {unit}" if unit else "")


def reason_text(j: JointReport) -> str:
    """The verdict's reason, with the error when the reason does not already tell it."""
    if j.error and j.error not in j.verdict_reason:
        return f"error: {j.error}; {j.verdict_reason}"
    return j.verdict_reason


DRY_RUN = "dry_run"  # agent.history.records.Outcome.DRY_RUN (the report layer reads no store)


def status_text(j: JointReport) -> str:
    """The STATUS column: a dry run is no verdict, and says so in the column of its own."""
    return "DRY RUN" if j.outcome == DRY_RUN else j.status.value.upper()


def short_reason(j: JointReport) -> str:
    """The reason in a few words for the terminal table (the value has its own column)."""
    if j.outcome == DRY_RUN:
        return (j.error or "").removeprefix("dry run: ") or "interlocks checked, nothing moved"
    if j.error:
        return f"error: {j.error}"
    info = indicator_info(j.indicator_name)
    watch, alert = j.limits
    if j.status is Status.ALERT and alert is not None:
        text = f">= alert {info.format(alert)}"
    elif j.status is Status.WATCH and watch is not None:
        text = f">= watch {info.format(watch)}"
    elif j.status is Status.OK and (watch is not None or alert is not None):
        text = (
            f"< watch {info.format(watch)}"
            if watch is not None
            else (f"< alert {info.format(alert)}")
        )
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
    if j.ambiguous:  # first: the value column's number is one of several equally good ones
        text = "ambiguous fit; " + text
    return text


def value_text(j: JointReport) -> str:
    """Backlash in mrad, or the amplitude A when uncalibrated; then its 95 % interval in the
    same unit, when the estimate came with one."""
    if j.value is None:
        return "-"
    info = indicator_info(j.indicator_name)
    prefix = "A " if j.indicator_name == "amplitude_rad_s" else ""
    text = prefix + info.format(j.value)
    if j.interval is not None:
        lo, hi = (v * info.scale for v in j.interval)
        text += f" ({lo:.3g}-{hi:.3g})"
    return text


def others_text(j: JointReport) -> str:
    """The further indicators' latest values, for a joint that has no verdict (the terminal
    table's short form, by the names the JSON and the MQTT payloads use)."""
    return ", ".join(
        f"{s.indicator} {num(s.latest.value, '.4g', s.unit)}"
        for s in j.indicators
        if s.latest is not None
    )


def others_words(j: JointReport) -> str:
    """others_text in words for the page: labels and display units, no field names."""
    return ", ".join(
        f"{indicator_info(s.indicator).label} {_shown(s.indicator, s.latest.value, s.unit)}"
        for s in j.indicators
        if s.latest is not None
    )


def _shown(indicator: str, value: float, stored_unit: str) -> str:
    info = indicator_info(indicator)
    if info.display_unit:
        return num(value * info.scale, ".4g", info.display_unit)
    return num(value, ".4g", stored_unit)


def identification_value(v: JointIdentificationVerdict) -> str:
    """The worst identification indicator's change on its baseline, e.g. 'fc +70 %'."""
    w = v.worst
    short = _SHORT.get(w.indicator, w.indicator)
    if w.change is None:
        return f"{short} {indicator_info(w.indicator).format(w.value)}"
    if w.limits.kind == "ratio":
        return f"{short} x{w.change + 1.0:.3g}"
    return f"{short} {100 * w.change:+.3g} %"


def identification_reason(v: JointIdentificationVerdict) -> str:
    """The identification verdict in a few words: each indicator past a limit, then when the
    next limit comes."""
    parts = []
    for w in v.indicators:
        if w.failure is not None:
            parts.append(f"error: {w.failure}")
            break
        if w.status in (Status.WATCH, Status.ALERT):
            limit = w.limits.alert if w.status is Status.ALERT else w.limits.watch
            past = ">=" if w.limits.direction == "rise" else "<="
            parts.append(
                f"{_SHORT.get(w.indicator, w.indicator)} {past} {w.status.value} "
                f"{w.limits.text(limit)}"
            )
    if not parts:
        unset = [w for w in v.indicators if w.baseline is None]
        if unset:
            parts.append(f"baseline {unset[0].n_points} of {unset[0].needed} identifications")
        elif v.status is Status.OK:
            parts.append("within limits")
        else:
            parts.append(v.reason)
    soon = v.forecast
    fc = None if soon is None else soon.forecast
    if soon is not None and fc is not None:
        high = "?" if fc.days_high is None else f"{fc.days_high:.0f}"
        parts.append(
            f"{_SHORT.get(soon.indicator, soon.indicator)} {fc.limit_name} in "
            f"~{fc.days:.0f} d ({fc.days_low:.0f}-{high})"
        )
    return "; ".join(parts)


def summary_table(report: Report, width: int = TABLE_WIDTH) -> str:
    """One screen: joint, backlash (or amplitude) with its 95 % interval, status, NE 107
    letter, short reason; at most `width` wide. A joint with identification indicators gets a
    line for their verdict (`<joint> ident`), whose value is the worst indicator's change on
    its baseline."""
    # The value column is as wide as its widest cell (intervals need 22), so a table without
    # intervals keeps its width for the reasons.
    values = [value_text(j) for j in report.joints]
    jw, vw, sw, nw = 24, min(22, max([16, *map(len, values)])), 7, 2
    rw = max(10, width - jw - vw - sw - nw - 8)

    def row(a: str, b: str, c: str, n: str, d: str) -> str:
        return (
            f"{_cell(a, jw)}  {_cell(b, vw, right=True)}  {_cell(c, sw)}  {_cell(n, nw)}  "
            f"{_cell(d, rw)}"
        )

    lines = [
        row("JOINT", "BACKLASH", "STATUS", "NE", "REASON"),
        "-" * min(width, jw + vw + sw + nw + rw + 8),
    ]
    for j in by_severity(report.joints):
        lines.append(
            row(
                f"{j.controller}/{j.joint}",
                value_text(j),
                status_text(j),
                j.signal.letter,
                short_reason(j),
            )
        )
        if j.identification is not None:
            iv = j.identification
            lines.append(
                row(
                    f"{j.controller}/{j.joint} ident",
                    identification_value(iv),
                    iv.status.value.upper(),
                    iv.ne107.letter,
                    identification_reason(iv),
                )
            )
    for j in report.indicator_joints:
        v = j.identification
        if v is None:
            lines.append(row(f"{j.controller}/{j.joint}", "-", "-", "-", others_text(j)))
        else:
            why = identification_reason(v)
            if v.status is Status.UNKNOWN:  # nothing judged yet: what there is, then why
                why = f"{others_text(j)}; {why}"
            lines.append(
                row(
                    f"{j.controller}/{j.joint} ident",
                    identification_value(v),
                    v.status.value.upper(),
                    v.ne107.letter,
                    why,
                )
            )
    worst_line = f"worst: {report.worst_status.value.upper()}  ({len(report.joints)} joints)"
    ident = report.identification_worst
    if ident is not None:
        worst_line += (
            f"; identification: {ident.value.upper()}  "
            f"({len(report.identification_verdicts)} joints)"
        )
    lines.append(_cell(worst_line, width))
    return "\n".join(line.rstrip() for line in lines)
