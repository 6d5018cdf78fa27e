"""Schedules under a wall clock that jumps (NTP steps, a clock set by hand, naive local time
through a DST change): periods run on the monotonic clock, cron minutes on the wall clock.

Each test polls `schedule_due` as the controller task does (every 10 s of monotonic time, here
simulated) while the wall clock is stepped at given monotonic moments.
"""

from __future__ import annotations

import datetime as dt
import itertools

from agent.config.schedule import schedule_of
from agent.service.triggers import CRON_MEMORY_LIMIT_S, ScheduleState, schedule_due
from tests.support.summary import fault

POLL_S = 10.0
DAY = dt.timedelta(days=1)
HOUR = dt.timedelta(hours=1)
D = dt.datetime(2026, 3, 10)  # naive local time, as the daemon passes dt.datetime.now()


def poll(
    schedule_args: tuple[float | None, str | None, str | None],
    start: dt.datetime,
    duration_s: float,
    jumps: dict[float, dt.timedelta],
) -> list[tuple[float, dt.datetime]]:
    """(monotonic s, wall moment) of every firing; `jumps` steps the wall clock by the given
    amount when the monotonic clock passes each key."""
    schedule = schedule_of(*schedule_args)
    state = ScheduleState()
    offset = dt.timedelta()
    pending = sorted(jumps.items())
    fired = []
    now_s = 0.0
    while now_s <= duration_s:
        while pending and pending[0][0] <= now_s:
            offset += pending.pop(0)[1]
        wall = start + dt.timedelta(seconds=now_s) + offset
        due, state = schedule_due(schedule, state, now_s, wall)
        if due:
            fired.append((now_s, wall))
        now_s += POLL_S
    return fired


def minutes(fired: list[tuple[float, dt.datetime]]) -> list[str]:
    return [wall.strftime("%Y-%m-%d %H:%M") for _, wall in fired]


def test_a_daily_cron_does_not_fire_again_when_the_clock_goes_back_an_hour() -> None:
    # Fired at 03:00, then at 03:30 the clock is stepped back to 02:30: 03:00 comes round again.
    fired = poll(
        (None, "0 3 * * *", None), D.replace(hour=2, minute=55), 2 * 3600, {35 * 60: -HOUR}
    )
    assert minutes(fired) == ["2026-03-10 03:00"]
    fault("clock back 1 h: daily cron fired twice", records_lost=len(fired) - 1)


def test_a_cron_of_many_minutes_fires_each_intended_minute_once_through_a_step_back() -> None:
    # */15: 03:00, 03:15, 03:30 fire; at 03:40 the clock goes back to 02:40; 02:45 ... 03:30
    # were all served already, the next one to fire is 03:45.
    fired = poll(
        (None, "*/15 * * * *", None), D.replace(hour=2, minute=58), 120 * 60, {42 * 60: -HOUR}
    )
    got = minutes(fired)
    assert len(got) == len(set(got)), got
    assert got == ["2026-03-10 03:00", "2026-03-10 03:15", "2026-03-10 03:30", "2026-03-10 03:45"]


def test_naive_local_time_through_the_autumn_dst_change_fires_once() -> None:
    # 02:59 local becomes 02:00 again: a cron at 02:30 sees its minute twice in wall time.
    fired = poll(
        (None, "30 2 * * *", None), D.replace(hour=2, minute=20), 2 * 3600, {40 * 60: -HOUR}
    )
    assert minutes(fired) == ["2026-03-10 02:30"]


def test_a_twice_daily_cron_through_a_step_back_of_a_day_serves_each_minute_once() -> None:
    # 03:00 and 15:00. Fired at D 03:00; at 03:30 the clock goes back to D-1 03:30. D-1 15:00 and
    # D 03:00 lie before the last minute fired: served already, they do not fire again.
    fired = poll(
        (None, "0 3,15 * * *", None), D.replace(hour=2, minute=59), 2.1 * 86400, {31 * 60: -DAY}
    )
    got = minutes(fired)
    assert got == ["2026-03-10 03:00", "2026-03-10 15:00", "2026-03-11 03:00"]
    gaps_s = [b[0] - a[0] for a, b in itertools.pairwise(fired)]
    assert min(gaps_s) >= 12 * 3600 - POLL_S  # never closer than the cron's own spacing
    fault("clock back 1 day: cron minutes fired twice", records_lost=len(got) - len(set(got)))


def test_a_cron_is_not_silenced_by_a_clock_that_was_once_set_years_ahead() -> None:
    # The clock said 2031 when the cron fired; corrected back to 2026, the memory of a minute
    # five years ahead is dropped and the cron goes on at its minutes.
    fired = poll(
        (None, "0 * * * *", None),
        D.replace(year=2031, minute=59),
        3 * 3600,
        {5 * 60: D - D.replace(year=2031)},
    )
    assert minutes(fired) == ["2031-03-10 01:00", "2026-03-10 02:00", "2026-03-10 03:00"]
    assert (D.replace(year=2031) - D).total_seconds() > CRON_MEMORY_LIMIT_S


def test_a_forward_jump_skips_cron_minutes_without_a_burst() -> None:
    # Hourly; at 03:30 the clock jumps 5 h ahead to 08:30: 04:00 .. 08:00 are skipped, not
    # fired all at once.
    fired = poll(
        (None, "0 * * * *", None), D.replace(hour=2, minute=59), 2.5 * 3600, {31 * 60: 5 * HOUR}
    )
    assert minutes(fired) == ["2026-03-10 03:00", "2026-03-10 09:00", "2026-03-10 10:00"]


def test_every_s_fires_no_burst_after_a_forward_jump_and_no_delay_after_a_back_jump() -> None:
    # Hourly for 5 h of real time; the wall clock jumps +1 day, +6 h, then back 1 day and 3 h.
    jumps = {1800.0: DAY, 5000.0: 6 * HOUR, 9000.0: -DAY, 12000.0: -3 * HOUR}
    fired = poll((3600.0, None, None), D.replace(hour=12), 5 * 3600, jumps)
    at_s = [s for s, _ in fired]
    assert at_s == [0.0, 3600.0, 7200.0, 10800.0, 14400.0, 18000.0]
    fault(
        "clock jumps +1 d, +6 h, -1 d, -3 h: every_s burst or delay",
        records_lost=abs(len(at_s) - 6),
    )


def test_every_s_with_a_window_fires_once_when_a_jump_lands_inside_it() -> None:
    # Noon, outside 22:00-06:00; after 2 h the clock jumps 10 h ahead into the night window.
    fired = poll((3600.0, None, "22:00-06:00"), D.replace(hour=12), 3 * 3600, {7200.0: 10 * HOUR})
    assert [s for s, _ in fired] == [7200.0, 10800.0]
