"""Identifications recorded in the history store as the daemon records them (limits along),
weekly from one start time: what the identification verdict tests under tests/health/ share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agent.config.identification_limits import (
    LIMITS_KEY,
    IdentificationLimitSettings,
    limits_detail,
)
from agent.history.records import Estimate
from agent.history.store import HistoryStore

T0 = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
WEEK = timedelta(days=7)


def record_identification(
    store: HistoryStore,
    when: datetime,
    by_joint: dict[str, Any],
    limits: IdentificationLimitSettings | None = None,
) -> None:
    """As the daemon records one (agent.kinds.identification.kind: the limits go along)."""
    for joint, estimates in by_joint.items():
        if limits is not None:
            estimates = [
                Estimate(
                    e.indicator,
                    e.value,
                    e.unit,
                    {**e.detail, LIMITS_KEY: limits_detail(limits, joint)},
                )
                for e in estimates
            ]
        store.record_cycle(
            controller="cell1",
            joint=joint,
            kind="identification",
            started_at=when,
            finished_at=when + timedelta(seconds=40),
            estimates=estimates,
            trigger="manual",
        )
