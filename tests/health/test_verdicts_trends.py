"""Verdicts against thresholds and Theil-Sen trends on known synthetic histories."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.model import ThresholdSettings
from agent.errors import ConfigError
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import Ne107, Status, TrendPoint, ne107_of, worst
from agent.health.trend import (
    MIN_FORECAST_SPAN_DAYS,
    forecast_sentence,
    next_forecast,
    passed_limit,
    trend,
)
from agent.health.verdicts import Verdict, assess, assess_backlash

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def result(
    amplitude: float = 0.05, backlash: float | None = 8e-4, converged: bool = True
) -> BacklashResult:
    t = np.linspace(0.0, 0.5, 100)
    fitted = amplitude * np.exp(-30 * t) * np.sin(2 * np.pi * 50 * t)
    return BacklashResult(
        amplitude_rad_s=amplitude,
        backlash_rad=backlash,
        rmse_rad_s=0.002,
        residual_rms_rad_s=0.01,
        params={"A_rad_s": amplitude},
        evaluations=900,
        restarts=0,
        converged=converged,
        stop_reason="tolfun" if converged else "maxfevals",
        fit_seconds=0.5,
        seed=3,
        period_metadata_s=None,
        period_estimated_s=None,
        period_mismatch=None,
        time_s=t,
        residual_rad_s=fitted,
        fitted_rad_s=fitted,
    )


def history(days: list[float], values: list[float]) -> list[TrendPoint]:
    return [
        TrendPoint((T0 + timedelta(days=d)).isoformat(), v)
        for d, v in zip(days, values, strict=True)
    ]


LIMITS = ThresholdSettings(
    backlash_watch_rad=1e-3,
    backlash_alert_rad=2e-3,
    amplitude_watch_rad_s=0.1,
    amplitude_alert_rad_s=0.2,
)


def test_status_values_and_worst() -> None:
    assert [s.value for s in Status] == ["ok", "watch", "alert", "unknown"]
    assert Status("watch") is Status.WATCH and Status.ALERT == "alert"
    assert worst([Status.OK, Status.UNKNOWN, Status.WATCH]) is Status.WATCH
    assert worst([Status.OK, Status.UNKNOWN]) is Status.UNKNOWN
    assert worst([Status.ALERT, Status.WATCH]) is Status.ALERT
    assert worst([]) is Status.OK


@pytest.mark.parametrize(
    ("value", "status", "limit"),
    [
        (0.5e-3, Status.OK, 1e-3),
        (1e-3, Status.WATCH, 1e-3),
        (1.5e-3, Status.WATCH, 1e-3),
        (2e-3, Status.ALERT, 2e-3),
        (9e-3, Status.ALERT, 2e-3),
    ],
)
def test_assess_boundaries(value: float, status: Status, limit: float) -> None:
    v = assess(value, 1e-3, 2e-3, "backlash_rad")
    assert (v.status, v.limit, v.value, v.indicator) == (status, limit, value, "backlash_rad")
    assert "mrad" in v.reason


def test_assess_with_one_or_no_limit() -> None:
    assert assess(5.0, None, 4.0).status is Status.ALERT
    only_alert = assess(3.0, None, 4.0)
    assert only_alert.status is Status.OK and only_alert.limit == 4.0
    assert "alert limit" in only_alert.reason
    assert assess(3.0, 2.0, None).status is Status.WATCH
    none = assess(3.0, None, None, "backlash_rad")
    assert none.status is Status.UNKNOWN and "no limits configured" in none.reason
    nan = assess(float("nan"), 1.0, 2.0)
    assert nan.status is Status.UNKNOWN and nan.value is None
    with pytest.raises(ConfigError, match=r"watch limit .* must be below the alert"):
        assess(1.0, 2.0, 2.0, "backlash_rad")
    with pytest.raises(dataclasses.FrozenInstanceError):
        none.status = Status.OK  # type: ignore[misc]


def test_assess_backlash_uses_backlash_limits_when_calibrated() -> None:
    # A is far above its alert limit but the calibrated backlash decides.
    v = assess_backlash(result(amplitude=5.0, backlash=1.2e-3), LIMITS)
    assert (v.status, v.indicator, v.value, v.limit) == (Status.WATCH, "backlash_rad", 1.2e-3, 1e-3)


def test_assess_backlash_uses_amplitude_when_uncalibrated() -> None:
    v = assess_backlash(result(amplitude=0.25, backlash=None), LIMITS)
    assert (v.status, v.indicator, v.limit) == (Status.ALERT, "amplitude_rad_s", 0.2)
    assert assess_backlash(result(amplitude=0.05, backlash=None), LIMITS).status is Status.OK


def test_assess_backlash_unknown_says_why() -> None:
    only_amp = ThresholdSettings(amplitude_watch_rad_s=0.1)
    v = assess_backlash(result(backlash=1e-3), only_amp)
    assert v.status is Status.UNKNOWN and "backlash_watch_rad" in v.reason
    only_backlash = ThresholdSettings(backlash_watch_rad=1e-3)
    v = assess_backlash(result(backlash=None), only_backlash)
    assert v.status is Status.UNKNOWN and "calibration" in v.reason
    assert "amplitude_watch_rad_s" in v.reason
    v = assess_backlash(result(backlash=None), ThresholdSettings())
    assert v.status is Status.UNKNOWN and "no limits configured" in v.reason
    v = assess_backlash(None, LIMITS)
    assert v.status is Status.UNKNOWN and v.value is None


def test_unconverged_fit_is_noted_in_the_reason() -> None:
    v = assess_backlash(result(backlash=0.5e-3, converged=False), LIMITS)
    assert v.status is Status.OK and "did not converge: maxfevals" in v.reason


def test_verdict_to_dict_is_json() -> None:
    d = Verdict(Status.WATCH, "backlash_rad", 1e-3, 1e-3, "x").to_dict()
    assert json.loads(json.dumps(d)) == {
        "status": "watch",
        "indicator": "backlash_rad",
        "value": 1e-3,
        "limit": 1e-3,
        "reason": "x",
    }


def test_exact_linear_history() -> None:
    # 0.5 mrad growing 0.01 mrad/day, one point a day for 10 days: at day 9 it is 0.59 mrad,
    # so the 1 mrad watch limit is 41 days ahead and the 2 mrad alert limit 141 days.
    days = list(range(10))
    tr = trend(history(days, [0.5e-3 + 1e-5 * d for d in days]), 1e-3, 2e-3, "backlash_rad")
    assert tr is not None
    assert tr.slope_per_day == pytest.approx(1e-5)
    assert tr.slope_low_per_day == pytest.approx(1e-5) == tr.slope_high_per_day
    assert tr.intercept == pytest.approx(0.5e-3) and tr.level_now == pytest.approx(0.59e-3)
    assert (tr.n_points, tr.span_days) == (10, pytest.approx(9.0))
    assert tr.forecast_watch is not None and tr.forecast_alert is not None
    assert tr.forecast_watch.days == pytest.approx(41.0)
    assert tr.forecast_watch.days_low == pytest.approx(41.0)
    assert tr.forecast_watch.days_high == pytest.approx(41.0)
    assert tr.forecast_alert.days == pytest.approx(141.0)
    assert "watch limit in 41 days" in tr.describe()
    assert json.loads(json.dumps(tr.to_dict()))["forecast_alert"]["days"] == pytest.approx(141)


def test_outliers_do_not_move_a_robust_slope() -> None:
    days = list(range(20))
    values = [1.0 + 0.1 * d for d in days]
    values[5] = 50.0  # one bad fit
    values[12] = -30.0
    tr = trend(history(days, values), watch=10.0, alert=20.0)
    assert tr is not None and tr.slope_per_day == pytest.approx(0.1, rel=1e-6)


def test_noisy_history_interval_covers_the_truth() -> None:
    rng = np.random.default_rng(7)
    days = np.sort(rng.uniform(0, 60, 40))
    values = 0.4e-3 + 5e-6 * days + rng.normal(0, 2e-5, days.size)
    tr = trend(history(list(days), list(values)), 1e-3, 1.5e-3, "backlash_rad")
    assert tr is not None
    assert tr.slope_low_per_day < 5e-6 < tr.slope_high_per_day
    fc = tr.forecast_watch
    assert fc is not None and fc.days_high is not None
    assert fc.days_low < fc.days < fc.days_high
    true_days = (1e-3 - (0.4e-3 + 5e-6 * days[-1])) / 5e-6
    assert fc.days_low < true_days < fc.days_high


def test_slope_interval_reaching_zero_leaves_the_upper_forecast_open() -> None:
    values = [1.0, 1.3, 0.9, 1.4, 1.0, 1.5, 1.1, 1.2]  # rising a little, mostly scatter
    tr = trend(history(list(range(8)), values), watch=5.0, alert=None)
    assert tr is not None and tr.slope_per_day > 0 and tr.slope_low_per_day <= 0
    assert tr.forecast_watch is not None and tr.forecast_watch.days_high is None
    assert "to never days" in tr.forecast_watch.describe()
    assert tr.forecast_alert is None


def test_no_forecast_without_a_positive_slope_or_enough_points() -> None:
    days = [0.0, 1.0, 2.0, 3.0]
    falling = trend(history(days, [4.0, 3.0, 2.0, 1.0]), 5.0, 6.0)
    assert falling is not None and falling.slope_per_day == pytest.approx(-1.0)
    assert falling.forecast_watch is None and falling.forecast_alert is None
    flat = trend(history(days, [1.0] * 4), 5.0, 6.0)
    assert flat is not None and flat.forecast_watch is None
    assert "no limit crossing" in flat.describe()
    assert trend(history(days[:2], [1.0, 2.0]), 5.0, 6.0) is None
    assert trend(history([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]), 5.0, 6.0) is None  # same time
    nan = trend(history(days, [1.0, float("nan"), 2.0, float("nan")]), 5.0, 6.0)
    assert nan is None  # two finite points left


def test_limit_already_reached() -> None:
    days = [0.0, 1.0, 2.0]
    tr = trend(history(days, [1.0, 2.0, 3.0]), watch=2.5, alert=10.0)
    assert tr is not None and tr.forecast_watch is not None and tr.forecast_watch.reached
    assert tr.forecast_watch.days == 0.0
    assert tr.forecast_alert is not None and tr.forecast_alert.days == pytest.approx(7.0)


def test_point_order_does_not_matter() -> None:
    pts = history([0, 1, 2, 3, 4], [1.0, 1.2, 1.1, 1.5, 1.6])
    a, b = trend(pts, 3.0, 4.0), trend(list(reversed(pts)), 3.0, 4.0)
    assert a == b


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    level=st.floats(0.0, 1.0),
    slope=st.floats(1e-4, 1.0),
    gap=st.floats(0.01, 100.0),
    n=st.integers(3, 30),
    step_days=st.floats(0.01, 30.0),
)
def test_forecast_reaches_the_limit(
    level: float, slope: float, gap: float, n: int, step_days: float
) -> None:
    days = [i * step_days for i in range(n)]
    values = [level + slope * d for d in days]
    watch = values[-1] + gap
    tr = trend(history(days, values), watch=watch, alert=watch * 2)
    assert tr is not None
    if days[-1] < MIN_FORECAST_SPAN_DAYS:  # too short a history to extrapolate
        assert tr.forecast_watch is None and tr.forecast_alert is None
        assert tr.forecast_withheld is not None and "not enough history" in tr.forecast_withheld
        return
    assert tr.forecast_watch is not None and tr.forecast_withheld is None
    fc = tr.forecast_watch
    assert math.isclose(tr.level_now + tr.slope_per_day * fc.days, watch, rel_tol=1e-6)
    assert fc.days_low <= fc.days * (1 + 1e-9)
    assert fc.days_high is None or fc.days_high >= fc.days * (1 - 1e-9)


# -- forecasts: falling, past the limit, sentences, interval coverage, NE 107 --------------------


def test_no_forecast_from_a_history_of_minutes() -> None:
    """Five cycles two minutes apart: the line is kept, no date is forecast, and the sentence
    gives no rate per day (the issue's "watch in ~0 d", "-0.303 mrad/day")."""
    minutes = [k * 2.0 / 1440.0 for k in range(5)]
    tr = trend(history(minutes, [5e-4 + 2e-6 * k for k in range(5)]), 6e-4, 8e-4, "backlash_rad")
    assert tr is not None and tr.forecast_watch is None and tr.forecast_alert is None
    assert tr.forecast_withheld == (
        "not enough history yet for a forecast: 5 cycles over 8 min (a forecast needs at least "
        "3 over at least 1 day)"
    )
    text = forecast_sentence(tr, 5)
    assert text.startswith("Not enough history yet") and "/day" not in text
    assert tr.to_dict()["forecast_withheld"] == tr.forecast_withheld
    # a line already past a limit still says so: no extrapolation is needed for that
    past = trend(history(minutes, [9e-4] * 5), 5e-4, 8e-4, "backlash_rad")
    assert past is not None and past.forecast_alert is not None and past.forecast_alert.reached
    assert "already at or past the alert limit" in forecast_sentence(past, 5)
    # a day of history is enough
    days = [0.0, 0.5, 1.0]
    assert trend(history(days, [1.0, 2.0, 3.0]), 10.0).forecast_watch is not None  # type: ignore[union-attr]


def test_a_falling_line_already_past_a_limit_has_reached_it() -> None:
    """After a repair the trend falls, but while its line is above a limit that limit stays
    reached (no 'never' forecast for a joint that is out of specification now)."""
    days = [0.0, 1.0, 2.0, 3.0]
    tr = trend(history(days, [9.0, 8.0, 7.0, 6.0]), watch=2.0, alert=6.5)
    assert tr is not None and tr.slope_per_day == pytest.approx(-1.0)
    assert tr.forecast_watch is not None and tr.forecast_watch.reached
    assert tr.forecast_alert is None  # the line is below 6.5 now and falling
    flat = trend(history(days, [3.0] * 4), watch=2.0, alert=None)
    assert flat is not None and flat.forecast_watch is not None and flat.forecast_watch.reached


def test_forecast_sentences() -> None:
    days = list(range(10))
    rising = trend(history(days, [0.5e-3 + 1e-5 * d for d in days]), 1e-3, 2e-3, "backlash_rad")
    text = forecast_sentence(rising, 10)
    assert "Over 10 cycles (9 days) backlash changes by +0.01 mrad/day." in text
    assert (
        "reaches the watch limit 1 mrad in about 41 days (95 % interval: 41 days to 41 days)"
        in text
    )
    # The last value is past the watch limit: the alert limit is the next one.
    assert "alert limit 2 mrad in about 141 days" in forecast_sentence(rising, 10, "watch")
    assert "no further limit" in forecast_sentence(rising, 10, "alert")
    assert next_forecast(rising, "alert") is None
    fc = next_forecast(rising, "watch")
    assert fc is not None and fc.limit_name == "alert"
    falling = trend(history(days, [1.0 - 0.01 * d for d in days]), 2.0, 3.0)
    assert "it is not rising" in forecast_sentence(falling)
    flat = trend(history(days, [1.0] * 10), 2.0, 3.0)
    assert "it is not rising" in forecast_sentence(flat)
    no_limits = trend(history(days, [1.0 + d for d in days]), None, None, "stiffness_nm_rad")
    assert "no limits are configured" in forecast_sentence(no_limits)
    assert "kN·m/rad/day" in forecast_sentence(no_limits)
    noisy = trend(history(list(range(8)), [1.0, 1.3, 0.9, 1.4, 1.0, 1.5, 1.1, 1.2]), 5.0)
    assert "to an open end (the rise is not certain)" in forecast_sentence(noisy)
    assert "2 point(s)" in forecast_sentence(None, 2)
    assert passed_limit(Status.WATCH) == "watch" and passed_limit(Status.OK) is None


def test_slope_interval_covers_the_true_slope_at_its_confidence() -> None:
    """Seeded Monte Carlo: the 95 % Theil-Sen interval holds the true wear rate in about 95 %
    of noisy histories, so the forecast interval means what it says."""
    rng = np.random.default_rng(11)
    days = np.arange(20, dtype=float)
    hits, n = 0, 300
    for _ in range(n):
        values = 0.5 + 0.02 * days + rng.normal(0.0, 0.05, days.size)
        tr = trend(history(list(days), list(values)), watch=2.0, alert=3.0)
        assert tr is not None
        hits += tr.slope_low_per_day <= 0.02 <= tr.slope_high_per_day
        fc = tr.forecast_watch
        assert fc is not None and fc.days_low <= fc.days
        assert fc.days_high is None or fc.days <= fc.days_high
    assert 0.88 <= hits / n <= 0.995


@pytest.mark.parametrize(
    ("status", "running", "failed", "signal"),
    [
        (Status.OK, False, False, Ne107.NORMAL),
        (Status.WATCH, False, False, Ne107.MAINTENANCE_REQUIRED),
        (Status.ALERT, False, True, Ne107.OUT_OF_SPECIFICATION),
        (Status.UNKNOWN, False, True, Ne107.FAILURE),
        (Status.UNKNOWN, False, False, Ne107.CHECK_FUNCTION),
        (Status.ALERT, True, False, Ne107.CHECK_FUNCTION),
    ],
)
def test_ne107_mapping(status: Status, running: bool, failed: bool, signal: Ne107) -> None:
    assert ne107_of(status, running=running, failed=failed) is signal
    assert signal.letter in "NMSFC"


def test_a_backlash_interval_wider_than_the_watch_step_cannot_judge() -> None:
    """Issue 29, point 3, for the backlash kind: an estimate +-1.2 mrad against a 1 mrad watch
    limit cannot tell a new gear from a worn one: "cannot judge" (UNKNOWN), never OK."""
    wide = dataclasses.replace(
        result(backlash=4e-4), backlash_low_rad=-0.8e-3, backlash_high_rad=1.6e-3
    )
    v = assess_backlash(wide, LIMITS)
    assert v.status is Status.UNKNOWN and v.reason.startswith("cannot judge: backlash 0.4 mrad")
    assert "+- 1.2 mrad (95 %), wider than the step to the watch limit 1 mrad" in v.reason
    narrow = dataclasses.replace(
        result(backlash=4e-4), backlash_low_rad=3e-4, backlash_high_rad=5e-4
    )
    assert assess_backlash(narrow, LIMITS).status is Status.OK
    # uncalibrated: the amplitude's interval against the amplitude limits, the same rule
    amp = dataclasses.replace(result(amplitude=0.05, backlash=None), amplitude_low_rad_s=-0.1,
                  amplitude_high_rad_s=0.2)  # fmt: skip
    assert assess_backlash(amp, LIMITS).status is Status.UNKNOWN
