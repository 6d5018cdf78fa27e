"""When cycles are queued: a production stop long enough, a schedule, or on demand.

Pure functions over the controller's status and the clock; the controller task calls them on
every poll. A trigger only queues: the cycle still waits for a stop it fits in and for every
interlock (agent.service.interlocks).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from drivers.base import ControllerMode, ControllerStatus

_CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)


@dataclass(frozen=True)
class CronSpec:
    """`m h dom mon dow` (each `*`, `*/n`, `a`, `a-b`, `a-b/n`, comma lists; dow 0 and 7 are
    Sunday). As in cron, when both dom and dow are restricted either may match."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    days_any: bool
    weekdays_any: bool

    def matches(self, moment: dt.datetime) -> bool:
        if moment.minute not in self.minutes or moment.hour not in self.hours:
            return False
        if moment.month not in self.months:
            return False
        day_ok = moment.day in self.days
        weekday_ok = (moment.isoweekday() % 7) in self.weekdays
        if self.days_any or self.weekdays_any:
            return day_ok and weekday_ok
        return day_ok or weekday_ok

    def to_dict(self) -> dict[str, Any]:
        return {
            k: sorted(getattr(self, k)) for k in ("minutes", "hours", "days", "months", "weekdays")
        }


def _cron_field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        rng, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if rng == "*":
                a, b = low, high
            elif "-" in rng:
                a_text, b_text = rng.split("-", 1)
                a, b = int(a_text), int(b_text)
            else:
                a = b = int(rng)
        except ValueError:
            raise ValueError(
                f"expected a cron {name} field (*, */n, a, a-b, a-b/n, lists), found {text!r}"
            ) from None
        if step < 1 or not low <= a <= b <= high:
            raise ValueError(f"expected cron {name} values in {low}..{high}, found {text!r}")
        values.update(range(a, b + 1, step))
    if name == "day of week" and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values)


def parse_cron(text: str) -> CronSpec:
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 cron fields 'm h dom mon dow', found {text!r}")
    sets = [
        _cron_field(f, name, low, high)
        for f, (name, low, high) in zip(fields, _CRON_FIELDS, strict=True)
    ]
    minutes, hours, days, months, weekdays = sets
    return CronSpec(
        minutes,
        hours,
        days,
        months,
        weekdays,
        days_any=fields[2] == "*",
        weekdays_any=fields[4] == "*",
    )


@dataclass(frozen=True)
class Window:
    """A daily time window in minutes after midnight; it may wrap past midnight (22:00-06:00)."""

    start_min: int
    end_min: int

    def contains(self, moment: dt.datetime) -> bool:
        m = moment.hour * 60 + moment.minute
        if self.start_min <= self.end_min:
            return self.start_min <= m < self.end_min
        return m >= self.start_min or m < self.end_min

    def to_dict(self) -> dict[str, int]:
        return {"start_min": self.start_min, "end_min": self.end_min}


def _hhmm(text: str, whole: str) -> int:
    hours, sep, minutes = text.strip().partition(":")
    if not (sep and hours.isdigit() and minutes.isdigit() and len(minutes) == 2):
        raise ValueError(f"expected a window 'HH:MM-HH:MM', found {whole!r}")
    h, m = int(hours), int(minutes)
    if h > 23 or m > 59:
        raise ValueError(f"expected times of day 00:00..23:59 in the window, found {whole!r}")
    return h * 60 + m


def parse_window(text: str) -> Window:
    start, sep, end = text.partition("-")
    if not sep:
        raise ValueError(f"expected a window 'HH:MM-HH:MM', found {text!r}")
    window = Window(_hhmm(start, text), _hhmm(end, text))
    if window.start_min == window.end_min:
        raise ValueError(f"expected a window of non-zero length, found {text!r}")
    return window


@dataclass(frozen=True)
class Schedule:
    every_s: float | None = None
    cron: CronSpec | None = None
    window: Window | None = None


def schedule_of(every_s: float | None, cron: str | None, window: str | None) -> Schedule:
    return Schedule(
        every_s=every_s,
        cron=None if cron is None else parse_cron(cron),
        window=None if window is None else parse_window(window),
    )


# A wall clock found this far behind the last cron minute fired is taken to have been wrong
# then (set years ahead, say), not now: the memory is dropped, or the cron would stay silent
# until the clock caught up with the wrong date.
CRON_MEMORY_LIMIT_S = 2 * 86400.0


@dataclass(frozen=True)
class ScheduleState:
    """What the schedule remembers: when it last fired (monotonic s, and the local minute as
    'YYYY-MM-DDTHH:MM', whose text order is time order)."""

    last_fired_s: float | None = None
    last_minute: str | None = None


def _minute(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M")


def _cron_served(state: ScheduleState, now_local: dt.datetime) -> bool:
    """This minute, or a later one, already fired: the wall clock went back (an NTP step, a
    DST change of naive local time) and a minute seen before comes round again."""
    if state.last_minute is None:
        return False
    minute = _minute(now_local)
    if minute > state.last_minute:
        return False
    last = dt.datetime.strptime(state.last_minute, "%Y-%m-%dT%H:%M")
    behind_s = (last - now_local.replace(second=0, microsecond=0, tzinfo=None)).total_seconds()
    return behind_s <= CRON_MEMORY_LIMIT_S


def schedule_due(
    schedule: Schedule, state: ScheduleState, now_s: float, now_local: dt.datetime
) -> tuple[bool, ScheduleState]:
    """(fire now?, the new state). `now_s` is time.monotonic(), `now_local` the wall clock.

    `every_s` fires at start and then every period (inside the window: a period that ends
    outside it fires when the window opens); periods are counted on the monotonic clock, so a
    wall clock jumping forward fires no burst and one jumping back delays nothing. `cron`
    fires once in each matching minute inside the window, and never again for a minute at or
    before the last one it fired: when the wall clock goes back, the minutes it lives again
    do not fire twice (unless it went back more than CRON_MEMORY_LIMIT_S); a forward jump
    skips the minutes jumped over, with no catch-up burst."""
    if schedule.window is not None and not schedule.window.contains(now_local):
        return False, state
    if schedule.cron is not None:
        if not _cron_served(state, now_local) and schedule.cron.matches(now_local):
            return True, ScheduleState(now_s, _minute(now_local))
        return False, state
    if schedule.every_s is not None and (
        state.last_fired_s is None or now_s - state.last_fired_s >= schedule.every_s
    ):
        return True, ScheduleState(now_s, state.last_minute)
    return False, state


def stopped(status: ControllerStatus | None) -> bool:
    return status is not None and status.mode is ControllerMode.STOPPED


def stop_begins(
    previous: ControllerStatus | None, current: ControllerStatus, min_expected_stop_s: float
) -> bool:
    """A production stop starts now and is announced long enough to be worth queueing for.

    A stop of unknown length only counts when no minimum is asked for.
    """
    if stopped(previous) or not stopped(current):
        return False
    expected = current.stop_expected_s
    if expected is None:
        return min_expected_stop_s == 0.0
    return expected >= min_expected_stop_s
