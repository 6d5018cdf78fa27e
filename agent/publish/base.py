"""The one interface the daemon publishes through.

A publisher receives every report the daemon writes and must never block the daemon: it queues
(on disk when it promises delivery) and sends in its own task. A broker or client that is away
is the publisher's business, logged, never the daemon's failure.
"""

from __future__ import annotations

import abc

from agent.report.model import Report


class HealthPublisher(abc.ABC):
    name: str = "abstract"

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
