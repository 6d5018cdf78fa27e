"""One joint's section of the report page: its verdict, the identification verdict, the table
of its indicators, their trend plots, the evidence and the fit diagnostics."""

from __future__ import annotations

from typing import Any

from agent.health.display import indicator_info
from agent.health.identification.baseline import LimitKind
from agent.health.identification.joint import JointIdentificationVerdict
from agent.health.status import Status
from agent.health.trend import LimitName, Trend, next_forecast, passed_limit
from agent.report.html.markup import (
    badge,
    display_unit,
    dry_run_badge,
    esc,
    figure,
    ne107_badge,
    ne107_letter,
)
from agent.report.html.plots import evidence_svg, signature_svg, trend_svg
from agent.report.model import IndicatorSummary, JointReport
from agent.report.table import DRY_RUN, num
from agent.report.words import joint_words, verdict_words


def _indicator_row(
    name: str,
    stored_unit: str,
    latest: float | None,
    n_points: int,
    tr: Trend | None,
    limits: tuple[float | None, float | None],
    passed: LimitName | None = None,
    interval: tuple[float, float] | None = None,
) -> str:
    info = indicator_info(name)
    scale, unit = display_unit(name, stored_unit)

    def shown(v: float | None, fmt: str = ".4g") -> str:
        return "-" if v is None else num(v * scale, fmt, unit)

    latest_text = shown(latest)
    if interval is not None and latest is not None:
        latest_text += f" (95 %: {interval[0] * scale:.3g}-{interval[1] * scale:.3g})"

    # A rate per day from minutes of history is noise made to look like a finding (issue 16
    # point 7): the forecast sentence says why there is none, and so does this cell.
    if tr is None:
        slope = "n/a"
    elif tr.forecast_withheld:
        slope = "not enough history"
    else:
        slope = num(tr.slope_per_day * scale, "+.3g", f"{unit}/day")
    fc = next_forecast(tr, passed)
    ahead = "-" if fc is None else f"{fc.limit_name} in {fc.days:.3g} d"
    cells = [
        info.label,
        latest_text,
        shown(limits[0]),
        shown(limits[1]),
        slope,
        ahead,
        str(n_points),
    ]
    tds = "".join(f'<td class="num">{esc(c)}</td>' for c in cells[1:])
    # The JSON field name is for whoever matches the page to report.json: a tooltip, not text.
    return f'<tr><td title="{esc(name)}">{esc(cells[0])}</td>{tds}</tr>'


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
                j.interval,
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
            (
                "amplitude A",
                num(r.amplitude_rad_s, unit="rad/s") + _band(r.amplitude_interval_rad_s),
            ),
            (
                "backlash",
                "not calibrated"
                if r.backlash_rad is None
                else num(r.backlash_rad * 1e3, ".4g", "mrad") + _band(r.backlash_interval_rad, 1e3),
            ),
            *_uncertainty_rows(r.uncertainty, r.ambiguous),
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
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    # Folded: a planner reads the verdict, the action and the trend; the raw fit is for whoever
    # checks the estimate.
    return (
        f'<details class="diag"><summary>Fit details ({len(rows)} values)</summary>'
        f'<table class="diag"><tbody>{body}</tbody></table></details>'
    )


def _band(pair: tuple[float, float] | None, scale: float = 1.0) -> str:
    return "" if pair is None else f" (95 % interval {pair[0] * scale:.4g}-{pair[1] * scale:.4g})"


def _uncertainty_rows(u: dict[str, Any], ambiguous: bool) -> list[tuple[str, str]]:
    """What the intervals are made of (BacklashResult.uncertainty)."""
    rows = []
    amp = u.get("amplitude")
    if isinstance(amp, dict):
        rows.append(
            (
                "A's standard uncertainty (random part of the residual)",
                f"{num(amp.get('sd_rad_s'), '.3g', 'rad/s')} (white noise would give "
                f"{num(amp.get('sd_white_rad_s'), '.3g', 'rad/s')}; noise RMS "
                f"{num(amp.get('noise_rms_rad_s'), '.3g', 'rad/s')})",
            )
        )
    band = u.get("backlash")
    if isinstance(band, dict):
        model = band.get("model_half_width_rad")
        noise = num(_scaled(band.get("noise_half_width_rad")), ".3g", "mrad")
        fit_rms = num(_scaled(band.get("calibration_rmse_rad")), ".3g", "mrad")
        rows.append(
            (
                "backlash interval made of (half-widths)",
                f"noise {noise}, model mismatch within the joint model's tolerances "
                + ("not known" if model is None else num(_scaled(model), ".3g", "mrad"))
                + f", calibration residual {fit_rms} RMS",
            )
        )
    if u:
        rows.append(
            (
                "ambiguous fit",
                "yes: equally good optima, the interval spans them" if ambiguous else "no",
            )
        )
    return rows


def _scaled(value: Any, scale: float = 1e3) -> float | None:
    return float(value) * scale if isinstance(value, int | float) else None


def _other_trends(indicators: tuple[IndicatorSummary, ...]) -> list[str]:
    # One point is in the table already; a plot of it says nothing more.
    return [
        figure(
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
        source = "" if w.baseline is None else f"<br/><small>{esc(w.baseline.describe())}</small>"
        if w.change is None or w.sigma is None:
            change = f"baseline {w.n_points} of {w.needed}" if w.baseline is None else "-"
        else:
            moved = (
                f"x{w.change + 1:.3g}"
                if w.limits.kind == LimitKind.RATIO
                else f"{100 * w.change:+.3g} %"
            )
            change = f"{moved} (1 sd {100 * w.sigma:.2g} %)"
        limits = f"{w.limits.text(w.limits.watch)} / {w.limits.text(w.limits.alert)}"
        fc = w.forecast
        ahead = "-" if fc is None else f"{fc.limit_name} in {fc.days:.3g} d"
        rows.append(
            f'<tr><td>{esc(info.label)}</td><td class="num">{esc(info.format(w.value, 4))}</td>'
            f'<td class="num">{esc(base)}{source}</td>'
            + "".join(f'<td class="num">{esc(c)}</td>' for c in (change, limits, ahead))
            + f"<td>{badge(w.status)} {ne107_letter(w.ne107)}</td></tr>"
        )
        if w.status is not Status.OK or "within the noise" in w.reason:
            notes.append(f"<li>{esc(verdict_words(w))}</li>")
    return "\n".join(
        [
            f"<h4>Identification verdict {badge(v.status)} {ne107_badge(v.ne107)}</h4>",
            f'<p class="reason">{esc(joint_words(v))}</p>',
            f'<p class="forecast">{esc(v.forecast_text)}</p>',
            '<table class="identification"><thead><tr><th>indicator</th><th>latest</th>'
            "<th>baseline</th><th>change</th><th>watch / alert</th><th>next limit</th>"
            "<th>status</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>",
            *([f'<ul class="reasons">{"".join(notes)}</ul>'] if notes else []),
        ]
    )


def joint_section(anchor: str, j: JointReport) -> str:
    ident = [] if j.identification is None else [_identification_html(j.identification)]
    if j.indicator_only:
        badges = "" if j.identification is None else f" {badge(j.status)} {ne107_badge(j.signal)}"
        # Said only where it matters: with an identification verdict the joint has one.
        note = (
            ['<p class="note">Indicators only: no test cycle of its own, so no verdict.</p>']
            if j.identification is None
            else []
        )
        return "\n".join(
            [
                f'<section class="joint" id="{anchor}">',
                f"<h3>{esc(j.joint)} <small>({esc(j.controller)})</small>{badges}</h3>",
                *note,
                *ident,
                "<h4>Indicators</h4>",
                _indicators_table(j),
                *_other_trends(tuple(j.indicators)),
                *(figure(evidence_svg(p)) for p in j.evidence),
                "</section>",
            ]
        )
    dry = j.outcome == DRY_RUN
    parts = [
        f'<section class="joint" id="{anchor}">',
        f"<h3>{esc(j.joint)} <small>({esc(j.controller)})</small> "
        f"{dry_run_badge() if dry else badge(j.status)} {ne107_badge(j.signal)}</h3>",
    ]
    if dry or not (j.error and j.error in j.verdict_reason):
        parts.append(f'<p class="reason">{esc(j.verdict_reason)}</p>')
    if j.error and not dry:  # a dry run moved nothing on purpose: it did not fail
        parts.append(f'<p class="error">Cycle failed: {esc(j.error)}</p>')
    parts.append(f'<p class="forecast">{esc(j.forecast)}</p>')
    parts += [*ident, "<h4>Indicators</h4>", _indicators_table(j)]
    if j.history:
        parts.append(
            figure(
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
        parts.append(figure(signature_svg(j.result)))
    parts += [figure(evidence_svg(p)) for p in j.evidence]
    parts.append(f"<h4>{'Fit diagnostics' if j.result is not None else 'Cycle'}</h4>")
    parts.append(_diagnostics_html(j))
    parts.append("</section>")
    return "\n".join(parts)
