"""A tiny dependency-free SVG line plot: axes with 1-2-5 ticks, several series, legend, limits.

The output is plain XML (every text escaped) so that reports stay one self-contained file that
needs no plotting library on the edge PC and no JavaScript in the browser.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

import numpy as np
import numpy.typing as npt

SVG_NS = "http://www.w3.org/2000/svg"
PALETTE = ("#1f5fa8", "#d9730d", "#2b8a3e", "#8e44ad", "#c0392b", "#555555")
MAX_POINTS = 2000
# Width of one character of an 11 px sans-serif label, a little above the average so that a
# legend laid out with it never overlaps (SVG cannot measure text before it is drawn).
LEGEND_CHAR_PX = 6.6

# Characters XML 1.0 forbids (control characters, lone surrogates): a joint name from a
# controller could hold any of them, and one would make the whole page unreadable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clean_text(text: str) -> str:
    """`text` with every character XML cannot hold replaced by U+FFFD."""
    return _NOT_XML.sub("\ufffd", text)


def label_text(text: str) -> str:
    """A one-line label: XML-safe, with line breaks and tabs as spaces (SVG text is one line)."""
    return re.sub("[\t\n\r]", " ", clean_text(text))


def _t(text: str) -> str:
    return escape(label_text(text))


@dataclass(frozen=True)
class Series:
    label: str
    x: Sequence[float] | npt.NDArray[np.float64]
    y: Sequence[float] | npt.NDArray[np.float64]
    color: str | None = None
    dashed: bool = False
    markers: bool = False
    # An interval per point (NaN where a point has none), drawn as a vertical bar.
    y_low: Sequence[float] | npt.NDArray[np.float64] | None = None
    y_high: Sequence[float] | npt.NDArray[np.float64] | None = None
    width: float = 1.4  # stroke width in px


@dataclass(frozen=True)
class HLine:
    """A horizontal line across the plot, e.g. a threshold."""

    value: float
    label: str
    color: str = "#c0392b"
    dashed: bool = True


def nice_step(span: float, max_ticks: int = 6) -> float:
    """The smallest 1, 2 or 5 x 10^k step that cuts `span` into at most `max_ticks` parts."""
    if not span > 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(1, max_ticks)
    power = 10.0 ** math.floor(math.log10(raw))
    for mult in (1.0, 2.0, 5.0, 10.0):
        if mult * power >= raw * (1 - 1e-9):
            return mult * power
    return 10.0 * power


def nice_ticks(lo: float, hi: float, max_ticks: int = 6) -> list[float]:
    """Ticks on a 1-2-5 grid covering [lo, hi] (widened when lo == hi)."""
    lo, hi = _widen(lo, hi)
    step = nice_step(hi - lo, max_ticks)
    first = math.floor(lo / step + 1e-9) * step
    ticks: list[float] = []
    for k in range(1000):  # a 1-2-5 step needs at most ~max_ticks + 2; the bound is a guard
        t = first + k * step
        ticks.append(0.0 if abs(t) < step * 1e-9 else t)
        if t >= hi - step * 1e-9:
            break
    return ticks


def format_tick(value: float, step: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or step < 1e-4:
        return f"{value:.3g}"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{value:.{decimals}f}"


def decimate(
    x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], max_points: int = MAX_POINTS
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Keep the min and the max of each bucket (in time order) so that peaks survive."""
    n = len(x)
    if n <= max_points:
        return x, y
    buckets = max(1, max_points // 2)
    size = math.ceil(n / buckets)
    rows = math.ceil(n / size)
    padded = np.full(rows * size, np.nan)
    padded[:n] = y
    grid = padded.reshape(rows, size)
    base = np.arange(rows) * size
    # Every row holds at least one real value: the padding is shorter than one row.
    keep = np.unique(
        np.concatenate([base + np.nanargmin(grid, axis=1), base + np.nanargmax(grid, axis=1)])
    )
    return x[keep], y[keep]


def line_plot(
    series: Sequence[Series],
    title: str,
    x_label: str,
    y_label: str,
    width: int = 720,
    height: int = 300,
    hlines: Sequence[HLine] = (),
    xmlns: bool = True,
) -> str:
    """An SVG document (or, with xmlns=False, an element for inline HTML5) of line series."""
    clean = [_clean(s) for s in series]
    bars = [_bars(s) for s in series]
    xs = [v for _, x, _ in clean if len(x) for v in (x.min(), x.max())]
    ys = [v for _, _, y in clean if len(y) for v in (y.min(), y.max())]
    ys += [v for b in bars for _, lo, hi in b for v in (lo, hi)]
    ys += [h.value for h in hlines if math.isfinite(h.value)]
    x_lo, x_hi = _widen(min(xs, default=0.0), max(xs, default=1.0))
    y_lo, y_hi = _widen(min(ys, default=0.0), max(ys, default=1.0))
    # A margin so that a limit line or a peak does not vanish into the frame.
    y_pad = 0.04 * (y_hi - y_lo)
    y_lo, y_hi = y_lo - y_pad, y_hi + y_pad
    x_ticks = nice_ticks(x_lo, x_hi, 8)
    y_ticks = nice_ticks(y_lo, y_hi, 6)
    x_lo, x_hi = min(x_lo, x_ticks[0]), max(x_hi, x_ticks[-1])
    y_lo, y_hi = min(y_lo, y_ticks[0]), max(y_hi, y_ticks[-1])

    left, right = 64, 16
    entries = [s.label for s, _, _ in clean] + [h.label for h in hlines if math.isfinite(h.value)]
    places = legend_layout(entries, left, max(10, width - left - right))
    legend_rows = 1 + max((row for _, row in places), default=-1)
    top = 30 + 16 * legend_rows + 8
    bottom = 44
    pw, ph = max(10, width - left - right), max(10, height - top - bottom)

    def px(v: float) -> float:
        return left + (v - x_lo) / (x_hi - x_lo) * pw

    def py(v: float) -> float:
        return top + ph - (v - y_lo) / (y_hi - y_lo) * ph

    ns = f' xmlns="{SVG_NS}"' if xmlns else ""
    out = [
        f'<svg{ns} class="plot" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" font-family="sans-serif" font-size="11">',
        f"<title>{_t(title)}</title>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" font-size="13" '
        f'font-weight="bold">{_t(title)}</text>',
    ]
    x_step = x_ticks[1] - x_ticks[0] if len(x_ticks) > 1 else 1.0
    y_step = y_ticks[1] - y_ticks[0] if len(y_ticks) > 1 else 1.0
    for t in x_ticks:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#e3e3e3"/>')
        out.append(
            f'<text x="{x:.1f}" y="{top + ph + 14}" text-anchor="middle">'
            f"{_t(format_tick(t, x_step))}</text>"
        )
    for t in y_ticks:
        y = py(t)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#e3e3e3"/>'
        )
        out.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_t(format_tick(t, y_step))}</text>"
        )
    out.append(
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333333"/>'
    )
    out.append(
        f'<text x="{left + pw / 2:.1f}" y="{height - 8}" text-anchor="middle">{_t(x_label)}</text>'
    )
    out.append(
        f'<text x="14" y="{top + ph / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + ph / 2:.1f})">{_t(y_label)}</text>'
    )

    legend: list[tuple[str, str, bool, float]] = []
    for i, (s, x_arr, y_arr) in enumerate(clean):
        color = s.color or PALETTE[i % len(PALETTE)]
        legend.append((s.label, color, s.dashed, max(2.0, s.width)))
        if not len(x_arr):
            continue
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        pts = " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in zip(x_arr, y_arr, strict=True))
        out.append(
            f'<polyline points="{pts}" fill="none" stroke={quoteattr(color)} '
            f'stroke-width="{s.width:g}"{dash}/>'
        )
        out.extend(
            f'<line x1="{px(a):.1f}" y1="{py(lo):.1f}" x2="{px(a):.1f}" y2="{py(hi):.1f}" '
            f'stroke={quoteattr(color)} stroke-width="1"/>'
            for a, lo, hi in bars[i]
        )
        if s.markers:
            out.extend(
                f'<circle cx="{px(a):.1f}" cy="{py(b):.1f}" r="2.5" fill={quoteattr(color)}/>'
                for a, b in zip(x_arr, y_arr, strict=True)
            )
    for h in hlines:
        if not math.isfinite(h.value):
            continue
        legend.append((h.label, h.color, h.dashed, 2.0))
        dash = ' stroke-dasharray="4 3"' if h.dashed else ""
        y = py(h.value)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" '
            f'stroke={quoteattr(h.color)} stroke-width="1.2"{dash}/>'
        )

    for (label, color, dashed, stroke), (lx, row) in zip(legend, places, strict=True):
        ly = 36 + 16 * row
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        out.append(
            f'<line x1="{lx:.1f}" y1="{ly - 4}" x2="{lx + 22:.1f}" y2="{ly - 4}" '
            f'stroke={quoteattr(color)} stroke-width="{stroke:g}"{dash}/>'
        )
        out.append(f'<text x="{lx + 27:.1f}" y="{ly}">{_t(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def legend_layout(labels: Sequence[str], left: float, span: float) -> list[tuple[float, int]]:
    """(x, row) of each legend entry: in columns of a third of the plot while the labels fit
    there, else flowing left to right and wrapping, so that no two entries overlap."""
    widths = [27.0 + LEGEND_CHAR_PX * len(label_text(label)) + 12.0 for label in labels]
    if all(w <= span / 3 for w in widths):
        return [(left + (i % 3) * span / 3, i // 3) for i in range(len(labels))]
    places, x, row = [], left, 0
    for w in widths:
        if x > left and x + w > left + span:
            x, row = left, row + 1
        places.append((x, row))
        x += w
    return places


def _clean(s: Series) -> tuple[Series, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    x = np.asarray(s.x, dtype=float).ravel()
    y = np.asarray(s.y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"series {s.label!r}: x has {x.size} values but y has {y.size}")
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = decimate(x[ok], y[ok])
    return s, x, y


def _bars(s: Series) -> list[tuple[float, float, float]]:
    """(x, low, high) of each point with a finite interval; none for a series without one or
    too long to draw a bar per point."""
    if s.y_low is None or s.y_high is None:
        return []
    x = np.asarray(s.x, dtype=float).ravel()
    lo = np.asarray(s.y_low, dtype=float).ravel()
    hi = np.asarray(s.y_high, dtype=float).ravel()
    if not (x.shape == lo.shape == hi.shape) or x.size > MAX_POINTS:
        return []
    ok = np.isfinite(x) & np.isfinite(lo) & np.isfinite(hi)
    return [(float(a), float(b), float(c)) for a, b, c in zip(x[ok], lo[ok], hi[ok], strict=True)]


def _widen(lo: float, hi: float) -> tuple[float, float]:
    """A non-empty finite range: equal ends get a margin around them."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi)):
        pad = abs(lo) * 0.1 if lo != 0 else 1.0
        return lo - pad, hi + pad
    return lo, hi
