"""Schedules as the config writes them: `every_s`, a cron line, a local-time window.

Parsed once when the config is loaded, so a bad cron field or window is a config error with its
line; when a schedule fires is agent.service.triggers'.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

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
