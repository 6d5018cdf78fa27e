"""What to do and by when (issue 16 point 6): the recommendation a planner acts on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.health.status import Ne107, Status, TrendPoint
from agent.health.trend import trend
from agent.report.action import recommend

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def rising(n: int = 6, step_days: float = 7.0, start: float = 0.5e-3, per_day: float = 0.01e-3):
    points = [
        TrendPoint(
            (T0 + timedelta(days=k * step_days)).isoformat(), start + per_day * k * step_days
        )
        for k in range(n)
    ]
    return trend(points, watch=0.8e-3, alert=1.0e-3, indicator="backlash_rad")


def test_past_watch_plans_service_before_the_early_end_of_the_alert_forecast() -> None:
    tr = rising(start=0.6e-3)  # 0.6 .. 0.95 mrad over 35 days: past watch, alert ahead
    assert tr is not None and tr.forecast_alert is not None
    rec = recommend(Status.WATCH, Ne107.MAINTENANCE_REQUIRED, tr)
    fc = tr.forecast_alert
    last = datetime.fromisoformat(tr.last_time_iso)
    assert rec.service_by == (last + timedelta(days=fc.days_low)).date()
    assert rec.forecast_date == (last + timedelta(days=fc.days)).date()
    assert rec.service_by is not None and rec.forecast_date is not None
    assert rec.service_by <= rec.forecast_date  # the early end: never later than the line's date
    assert rec.action.startswith(f"plan service before {rec.service_by.isoformat()}")
    assert rec.to_dict()["service_by"] == rec.service_by.isoformat()


def test_each_state_gets_its_action_and_severity_orders_them() -> None:
    tr = rising()
    alert = recommend(Status.ALERT, Ne107.OUT_OF_SPECIFICATION, tr)
    failed = recommend(Status.UNKNOWN, Ne107.FAILURE, None, error="driver: timeout")
    watch = recommend(Status.WATCH, Ne107.MAINTENANCE_REQUIRED, None)
    nothing = recommend(
        Status.UNKNOWN, Ne107.CHECK_FUNCTION, None, has_value=False, reason="not calibrated"
    )
    ok = recommend(Status.OK, Ne107.NORMAL, rising(start=0.3e-3))
    assert alert.action == "service now: past the alert limit"
    assert failed.action == "check the test cycle: driver: timeout"
    assert watch.action == "plan service: past the watch limit; no alert date forecast yet"
    assert nothing.action == "no valid estimate yet: not calibrated"
    assert ok.action.startswith("none; watch limit forecast for 2026-")
    assert [r.severity for r in (alert, failed, watch, nothing, ok)] == [4, 3, 2, 1, 0]
    dry = recommend(Status.UNKNOWN, Ne107.CHECK_FUNCTION, None, outcome="dry_run")
    assert dry.action == "none: dry run, nothing measured" and dry.severity == 0


def test_no_date_from_too_little_history() -> None:
    tr = rising(n=5, step_days=2.0 / 1440.0, start=0.85e-3)  # five cycles two minutes apart
    assert tr is not None and tr.forecast_withheld is not None
    rec = recommend(Status.WATCH, Ne107.MAINTENANCE_REQUIRED, tr)
    assert rec.service_by is None and "not enough history yet" in rec.action
