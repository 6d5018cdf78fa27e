"""Identification verdicts read from the history: every identification indicator of a joint,
judged against its baseline with the limits in force (agent.health.identification judges)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agent.config.identification_limits import LIMITS_KEY, IdentificationLimitSettings
from agent.health.identification.baseline import (
    DEFAULT_LIMITS,
    IDENTIFICATION_INDICATORS,
    limits_from_detail,
)
from agent.health.identification.indicator import IndicatorVerdict, assess_indicator
from agent.history.records import Outcome
from agent.history.store import HistoryStore
from drivers.base import CycleKind


def assess_history(
    store: HistoryStore,
    controller: str,
    joint: str,
    settings: IdentificationLimitSettings | None = None,
) -> dict[str, IndicatorVerdict]:
    """A verdict on every identification indicator the joint has in the history. Without
    `settings`, the limits recorded with the joint's latest identification (the daemon records
    the config's with each: see limits_detail), else the defaults."""
    last = store.latest(controller, joint, kind=CycleKind.IDENTIFICATION)
    failure = last.reason if last is not None and last.outcome == Outcome.ERROR else None
    histories = {
        name: store.history_with_detail(controller, joint, name)
        for name in IDENTIFICATION_INDICATORS
    }
    s = settings
    if s is None:  # the newest limits recorded (a `jha identify --record` entry has none)
        recorded = sorted(
            (
                (p.time_iso, d[LIMITS_KEY])
                for points in histories.values()
                for p, d in points
                if LIMITS_KEY in d
            ),
            key=lambda r: r[0],
        )
        s = next(
            (
                lim
                for _, r in reversed(recorded)
                if (lim := limits_from_detail(r, joint)) is not None
            ),
            DEFAULT_LIMITS,
        )
    commissioning = s.baseline.get(joint)
    found: dict[str, IndicatorVerdict] = {}
    for name, points in histories.items():
        if not points:
            continue
        given = None if commissioning is None else commissioning.value(name)
        found[name] = assess_indicator(
            name, [(p, _rel_std(d, p.value)) for p, d in points], s, given, failure
        )
    return found


def _rel_std(detail: Mapping[str, Any], value: float) -> float | None:
    """The relative standard deviation (%) an estimate gave a value, when it recorded one: its
    rel_std_pct (identification), or its std against the value (`jha stiffness estimate`), so
    the resolution rule judges a stiffness too wide to tell as "cannot judge"."""
    rel = detail.get("rel_std_pct")
    if isinstance(rel, int | float) and not isinstance(rel, bool) and math.isfinite(rel):
        return abs(float(rel))
    std = detail.get("std")
    if isinstance(std, bool) or not isinstance(std, int | float) or not math.isfinite(std):
        return None
    if math.isfinite(value) and value != 0.0:
        return 100.0 * abs(float(std)) / abs(value)
    return None
