"""Every RTDE package, read through one or more independent ur_rtde receive interfaces.

ur_rtde's receive interface keeps only the newest package: its C++ thread overwrites the robot
state, and if it reads two packages at once it drops the older one. A poller that is not
scheduled for one period (2 ms at 500 Hz) therefore loses a package for good. On a real-time
kernel with a core to itself that never happens; on an ordinary or shared machine (or a virtual
CPU the host pauses for a few ms) it does: on the shared 2-CPU virtual machine this was measured
on, with other jobs keeping it busy, one path alone lost 1 to 14 packages a minute even at
real-time priority (the pollers saw pauses of up to 15 ms).

So the worker may open several receive interfaces (paths) on the same recipe. Each path's
receive thread and its poller run at real-time priority pinned to their own CPU; the reader merges
the paths by controller tick (timestamp x rate). A package is missed only when every path missed
it: measured there over four minutes, two paths lost 0, 1, 0 and 0 packages a minute.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

Row = tuple[Any, ...]
# Row layout: timestamp, then these receive-interface getters, in this order.
GETTERS = (
    "getActualQ",
    "getActualQd",
    "getActualCurrent",
    "getTargetQ",
    "getTargetQd",
    "getTargetCurrent",
    "getJointTemperatures",
    "getRobotMode",
    "getSafetyStatusBits",
    "getRuntimeState",
)
_POLL_S = 0.0002  # 10 polls per 500 Hz period
_GIVE_UP_PERIODS = 3  # a tick absent this long after a later one arrived is lost on every path


class StreamError(Exception):
    """The stream cannot be trusted: garbled timestamps or packages arriving too fast to read."""


class GapFiller:
    """Packages lost during motion: a short run is filled by linear interpolation and counted,
    a longer run or too many in one cycle is a StreamError.

    Even two receive paths lose a package now and then on an ordinary edge PC (about one a
    minute, see above). Aborting a cycle for each would abort one test cycle in ten and leave
    the joint away from its test pose; the joint moves at constant speed (or along a smooth
    trajectory) and a 2-4 ms hole in a 500 Hz capture is bridged by a straight line far inside
    the encoder's noise. Every filled package is counted and its time listed in the capture's
    metadata, so an estimate can be judged with that known.
    """

    def __init__(self, hz: float, max_run: int, max_total: int) -> None:
        self.hz = hz
        self.max_run = max_run
        self.max_total = max_total
        self.total = 0
        self.filled_at_s: list[float] = []

    def fill(self, before: Row, after: Row, missed: int) -> list[Row]:
        """The `missed` rows between `before` and `after`, or StreamError past the limits."""
        at_s = after[0]
        if missed > self.max_run:
            raise StreamError(
                f"{missed} RTDE package(s) missed at t = {at_s:.3f} s (at most {self.max_run} "
                "in a row are bridged)"
            )
        if self.total + missed > self.max_total:
            raise StreamError(
                f"{missed} RTDE package(s) missed at t = {at_s:.3f} s, {self.total + missed} in "
                f"this cycle (at most {self.max_total} are bridged)"
            )
        self.total += missed
        rows = []
        for k in range(1, missed + 1):
            w = k / (missed + 1)
            rows.append(_between(before, after, w, before[0] + k / self.hz))
            self.filled_at_s.append(round(rows[-1][0], 6))
        return rows


def _between(a: Row, b: Row, w: float, ts: float) -> Row:
    """A row a fraction w of the way from a to b: vectors interpolated, modes and bits as a's
    (a mode change inside the hole shows in b, which is checked as every package is)."""
    out: list[Any] = [ts]
    for x, y in zip(a[1:], b[1:], strict=True):
        if isinstance(x, list | tuple):
            out.append([xi + w * (yi - xi) for xi, yi in zip(x, y, strict=True)])
        else:
            out.append(x)
    return tuple(out)


def realtime(tid: int, priority: int, cpu: int | None = None) -> None:
    """SCHED_FIFO (and a CPU) for a thread of this process; 0 is the calling thread."""
    try:
        os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
        if cpu is not None:
            os.sched_setaffinity(tid, {cpu})
    except OSError as exc:
        print(f"ur_rtde worker: no real-time priority for thread {tid}: {exc}", flush=True)


def threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def path_cpus(n: int) -> list[int | None]:
    """One CPU per path, spread over the CPUs this process may use."""
    cpus = sorted(os.sched_getaffinity(0))
    return [cpus[i % len(cpus)] for i in range(n)] if len(cpus) > 1 else [None] * n


def _same(a: list[float], b: list[float]) -> bool:
    """Equal joint vectors, NaN equal to NaN (a garbled value is no new package by itself)."""
    if len(a) != len(b):
        return False
    return all(x == y or (x != x and y != y) for x, y in zip(a, b, strict=True))


def read_row(recv: Any, ts: float) -> Row:
    """All fields of one package: read until the timestamp is the same before and after."""
    getters: list[Callable[[], Any]] = [getattr(recv, g) for g in GETTERS]
    for _ in range(3):
        row = (ts, *(g() for g in getters))
        after = recv.getTimestamp()
        if after == ts:
            return row
        ts = after
    raise StreamError("RTDE packages arrive faster than they can be read")


class StreamReader:
    """Merges the packages the pollers of all paths see, in controller-tick order."""

    def __init__(
        self, recvs: list[Any], frequency_hz: float, rt_priority: int, cpus: list[int | None]
    ) -> None:
        self.recvs = recvs
        self.hz = frequency_hz
        self.rt_priority = rt_priority
        self.cpus = cpus
        self._rows: dict[int, Row] = {}
        self._latest = [-1] * len(recvs)
        self._error: str | None = None
        self._cond = threading.Condition()
        self._running = False
        self._threads: list[threading.Thread] = []
        self._next: int | None = None
        self._later_since: float | None = None
        self.last_new_at = time.monotonic()
        self.missed_by_path = [0] * len(recvs)

    def __enter__(self) -> StreamReader:
        self._running = True
        for i in range(len(self.recvs)):
            t = threading.Thread(target=self._poll, args=(i,), name=f"rtde path {i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc: object) -> None:
        self._running = False
        for t in self._threads:
            t.join(1.0)

    def _poll(self, i: int) -> None:
        if self.rt_priority > 0:
            realtime(0, self.rt_priority, self.cpus[i])
        recv = self.recvs[i]
        last = recv.getTimestamp()
        last_q = recv.getActualQ()
        try:
            while self._running:
                ts = recv.getTimestamp()
                if ts == last:
                    # A package can only be told from the one before by its timestamp: one that
                    # repeats it with other data (a stalled controller clock) would vanish here
                    # and leave the rows after it mislabelled. ur_rtde stores a package's
                    # variables in recipe order, the timestamp first: new data under an
                    # unchanged timestamp is such a package.
                    if not _same(recv.getActualQ(), last_q) and recv.getTimestamp() == last:
                        raise StreamError(
                            f"RTDE timestamp {last:.4f} s repeated by a package with other data "
                            "(the controller clock stalled or a package was duplicated and changed)"
                        )
                    time.sleep(_POLL_S)
                    continue
                if not math.isfinite(ts):
                    raise StreamError(f"RTDE stream is garbled (timestamp {ts})")
                row = read_row(recv, ts)
                tick = round(row[0] * self.hz)
                if not math.isclose(row[0] * self.hz, tick, abs_tol=0.01):
                    raise StreamError(
                        f"RTDE timestamp {row[0]:.4f} s is off the {self.hz:g} Hz grid: packages "
                        f"come faster than the {self.hz:g} Hz asked for, or the stream is garbled"
                    )
                if tick <= self._latest[i]:
                    # One connection's packages cannot overtake each other: the controller sent
                    # an older package again, or its clock went back.
                    raise StreamError(
                        f"RTDE timestamp went back from {self._latest[i] / self.hz:.4f} s to "
                        f"{row[0]:.4f} s (a package out of order, or the controller clock jumped)"
                    )
                with self._cond:
                    if self._latest[i] >= 0 and tick > self._latest[i] + 1:
                        self.missed_by_path[i] += tick - self._latest[i] - 1
                    self._rows.setdefault(tick, row)
                    self._latest[i] = max(self._latest[i], tick)
                    self.last_new_at = time.monotonic()
                    self._cond.notify_all()
                last, last_q = row[0], row[1]
        except StreamError as exc:
            with self._cond:
                self._error = str(exc)
                self._cond.notify_all()

    def next_row(self, wait_s: float) -> tuple[Row, int] | None:
        """The next package in tick order and how many ticks before it every path missed.

        None when nothing is due within `wait_s` (the caller checks for a frozen stream).
        """
        with self._cond:
            deadline = time.monotonic() + wait_s
            while True:
                if self._error is not None:
                    raise StreamError(self._error)
                if self._rows:
                    if self._next is None:
                        self._next = min(self._rows)
                    if self._next in self._rows:
                        return self._take(self._next, 0)
                    out = self._skip_lost(self._next)
                    if out is not None:
                        return out
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 1.0 / self.hz))

    def _take(self, tick: int, missed: int) -> tuple[Row, int]:
        """Hand out the package of `tick`; the one awaited next is tick + 1."""
        row = self._rows.pop(tick)
        self._next = tick + 1
        self._later_since = None
        # Anything older than what we hand out can no longer be used.
        for k in [k for k in self._rows if k < self._next]:
            del self._rows[k]
        return row, missed

    def _skip_lost(self, awaited: int) -> tuple[Row, int] | None:
        """Give up on the awaited tick once every path is past it (or has been for a while)."""
        later = min((k for k in self._rows if k > awaited), default=None)
        if later is None:
            return None
        now = time.monotonic()
        if self._later_since is None:
            self._later_since = now
        all_past = all(latest > awaited for latest in self._latest)
        if not all_past and now - self._later_since < _GIVE_UP_PERIODS / self.hz:
            return None
        return self._take(later, later - awaited)

    def connected(self) -> bool:
        return any(r.isConnected() for r in self.recvs)
