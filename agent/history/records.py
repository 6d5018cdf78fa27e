"""What the history holds: the records of cycles, estimates and reports, the vocabularies of
their fields (how a cycle ended, what started it), and the form a value takes in its column.
Plain frozen values; the SQLite side is agent.history.store's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.estimation.backlash.result import BacklashResult
from agent.health.status import Ne107, Status, ne107_of
from agent.history.schema import StoreError


class Outcome(StrEnum):
    """How a cycle ended, as the history records it."""

    OK = "ok"  # measured and analysed: its estimates are data
    ABORTED = "aborted"  # motion stopped before the capture was complete
    REJECTED = "rejected"  # refused before motion, or a capture the estimator cannot trust
    ERROR = "error"  # the cycle or its analysis failed: the joint's health is unknown now
    DRY_RUN = "dry_run"  # `jha run --dry-run`: interlocks checked, nothing moved (never recorded)


# What the history accepts (a dry run is reported, never recorded).
OUTCOMES = tuple(o.value for o in Outcome if o is not Outcome.DRY_RUN)


class Trigger(StrEnum):
    """What started a cycle."""

    PRODUCTION_STOP = "production_stop"
    SCHEDULE = "schedule"
    ON_DEMAND = "on_demand"  # `jha cycle now`
    ONCE = "once"  # `jha run --once`
    MANUAL = "manual"  # an estimate recorded from the command line (--record)
    RECOVERED = "recovered"  # a capture a crash left unrecorded, analysed at the next start


# What started a cycle. Checked here rather than by a CHECK constraint, which SQLite cannot
# alter without rebuilding the table; "manual" is an estimate recorded from the command line.
TRIGGERS = tuple(t.value for t in Trigger)

# Cycles timed by the daemon's clock as they run. The wall clock may be stepped back under a
# running daemon (NTP, a clock set by hand): such a cycle then carries an earlier time than the
# ones before it, yet it is the newer. A cycle recorded more than CLOCK_STEP_S before the latest
# time the daemon recorded so far is taken as such, and sorts (seq_at) at that latest time, so
# trends and latest() keep it after the cycles recorded before the step. Cycles a little out of
# order (a stop's fit finishing after the next stop's) still sort by their own time, as do
# cycles given their time ("manual": recorded from the command line; "recovered": a capture
# from before a crash, recorded at the next start).
CLOCK_STEP_S = 600.0
CLOCKED_TRIGGERS = tuple(
    t.value for t in (Trigger.PRODUCTION_STOP, Trigger.SCHEDULE, Trigger.ON_DEMAND, Trigger.ONCE)
)

# What a backlash cycle records (estimates_for); every other indicator is "other" to the report.
BACKLASH_INDICATORS = ("amplitude_rad_s", "backlash_rad")
# Keys of an estimate's detail that the history reads back with the value (TrendPoint): its
# 95 % interval and whether its fit was ambiguous. Estimates recorded before intervals were
# (or of indicators without one) simply lack them.
INTERVAL_LOW, INTERVAL_HIGH, AMBIGUOUS = "interval_low", "interval_high", "ambiguous"


@dataclass(frozen=True)
class Estimate:
    """One indicator value to record with a cycle; `detail` must be JSON-serialisable."""

    indicator: str
    value: float
    unit: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "indicator": self.indicator,
            "value": self.value,
            "unit": self.unit,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True)
class CycleRecord:
    id: int
    controller: str
    joint: str
    kind: str
    started_at: str
    finished_at: str | None
    outcome: str
    reason: str
    capture_path: str | None
    estimates: tuple[Estimate, ...] = ()
    status: str | None = None
    status_reason: str | None = None
    ne107: str | None = None
    trigger: str | None = None
    report_message_id: str | None = None
    report_path: str | None = None

    def estimate(self, indicator: str) -> Estimate | None:
        return next((e for e in self.estimates if e.indicator == indicator), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "controller": self.controller,
            "joint": self.joint,
            "kind": self.kind,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "outcome": self.outcome,
            "reason": self.reason,
            "capture_path": self.capture_path,
            "estimates": [e.to_dict() for e in self.estimates],
            "status": self.status,
            "status_reason": self.status_reason,
            "ne107": self.ne107,
            "trigger": self.trigger,
            "report_message_id": self.report_message_id,
            "report_path": self.report_path,
        }


@dataclass(frozen=True)
class ReportRecord:
    """A report written from the history: its message id (MQTT accounting) and where it is."""

    message_id: str
    created_at: str
    path: str | None
    cycle_ids: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "created_at": self.created_at,
            "path": self.path,
            "cycle_ids": list(self.cycle_ids),
        }


def estimates_for(result: BacklashResult) -> tuple[Estimate, ...]:
    """The indicators a backlash fit contributes to the history (fit details on the amplitude),
    each with its interval when the fit gave one."""
    detail = {**result.to_dict(evidence=False), **_interval(result, "amplitude_rad_s")}
    found = [Estimate("amplitude_rad_s", result.amplitude_rad_s, "rad/s", detail)]
    if result.backlash_rad is not None:
        band = result.uncertainty.get("backlash", {})
        found.append(
            Estimate(
                "backlash_rad",
                result.backlash_rad,
                "rad",
                {**_interval(result, "backlash_rad"), **({"uncertainty": band} if band else {})},
            )
        )
    return tuple(found)


def _interval(result: BacklashResult, indicator: str) -> dict[str, Any]:
    pair = result.interval_of(indicator)
    if pair is None:
        return {}
    return {
        INTERVAL_LOW: pair[0],
        INTERVAL_HIGH: pair[1],
        AMBIGUOUS: result.ambiguous,
        "interval_confidence": result.interval_confidence,
    }


def verdict_ne107(status: str, outcome: str, given: str | None) -> str:
    """The NE 107 signal recorded with a verdict: the caller's, else mapped from the status."""
    if given is not None:
        try:
            return Ne107(given).value
        except ValueError:
            raise StoreError(
                f"ne107 {given!r}: expected one of {', '.join(n.value for n in Ne107)}"
            ) from None
    failed = outcome == Outcome.ERROR
    try:
        ours = Status(status)
    except ValueError:
        return Ne107.FAILURE.value if failed else Ne107.CHECK_FUNCTION.value
    return ne107_of(ours, failed=failed).value


def detail_json(detail: Mapping[str, Any]) -> str:
    """An estimate's detail as its column holds it: strict JSON with sorted keys, NaN/inf as
    null; anything json cannot encode raises TypeError."""
    return json.dumps(_json_safe(dict(detail)), allow_nan=False, sort_keys=True)


def detail_key_sql(key: str) -> str:
    """SQL for one top-level key of an estimate's detail (alias e): NULL where the key is absent
    or the detail is not JSON (json_valid keeps one damaged row from failing a whole query)."""
    return f"CASE WHEN json_valid(e.detail_json) THEN json_extract(e.detail_json, '$.{key}') END"


def finite_number(value: Any) -> float | None:
    """A number read back from a detail, or None for anything else (text, null, a boolean)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value
