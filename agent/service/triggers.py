"""When cycles are queued: a production stop long enough, a schedule, or on demand.

Pure functions over the controller's status and the clock; the controller task calls them on
every poll. A trigger only queues: the cycle still waits for a stop it fits in and for every
interlock (agent.service.interlocks).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TypeGuard

from agent.config.schedule import Schedule
from drivers.base import ControllerMode, ControllerStatus

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


def stopped(status: ControllerStatus | None) -> TypeGuard[ControllerStatus]:
    """A status read, and production stopped (a TypeGuard: the status is known after it)."""
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
