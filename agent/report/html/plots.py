"""The report page's plots as inline SVG: an indicator's trend with its limits and forecast,
the backlash signature fitted to the speed residual, and any other evidence plot."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agent.estimation.backlash.result import BacklashResult
from agent.health.display import indicator_info
from agent.health.status import TrendPoint
from agent.health.trend import LimitName, Trend, TrendBasis, days_since, next_forecast
from agent.report.evidence import EvidencePlot
from agent.report.html.markup import display_unit, esc, when
from agent.report.svg import HLine, Series, line_plot


def trend_svg(
    history: Sequence[TrendPoint],
    tr: Trend | None,
    indicator: str,
    limits: tuple[float | None, float | None] = (None, None),
    stored_unit: str = "",
    small: bool = False,
    passed: LimitName | None = None,
) -> str:
    """Points per cycle, the Theil-Sen line, the limits, and the line on to the next limit."""
    info = indicator_info(indicator)
    scale, unit = display_unit(indicator, stored_unit)
    days = days_since(history)
    # A history of hours is plotted in hours: in days its points pile up at x = 0.
    per, x_unit = (24.0, "hours") if days.size and float(days[-1]) < 2.0 else (1.0, "days")
    values = np.array([p.value for p in history]) * scale
    has_bars = any(p.interval is not None for p in history)
    low = np.array([np.nan if p.low is None else p.low for p in history]) * scale
    high = np.array([np.nan if p.high is None else p.high for p in history]) * scale
    series = [
        Series(
            f"{info.label} per cycle" + (" (bars: 95 % interval)" if has_bars else ""),
            days * per,
            values,
            markers=True,
            y_low=low if has_bars else None,
            y_high=high if has_bars else None,
        )
    ]
    if tr is not None:
        # The line is drawn over the points it was fitted to: after a change of slope, from
        # the break on (Trend.basis), so the plot shows which regime the forecast follows.
        start = float(days_since([history[0], TrendPoint(tr.first_time_iso, 0.0)])[1])
        x_line = np.array([start, float(days[-1])])
        label = (
            "Theil-Sen trend"
            if tr.basis != TrendBasis.SINCE_BREAK
            else f"Theil-Sen trend since {tr.since_text()} (slope changed)"
        )
        series.append(
            Series(
                label,
                x_line * per,
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
            shown = "" if ahead >= fc.days else f" (drawn for the next {ahead:.3g} days)"
            series.append(
                Series(
                    f"forecast: {fc.limit_name} limit in {fc.days:.3g} days{shown}",
                    x_fc * per,
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
        x_label=f"{x_unit} since {when(history[0].time_iso)}",
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


# (colour, dashed, width) of evidence series in order. The first is the measurement, the others
# a model's prediction of it. A good model lies on the measurement, so the measurement is a wide
# light band under it and each prediction a thin dashed dark line on top: both stay visible where
# they agree and where they part.
_STYLES = (
    ("#9cc3e6", False, 4.0),
    ("#b34700", True, 1.6),
    ("#2b8a3e", True, 1.6),
    ("#8e44ad", True, 1.6),
)


def evidence_svg(plot: EvidencePlot) -> str:
    """Any evidence plot (e.g. measured vs predicted torque): one line per series, the first
    (the measurement) under the others, each in its own colour and style, with a legend."""
    if not plot.series:
        return f'<p class="note">{esc(plot.title)}: no data.</p>'
    styles = [_STYLES[min(i, len(_STYLES) - 1)] for i in range(len(plot.series))]
    return line_plot(
        [
            Series(s.label, s.x, s.y, color=color, dashed=dashed, width=width)
            for s, (color, dashed, width) in zip(plot.series, styles, strict=True)
        ],
        title=plot.title,
        x_label=plot.x_label,
        y_label=plot.y_label,
        xmlns=False,
    )
