"""Pending cycles per joint, and which of them fit in a production stop.

Pure: an immutable queue, every operation returns a new one. A joint is queued at most once per
cycle kind (a second trigger keeps its place). When a stop is too short for every pending cycle,
the ones that waited longest go first and the rest wait for the next stop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agent.history.records import Trigger


@dataclass(frozen=True)
class PendingCycle:
    joint: str
    kind: str
    queued_at_s: float  # monotonic clock of the agent
    reason: Trigger  # why it was queued
    estimate_s: float  # settle + duration: what the stop must hold (plus the margin)
    order: int = 0  # the joint's place in the config: breaks ties between equal waits

    def to_dict(self) -> dict[str, Any]:
        return {
            "joint": self.joint,
            "kind": self.kind,
            "queued_at_s": self.queued_at_s,
            "reason": self.reason,
            "estimate_s": self.estimate_s,
        }


@dataclass(frozen=True)
class CycleQueue:
    items: tuple[PendingCycle, ...] = ()

    def __len__(self) -> int:
        return len(self.items)

    def add(self, cycle: PendingCycle) -> CycleQueue:
        """Queue a cycle unless the same joint and kind already waits (it keeps its place)."""
        if any(p.joint == cycle.joint and p.kind == cycle.kind for p in self.items):
            return self
        if not cycle.estimate_s >= 0:
            raise ValueError(
                f"cycle estimate of {cycle.joint}: expected >= 0 s, found {cycle.estimate_s!r}"
            )
        return replace(self, items=(*self.items, cycle))

    def remove(self, joint: str, kind: str) -> CycleQueue:
        return replace(
            self, items=tuple(p for p in self.items if (p.joint, p.kind) != (joint, kind))
        )

    def keep_only(self, joints: set[str]) -> CycleQueue:
        """Drop the cycles of joints no longer configured (after a reload)."""
        return replace(self, items=tuple(p for p in self.items if p.joint in joints))

    def by_wait(self) -> tuple[PendingCycle, ...]:
        return tuple(sorted(self.items, key=lambda p: (p.queued_at_s, p.order)))

    def plan(self, available_s: float | None, margin_s: float) -> tuple[PendingCycle, ...]:
        """The cycles to run in a stop of `available_s` (None: unknown, run them all), longest
        waiting first; one that does not fit is skipped for shorter ones behind it."""
        if available_s is None:
            return self.by_wait()
        chosen: list[PendingCycle] = []
        left_s = available_s
        for p in self.by_wait():
            need_s = p.estimate_s + margin_s
            if need_s <= left_s:
                chosen.append(p)
                left_s -= need_s
        return tuple(chosen)

    def fits(self, cycle: PendingCycle, available_s: float | None, margin_s: float) -> bool:
        return available_s is None or cycle.estimate_s + margin_s <= available_s

    def to_dict(self) -> dict[str, Any]:
        return {"pending": [p.to_dict() for p in self.by_wait()]}
