"""The value types every layer shares: a joint's health status, its NAMUR NE 107 signal, and
a point of an indicator's history.

A leaf (no numpy, no scipy): the history records them, the verdicts and trends produce them,
the report and the publishers show them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    WATCH = "watch"
    ALERT = "alert"
    UNKNOWN = "unknown"

    @property
    def severity(self) -> int:
        """Order for 'worst of': UNKNOWN sits between OK and WATCH (it needs a look, not a fix)."""
        return _SEVERITY[self]


_SEVERITY = {Status.OK: 0, Status.UNKNOWN: 1, Status.WATCH: 2, Status.ALERT: 3}


def worst(statuses: Sequence[Status]) -> Status:
    """The most severe status; OK for none."""
    return max(statuses, key=lambda s: s.severity, default=Status.OK)


class Ne107(StrEnum):
    """NAMUR NE 107 status signals, the form plant asset-management systems read."""

    NORMAL = "normal"  # N: valid estimate, inside the watch limit
    MAINTENANCE_REQUIRED = "maintenance_required"  # M: wear past the watch limit, plan work
    OUT_OF_SPECIFICATION = "out_of_specification"  # S: past the alert limit
    FAILURE = "failure"  # F: the health of this joint could not be measured (cycle/analysis error)
    CHECK_FUNCTION = "check_function"  # C: a test cycle is running, or no valid estimate yet

    @property
    def letter(self) -> str:
        return _NE107_LETTER[self]


_NE107_LETTER = {
    Ne107.NORMAL: "N",
    Ne107.MAINTENANCE_REQUIRED: "M",
    Ne107.OUT_OF_SPECIFICATION: "S",
    Ne107.FAILURE: "F",
    Ne107.CHECK_FUNCTION: "C",
}


def ne107_of(status: Status, *, running: bool = False, failed: bool = False) -> Ne107:
    """NE 107 signal of a joint: `running` while its test cycle moves the machine, `failed` when
    its last cycle or analysis ended in an error (not when an interlock merely refused it)."""
    if running:
        return Ne107.CHECK_FUNCTION
    if status is Status.ALERT:
        return Ne107.OUT_OF_SPECIFICATION
    if status is Status.WATCH:
        return Ne107.MAINTENANCE_REQUIRED
    if status is Status.OK:
        return Ne107.NORMAL
    return Ne107.FAILURE if failed else Ne107.CHECK_FUNCTION


@dataclass(frozen=True)
class TrendPoint:
    """One recorded value; `low`/`high` its 95 % interval when the estimate came with one
    (backlash, amplitude), `ambiguous` when its fit was."""

    time_iso: str
    value: float
    low: float | None = None
    high: float | None = None
    ambiguous: bool = False

    @property
    def time(self) -> datetime:
        return datetime.fromisoformat(self.time_iso)

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.low is None or self.high is None:
            return None
        return self.low, self.high

    def to_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"time": self.time_iso, "value": self.value}
        # Only what is known: points without an interval keep the two keys they always had.
        if self.interval is not None:
            found["low"], found["high"] = self.interval
        if self.ambiguous:
            found["ambiguous"] = True
        return found
