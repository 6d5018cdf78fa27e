"""SVG plots on their own: tick grids, line plots valid as XML for any label and data,
decimation that keeps the peaks, legends that never overlap."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.report.svg import (
    LEGEND_CHAR_PX,
    SVG_NS,
    HLine,
    Series,
    decimate,
    label_text,
    legend_layout,
    line_plot,
    nice_ticks,
)

# -- svg ---------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.floats(-1e6, 1e6), st.floats(1e-6, 1e6), st.integers(2, 10))
def test_nice_ticks_cover_the_range_on_a_125_grid(lo: float, span: float, max_ticks: int) -> None:
    hi = lo + span
    ticks = nice_ticks(lo, hi, max_ticks)
    step = ticks[1] - ticks[0]
    assert ticks[0] <= lo + 1e-9 * step and ticks[-1] >= hi - 1e-9 * step
    assert len(ticks) <= max_ticks + 3
    mantissa = step / 10 ** math.floor(math.log10(step))
    # Loose: ticks near 2048 a micro-unit apart carry float rounding of ~1e-6 relative.
    assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-3
    assert np.allclose(np.diff(ticks), step, rtol=1e-3, atol=0)


def test_nice_ticks_examples() -> None:
    assert nice_ticks(0.0, 10.0, 5) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert nice_ticks(0.13, 0.87, 4) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert len(nice_ticks(3.0, 3.0)) >= 2  # a constant series still gets an axis


def test_line_plot_is_valid_xml_with_series_legend_and_limits() -> None:
    x = np.linspace(0, 1, 50)
    svg = line_plot(
        [
            Series("residual", x, np.sin(6 * x)),
            Series("fit <A&B>", x, np.cos(6 * x), dashed=True, markers=True),
        ],
        title='Signature "J1" <test>',
        x_label="time [s]",
        y_label="speed [rad/s]",
        hlines=[HLine(1.5, "alert limit")],
    )
    root = ET.fromstring(svg)
    assert root.tag == f"{{{SVG_NS}}}svg"
    texts = [t.text for t in root.iter(f"{{{SVG_NS}}}text")]
    assert 'Signature "J1" <test>' in texts and "fit <A&B>" in texts and "alert limit" in texts
    assert len(list(root.iter(f"{{{SVG_NS}}}polyline"))) == 2
    assert len(list(root.iter(f"{{{SVG_NS}}}circle"))) == 50
    assert "<test>" not in svg  # escaped in the source


def test_line_plot_survives_empty_constant_and_nan_series() -> None:
    svg = line_plot(
        [
            Series("empty", [], []),
            Series("flat", [1, 2, 3], [5, 5, 5]),
            Series("holes", [0, 1, 2], [1, float("nan"), float("inf")]),
        ],
        "t",
        "x",
        "y",
        hlines=[HLine(float("nan"), "no limit")],
    )
    ET.fromstring(svg)
    inline = line_plot([Series("a", [0, 1], [0, 1])], "t", "x", "y", xmlns=False)
    assert "xmlns" not in inline and ET.fromstring(inline).tag == "svg"
    with pytest.raises(ValueError, match="series 'bad'"):
        line_plot([Series("bad", [0, 1, 2], [0, 1])], "t", "x", "y")


def test_decimation_keeps_peaks_and_bounds_the_size() -> None:
    rng = np.random.default_rng(5)
    x = np.arange(100_000, dtype=float)
    y = rng.normal(0, 1, x.size)
    y[31_337], y[77_001] = 40.0, -35.0
    dx, dy = decimate(x, y)
    assert len(dx) <= 2000 and np.all(np.diff(dx) > 0)
    assert dy.max() == 40.0 and dy.min() == -35.0
    svg = line_plot([Series("long", x, y)], "t", "x", "y")
    (polyline,) = ET.fromstring(svg).iter(f"{{{SVG_NS}}}polyline")
    assert len(polyline.attrib["points"].split()) <= 2000
    short_x, short_y = decimate(x[:10], y[:10])
    assert np.array_equal(short_x, x[:10]) and np.array_equal(short_y, y[:10])


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.text(), st.lists(st.floats(-1e9, 1e9), min_size=0, max_size=50))
def test_any_label_and_data_give_valid_xml(label: str, ys: list[float]) -> None:
    svg = line_plot(
        [Series(label, list(range(len(ys))), ys)], label, label, label, hlines=[HLine(1.0, label)]
    )
    root = ET.fromstring(svg)
    assert label_text(label) in [t.text or "" for t in root.iter(f"{{{SVG_NS}}}text")]


def test_legend_entries_never_overlap() -> None:
    labels = [
        "torque-prediction NMSE per cycle",
        "Theil-Sen trend",
        "forecast: alert limit in 52.5 days",
        "q",
        "a much longer label" * 3,
    ]
    for width in (320, 480, 720):
        series = [Series(label, [0.0, 1.0], [0.0, float(i)]) for i, label in enumerate(labels)]
        root = ET.fromstring(
            line_plot(series, "t", "x", "y", width=width, hlines=[HLine(1.0, "watch limit")])
        )
        texts = [t for t in root.iter(f"{{{SVG_NS}}}text") if t.text in {*labels, "watch limit"}]
        assert len(texts) == len(labels) + 1
        boxes = sorted(
            (
                float(t.get("y", 0)),
                float(t.get("x", 0)),
                float(t.get("x", 0)) + LEGEND_CHAR_PX * len(t.text or ""),
            )
            for t in texts
        )
        for (y1, _, end1), (y2, start2, _) in itertools.pairwise(boxes):
            assert y1 != y2 or end1 <= start2
    # Short labels keep the three tidy columns.
    assert legend_layout(["a", "b", "c", "d"], 64, 640) == [
        (64, 0),
        (64 + 640 / 3, 0),
        (64 + 2 * 640 / 3, 0),
        (64, 1),
    ]
