"""The one interface the daemon publishes through.

A publisher receives every report the daemon writes and must never block the daemon: it queues
(on disk when it promises delivery) and sends in its own task. A broker or client that is away
is the publisher's business, logged, never the daemon's failure.
"""

from __future__ import annotations

import abc
from typing import Protocol

from agent.report.model import Report


class WatchdogProbe(Protocol):
    """The daemon's systemd watchdog as a publisher may report it
    (agent.sd_notify.Notifier)."""

    watchdog_s: float | None  # the timeout systemd asked for; None: no watchdog

    def lateness_s(self) -> float | None:
        """How late its pings come (the worst of the last minute), None before the first."""
        ...


class HealthPublisher(abc.ABC):
    name: str = "abstract"

    def watch_watchdog(self, probe: WatchdogProbe) -> None:  # noqa: B027 - optional hook
        """The daemon hands its watchdog over before start(). Publishers that report on the
        agent itself (the Prometheus endpoint) keep it; the others have no use for it."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Open connections / listening sockets and start background tasks. Must not block on
        an unreachable peer: connecting is retried in the background."""

    @abc.abstractmethod
    async def publish(self, report: Report) -> None:
        """Take one report (per-joint health plus the full report). Returns once it is queued
        (durably, for publishers that promise delivery), not when it is delivered."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Flush what can be flushed quickly, announce going offline, release everything."""
