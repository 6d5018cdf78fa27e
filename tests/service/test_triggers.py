"""Triggers (production stop, schedule) and the cycle queue: pure functions, no I/O."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.schedule import parse_cron, parse_window, schedule_of
from agent.service.queue import CycleQueue, PendingCycle
from agent.service.triggers import ScheduleState, schedule_due, stop_begins
from drivers.base import ControllerMode, ControllerStatus


def status(mode: ControllerMode, expected_s: float | None = None) -> ControllerStatus:
    return ControllerStatus(mode=mode, permission=True, stop_expected_s=expected_s)


RUN, STOP = ControllerMode.PRODUCTION, ControllerMode.STOPPED


# --- production stop ----------------------------------------------------------------------------


def test_a_stop_triggers_once_when_it_begins_and_is_long_enough() -> None:
    assert stop_begins(status(RUN), status(STOP, 600.0), 300.0)
    assert stop_begins(None, status(STOP, 600.0), 300.0)  # already stopped when we connect
    assert not stop_begins(status(STOP, 600.0), status(STOP, 599.0), 300.0)  # same stop
    assert not stop_begins(status(RUN), status(STOP, 120.0), 300.0)  # too short
    assert not stop_begins(status(RUN), status(RUN), 0.0)
    assert not stop_begins(status(RUN), status(ControllerMode.MANUAL), 0.0)


def test_a_stop_of_unknown_length_counts_only_without_a_minimum() -> None:
    assert stop_begins(status(RUN), status(STOP, None), 0.0)
    assert not stop_begins(status(RUN), status(STOP, None), 1.0)


# --- cron and windows ----------------------------------------------------------------------------


def test_cron_fields() -> None:
    spec = parse_cron("*/15 2-4 * * 1-5")
    assert spec.minutes == frozenset({0, 15, 30, 45})
    assert spec.hours == frozenset({2, 3, 4})
    monday_3_15 = dt.datetime(2026, 11, 23, 3, 15)
    assert spec.matches(monday_3_15)
    assert not spec.matches(monday_3_15.replace(minute=16))
    assert not spec.matches(dt.datetime(2026, 11, 22, 3, 15))  # a Sunday
    sunday = parse_cron("0 0 * * 7")
    assert sunday.weekdays == frozenset({0})
    assert sunday.matches(dt.datetime(2026, 11, 22, 0, 0))


def test_cron_day_of_month_or_day_of_week_as_cron_does() -> None:
    spec = parse_cron("0 6 1 * 1")  # the 1st of the month, or any Monday
    assert spec.matches(dt.datetime(2026, 12, 1, 6, 0))  # a Tuesday, the 1st
    assert spec.matches(dt.datetime(2026, 11, 23, 6, 0))  # a Monday
    assert not spec.matches(dt.datetime(2026, 11, 24, 6, 0))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("* * * *", "expected 5 cron fields"),
        ("61 * * * *", "expected cron minute values in 0..59"),
        ("* 24 * * *", "expected cron hour values in 0..23"),
        ("x * * * *", "expected a cron minute field"),
        ("*/0 * * * *", "expected cron minute values"),
        ("5-1 * * * *", "expected cron minute values"),
    ],
)
def test_bad_cron_is_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cron(text)


def test_windows_including_past_midnight() -> None:
    day = parse_window("08:00-17:30")
    assert day.contains(dt.datetime(2026, 1, 1, 8, 0))
    assert day.contains(dt.datetime(2026, 1, 1, 17, 29))
    assert not day.contains(dt.datetime(2026, 1, 1, 17, 30))
    night = parse_window("22:00-06:00")
    assert night.contains(dt.datetime(2026, 1, 1, 23, 0))
    assert night.contains(dt.datetime(2026, 1, 1, 5, 59))
    assert not night.contains(dt.datetime(2026, 1, 1, 12, 0))
    for bad in ("8-17", "08:00", "25:00-26:00", "08:00-08:00", "08:0-09:00"):
        with pytest.raises(ValueError, match="window"):
            parse_window(bad)


def test_every_s_fires_at_start_then_each_period_inside_the_window() -> None:
    schedule = schedule_of(3600.0, None, "22:00-06:00")
    state = ScheduleState()
    night, noon = dt.datetime(2026, 1, 1, 23, 0), dt.datetime(2026, 1, 1, 12, 0)
    due, state = schedule_due(schedule, state, 0.0, noon)
    assert not due  # outside the window
    due, state = schedule_due(schedule, state, 10.0, night)
    assert due
    due, state = schedule_due(schedule, state, 3000.0, night)
    assert not due
    due, state = schedule_due(schedule, state, 3610.0, night)
    assert due


def test_cron_fires_once_per_matching_minute() -> None:
    schedule = schedule_of(None, "30 2 * * *", None)
    state = ScheduleState()
    fired = []
    for second in range(0, 180, 10):  # 02:29:00 .. 02:31:50
        moment = dt.datetime(2026, 1, 1, 2, 29) + dt.timedelta(seconds=second)
        due, state = schedule_due(schedule, state, float(second), moment)
        if due:
            fired.append(moment)
    assert fired == [dt.datetime(2026, 1, 1, 2, 30)]


# --- the queue ----------------------------------------------------------------------------------


def pending(
    joint: str, queued_at_s: float, estimate_s: float = 10.0, order: int = 0
) -> PendingCycle:
    return PendingCycle(joint, "backlash", queued_at_s, "test", estimate_s, order)


def test_a_joint_is_queued_once_and_keeps_its_place() -> None:
    q = CycleQueue().add(pending("a", 5.0)).add(pending("b", 6.0)).add(pending("a", 9.0))
    assert [p.joint for p in q.by_wait()] == ["a", "b"]
    assert q.by_wait()[0].queued_at_s == 5.0
    assert len(q.remove("a", "backlash")) == 1
    assert [p.joint for p in q.keep_only({"b"}).items] == ["b"]


def test_cycles_are_spread_over_stops_longest_waiting_first() -> None:
    q = CycleQueue()
    for i, name in enumerate(["j1", "j2", "j3", "j4"]):
        q = q.add(pending(name, 0.0, 10.0, order=i))
    q = q.add(pending("j0", -5.0, 10.0, order=9))  # waited longest
    stops = []
    while len(q):
        plan = q.plan(25.0, 2.0)  # two 10 s cycles (+ 2 s margin each) per 25 s stop
        assert plan, "a cycle that fits a stop must be planned"
        stops.append([p.joint for p in plan])
        for p in plan:
            q = q.remove(p.joint, p.kind)
    assert stops == [["j0", "j1"], ["j2", "j3"], ["j4"]]


def test_a_stop_too_short_plans_nothing_and_unknown_length_plans_all() -> None:
    q = CycleQueue().add(pending("a", 0.0, 10.0)).add(pending("b", 1.0, 3.0))
    assert [p.joint for p in q.plan(5.0, 1.0)] == ["b"]  # a does not fit; b behind it does
    assert q.plan(2.0, 1.0) == ()
    assert [p.joint for p in q.plan(None, 1.0)] == ["a", "b"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1e4), st.floats(0.1, 100.0)), min_size=0, max_size=12),
    st.floats(0.0, 500.0),
    st.floats(0.0, 10.0),
)
def test_a_plan_always_fits_its_stop_and_never_skips_a_cycle_that_fits(
    items: list[tuple[float, float]], available_s: float, margin_s: float
) -> None:
    q = CycleQueue()
    for i, (queued_at_s, estimate_s) in enumerate(items):
        q = q.add(pending(f"j{i}", queued_at_s, estimate_s, order=i))
    plan = q.plan(available_s, margin_s)
    used_s = sum(p.estimate_s + margin_s for p in plan)
    assert used_s <= available_s + 1e-9
    left_s = available_s - used_s
    for p in q.items:
        if p not in plan:
            assert p.estimate_s + margin_s > left_s - 1e-9
    waits = [p.queued_at_s for p in plan]
    assert waits == sorted(waits)


def test_schedule_mistakes_in_the_config_name_file_and_line(tmp_path: Path) -> None:
    from agent.config.load import config_issues, load_config

    text = """\
controllers:
  - name: robot
    driver: sim
    triggers:
      production_stop: {min_expected_stop_s: 300}
      schedule: {cron: "61 * * * *", window: "8-17"}
    joints:
      - {name: j1, index: 1, gear_ratio: 40, backlash_cycle: {motor_speed_rps: 100}}
"""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    issues = [str(i) for i in config_issues(path)]
    assert any("c.yaml:6" in i and "cron" in i and "0..59" in i for i in issues), issues
    assert any("c.yaml:6" in i and "window" in i and "HH:MM-HH:MM" in i for i in issues), issues
    path.write_text(text.replace('cron: "61 * * * *", window: "8-17"', "every_s: 3600, cron: x"))
    assert any("exactly one of every_s or cron" in str(i) for i in config_issues(path))
    path.write_text(text.replace('cron: "61 * * * *", window: "8-17"', 'cron: "0 2 * * 1-5"'))
    triggers = load_config(path).controllers[0].triggers
    assert triggers.production_stop is not None
    assert triggers.production_stop.min_expected_stop_s == 300
    assert triggers.schedule is not None and triggers.schedule.cron == "0 2 * * 1-5"
