"""The trend follows a change of wear regime (agent.health.regime, agent.health.trend.trend).

Histories are simulated as a reliability engineer sees them: one test cycle a day, the
indicator's scatter from one cycle to the next (Gaussian, the size of the backlash estimator's
repeatability), and wear that sets in at a given day and then grows at a constant rate. The
figures (median forecast error before/after, false-alarm rate) go to the "forecast" section of
the jha summary and are asserted here.
"""

from __future__ import annotations

import statistics
import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from scipy import stats

from agent.health.identification.indicator import assess_indicator
from agent.health.regime import BREAK_ALPHA, MIN_POINTS, find_break
from agent.health.status import TrendPoint
from agent.health.trend import Trend, forecast_sentence, trend
from agent.report.html.plots import trend_svg
from tests.support.summary import record

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SVG_NS = "http://www.w3.org/2000/svg"

# Flat at 0.40 mrad with 0.01 mrad scatter for 45 days, then wear of 0.02 mrad/day; 60 daily
# cycles, so the last is at day 59 (0.68 mrad) and the 0.8 mrad alert limit is truly crossed
# at day 65: 6 days after the last cycle.
LEVEL_RAD, NOISE_RAD, ONSET_DAY, RATE_RAD_DAY = 0.40e-3, 0.01e-3, 45.0, 0.02e-3
WATCH_RAD, ALERT_RAD = 0.6e-3, 0.8e-3
DAYS = np.arange(60.0)
TRUE_DAYS_TO_ALERT = ONSET_DAY + (ALERT_RAD - LEVEL_RAD) / RATE_RAD_DAY - DAYS[-1]
FORECAST_TOLERANCE_DAYS = 1.5  # median |forecast - truth| after the change
BREAK_TOLERANCE_DAYS = 3.0  # |break found - onset|
FALSE_ALARM_BOUND = 0.05


def history(days: np.ndarray, values: np.ndarray) -> list[TrendPoint]:
    return [
        TrendPoint((T0 + timedelta(days=float(d))).isoformat(), float(v))
        for d, v in zip(days, values, strict=True)
    ]


def onset_history(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (
        LEVEL_RAD
        + RATE_RAD_DAY * np.maximum(DAYS - ONSET_DAY, 0.0)
        + rng.normal(0.0, NOISE_RAD, DAYS.size)
    )


def whole_history_forecast(
    days: np.ndarray, values: np.ndarray, limit: float
) -> tuple[float, float]:
    """The forecast as it was before this change: one Theil-Sen line through every point
    (days to the limit, and the interval's early end)."""
    slope, intercept, _, high = stats.theilslopes(values, days, alpha=0.95)
    gap = limit - (intercept + slope * days[-1])
    return gap / slope, gap / max(high, slope)


def test_flat_then_wear_is_forecast_from_the_break_and_on_time() -> None:
    errors_new, errors_old, late_low_old, covered = [], [], 0, 0
    seeds = range(40)
    for seed in seeds:
        values = onset_history(seed)
        tr = trend(history(DAYS, values), WATCH_RAD, ALERT_RAD, "backlash_rad")
        assert tr is not None and tr.basis == "since_break"
        assert tr.break_time_iso is not None
        found = (datetime.fromisoformat(tr.break_time_iso) - T0) / timedelta(days=1)
        assert abs(found - ONSET_DAY) <= BREAK_TOLERANCE_DAYS
        assert tr.history_points == DAYS.size and tr.n_points == DAYS.size - int(found)
        fc = tr.forecast_alert
        assert fc is not None and not fc.reached
        errors_new.append(abs(fc.days - TRUE_DAYS_TO_ALERT))
        covered += fc.days_low <= TRUE_DAYS_TO_ALERT <= (fc.days_high or np.inf)
        # The early end of the interval is the date to plan by: never late by more than the
        # tolerance (a break found a day early mixes one flat point into the new line).
        assert fc.days_low <= TRUE_DAYS_TO_ALERT + FORECAST_TOLERANCE_DAYS
        old_days, old_low = whole_history_forecast(DAYS, values, ALERT_RAD)
        assert old_days > TRUE_DAYS_TO_ALERT + 5.0  # the old forecast was late, every time
        errors_old.append(abs(old_days - TRUE_DAYS_TO_ALERT))
        late_low_old += old_low > TRUE_DAYS_TO_ALERT
    median_new, median_old = statistics.median(errors_new), statistics.median(errors_old)
    record(
        "forecast",
        "flat 45 d then wear: median |alert forecast - truth|, whole history",
        f"{median_old:.3g} d late (truth {TRUE_DAYS_TO_ALERT:.3g} d, 40 seeds)",
    )
    record(
        "forecast",
        "flat 45 d then wear: median |alert forecast - truth|, since the break",
        f"{median_new:.3g} d (tolerance {FORECAST_TOLERANCE_DAYS} d); truth inside the "
        f"95 % interval {covered}/40, old interval's early end late {late_low_old}/40",
    )
    assert median_new <= FORECAST_TOLERANCE_DAYS < median_old
    assert late_low_old >= 36  # even the old interval's early end came after the crossing
    # The interval is the slope's only (the level's own scatter is not in it, as before this
    # change), so it is narrower than the crossing's true uncertainty: recorded, and held to
    # what it is, not to 95 %.
    assert covered >= 12


def test_the_report_says_since_when_and_draws_the_line_from_the_break() -> None:
    points = history(DAYS, onset_history(3))
    tr = trend(points, WATCH_RAD, ALERT_RAD, "backlash_rad")
    assert tr is not None and tr.basis == "since_break"
    date = tr.since_text()
    assert date.startswith("2026-04-1")  # 45 days after 1 March is 15 April
    text = forecast_sentence(tr, len(points), "watch")
    assert text.startswith(
        f"Since {date}, when a change of slope was detected ({tr.n_points} cycles"
    )
    assert "reaches the alert limit 0.8 mrad in about" in text
    d = tr.to_dict()
    assert d["basis"] == "since_break" and d["history_points"] == 60
    assert d["first_time"] == tr.break_time_iso and "fitted since" in d["basis_text"]
    assert f"since {date}" in tr.describe()
    # The dashed trend line starts at the break's point, not at the first cycle.
    svg = trend_svg(points, tr, "backlash_rad", (WATCH_RAD, ALERT_RAD), passed="watch")
    root = ET.fromstring(svg.replace("<svg ", f'<svg xmlns="{SVG_NS}" ', 1))
    texts = [t.text or "" for t in root.iter(f"{{{SVG_NS}}}text")]
    assert f"Theil-Sen trend since {date} (slope changed)" in texts
    lines = list(root.iter(f"{{{SVG_NS}}}polyline"))
    data = next(p for p in lines if not p.get("stroke-dasharray"))
    dashed = [p for p in lines if p.get("stroke-dasharray")]
    x_data = [float(xy.split(",")[0]) for xy in (data.get("points") or "").split()]
    x_trend = [float(xy.split(",")[0]) for xy in (dashed[0].get("points") or "").split()]
    assert x_trend[0] == pytest.approx(x_data[DAYS.size - tr.n_points], abs=0.6)
    assert x_trend[-1] == pytest.approx(x_data[-1], abs=0.6)


def test_noise_alone_rarely_makes_a_break() -> None:
    """200 seeded histories of scatter only, 6 to 60 cycles at irregular times: the share with
    a break (a false alarm: the forecast would leave out good history) stays under the bound."""
    rng = np.random.default_rng(2026)
    alarms, n = 0, 200
    for _ in range(n):
        size = int(rng.integers(MIN_POINTS, 61))
        days = np.sort(rng.uniform(0.0, 90.0, size))
        values = LEVEL_RAD + rng.normal(0.0, NOISE_RAD, size)
        alarms += find_break(days, values) is not None
    rate = alarms / n
    record(
        "forecast",
        "false breaks in 200 noise-only histories",
        f"{100 * rate:.3g} % (bound {100 * FALSE_ALARM_BOUND:.3g} %, Davies alpha {BREAK_ALPHA})",
    )
    assert rate <= FALSE_ALARM_BOUND


def test_steady_wear_keeps_the_whole_history_forecast_unchanged() -> None:
    """Linear wear with scatter: no break, and the very forecast the whole-history line gives."""
    rng = np.random.default_rng(5)
    breaks, n = 0, 200
    for _ in range(n):
        size = int(rng.integers(MIN_POINTS, 61))
        days = np.sort(rng.uniform(0.0, 90.0, size))
        values = LEVEL_RAD + 3e-6 * days + rng.normal(0.0, NOISE_RAD, size)
        tr = trend(history(days, values), WATCH_RAD, ALERT_RAD, "backlash_rad")
        assert tr is not None
        if tr.basis != "history":
            breaks += 1
            continue
        assert (tr.n_points, tr.break_time_iso) == (size, None)
        old_days, old_low = whole_history_forecast(days, values, ALERT_RAD)
        assert tr.forecast_alert is not None
        assert tr.forecast_alert.days == pytest.approx(old_days, rel=1e-9)
        assert tr.forecast_alert.days_low == pytest.approx(old_low, rel=1e-9)
        assert "fitted to the whole history" in tr.basis_text()
    record(
        "forecast",
        "false breaks in 200 steady linear-wear histories",
        f"{100 * breaks / n:.3g} % (bound {100 * FALSE_ALARM_BOUND:.3g} %)",
    )
    assert breaks / n <= FALSE_ALARM_BOUND


def test_a_break_too_recent_widens_the_interval_only() -> None:
    """Two points after the break (fewer than MIN_AFTER = 3): the whole history's line stays
    the forecast, the interval's early end takes the slope after the break. One more cycle and
    the line is fitted since the break (its own point and the 3 after it)."""
    rng = np.random.default_rng(9)
    days = np.arange(32.0)
    values = LEVEL_RAD + rng.normal(0.0, NOISE_RAD, days.size)
    values[-2:] += np.array([0.1e-3, 0.2e-3])  # the onset, seen at the last two cycles
    tr = trend(history(days, values), WATCH_RAD, ALERT_RAD, "backlash_rad")
    assert tr is not None and tr.basis == "recent_break" and tr.points_after_break == 2
    assert (tr.n_points, tr.first_time_iso) == (32, history(days, values)[0].time_iso)
    old_days, old_low = whole_history_forecast(days, values, WATCH_RAD)
    fc = tr.forecast_watch
    assert fc is not None and fc.days == pytest.approx(old_days, rel=1e-9)
    # The steep recent slope (0.1 mrad/day) brings the early end to about 2 days.
    assert fc.days_low < old_low and fc.days_low == pytest.approx(
        (WATCH_RAD - tr.level_now) / tr.slope_high_per_day
    )
    assert tr.slope_high_per_day == pytest.approx(0.1e-3, rel=0.25)
    text = forecast_sentence(tr, days.size)
    assert "too recently to fit a line to (2 point(s) after it)" in text
    assert "too recently" in tr.to_dict()["basis_text"]
    more_days = np.append(days, 32.0)
    more = np.append(values, LEVEL_RAD + 0.3e-3)
    later = trend(history(more_days, more), WATCH_RAD, ALERT_RAD, "backlash_rad")
    assert later is not None and later.basis == "since_break" and later.n_points == 4


def test_a_last_outlier_never_moves_the_central_forecast() -> None:
    """One bad fit at the end looks like a break too recent: the central forecast stays the
    whole history's, only the interval's early end is earlier (the safe direction)."""
    days = np.arange(20.0)
    values = 1.0 + 0.01 * days + np.random.default_rng(4).normal(0.0, 0.01, days.size)
    values[-1] = 3.0
    tr = trend(history(days, values), watch=5.0, alert=6.0)
    assert tr is not None and tr.basis in ("history", "recent_break")
    old_days, _ = whole_history_forecast(days, values, 5.0)
    assert tr.forecast_watch is not None and tr.forecast_watch.days == pytest.approx(old_days)


def test_few_points_are_never_split() -> None:
    days = np.arange(MIN_POINTS - 1, dtype=float)
    values = np.array([1.0, 1.0, 1.0, 5.0, 9.0])[: days.size]
    assert find_break(days, values) is None
    tr = trend(history(days, values), watch=20.0)
    assert tr is not None and tr.basis == "history"
    with pytest.raises(ValueError, match="find_break: expected two 1-D arrays"):
        find_break(days, values[:-1])


def test_a_falling_stiffness_after_a_break_is_forecast_from_the_break() -> None:
    """The identification verdict trends a falling indicator through its negative: the break
    and the regime carry over. Stiffness steady for 6 weekly identifications, then -4 % a week:
    the -30 % alert limit is forecast from the fall, not from the whole history."""
    weeks = np.arange(12.0)
    base_nm_rad = 5.0e4
    rng = np.random.default_rng(1)
    values = base_nm_rad * (
        1.0 - 0.04 * np.maximum(weeks - 5.0, 0.0) + rng.normal(0.0, 0.004, weeks.size)
    )
    points = [
        (TrendPoint((T0 + timedelta(weeks=float(w))).isoformat(), float(v)), 0.4)
        for w, v in zip(weeks, values, strict=True)
    ]
    v = assess_indicator("stiffness_nm_rad", points)
    tr: Trend | None = v.trend
    assert tr is not None and tr.basis == "since_break" and tr.slope_per_day < 0
    assert tr.since_text() == (T0 + timedelta(weeks=5)).date().isoformat()
    fc = tr.forecast_alert
    assert fc is not None and v.alert is not None and fc.limit == pytest.approx(v.alert)
    # Truth: 1 - 0.04 * (w - 5) = 0.7 at w = 12.5, 1.5 weeks after the last identification.
    assert fc.days == pytest.approx(10.5, abs=2.0)
    old_days, _ = whole_history_forecast(weeks * 7.0, -values, -v.alert)
    assert old_days > 10.5 + 7.0  # the whole-history line: more than a week late
    mirrored = replace(tr, basis="history")
    assert mirrored.over_text("identifications").startswith("Over 7 identifications")
