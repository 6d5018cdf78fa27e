"""Identification verdicts read from the history: every identification indicator of a joint,
judged against its baseline with the limits in force (agent.health.identification judges)."""

from __future__ import annotations

from agent.config.identification_limits import LIMITS_KEY, IdentificationLimitSettings
from agent.health.identification import (
    DEFAULT_LIMITS,
    IDENTIFICATION_INDICATORS,
    IDENTIFICATION_KIND,
    IndicatorVerdict,
    _rel_std,
    assess_indicator,
    limits_from_detail,
)
from agent.history.store import HistoryStore


def assess_history(
    store: HistoryStore,
    controller: str,
    joint: str,
    settings: IdentificationLimitSettings | None = None,
) -> dict[str, IndicatorVerdict]:
    """A verdict on every identification indicator the joint has in the history. Without
    `settings`, the limits recorded with the joint's latest identification (the daemon records
    the config's with each: see limits_detail), else the defaults."""
    last = store.latest(controller, joint, kind=IDENTIFICATION_KIND)
    failure = last.reason if last is not None and last.outcome == "error" else None
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
            name, [(p, _rel_std(d)) for p, d in points], s, given, failure
        )
    return found
