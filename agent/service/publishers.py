"""The daemon's health publishers (agent.publish: MQTT, the OPC UA server): made from the
config's `publish:` section, started with the daemon, handed every report, closed on the way
out. A publisher's trouble is logged and never reaches the cycles or the controller.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from agent.config.publish import PublishSettings
from agent.logfmt import kv

if TYPE_CHECKING:
    from agent.publish.base import HealthPublisher
    from agent.report.model import Report

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 3.0  # a publisher that cannot close in time must not hold up the exit


def publishers_to_start(
    given: list[HealthPublisher] | None, settings: PublishSettings, state_dir: Path
) -> list[HealthPublisher]:
    """`given` (tests pass their own), else the ones `settings` asks for: one that cannot be
    made is logged and the others start (the cycles run on without it; MQTT's outbox stays
    and keeps the reports for a later start, agent.publish.factory)."""
    if given is not None:
        return given
    if settings.mqtt is None and not settings.opcua_server and settings.prometheus is None:
        return []  # nothing imported: the publishers pull in the report model
    from agent.publish.factory import publishers_for

    def failed(name: str, exc: Exception) -> None:
        log.error(kv("publisher_unavailable", publisher=name, error=f"{type(exc).__name__}: {exc}"))

    try:
        return publishers_for(settings, state_dir, failed)
    except Exception as exc:  # a missing publisher module must not stop the cycles
        log.error(kv("publishers_unavailable", error=f"{type(exc).__name__}: {exc}"))
        return []


class Publishers:
    """The publishers that started; reports go to each of them."""

    def __init__(self) -> None:
        self.started: list[HealthPublisher] = []

    def __bool__(self) -> bool:
        return bool(self.started)

    async def start(self, publishers: list[HealthPublisher]) -> None:
        for pub in publishers:
            try:
                await pub.start()
            except Exception as exc:  # logged; the agent runs on without this publisher
                log.error(kv("publisher_start_failed", publisher=pub.name, error=str(exc)))
                continue
            self.started.append(pub)

    async def publish(self, report: Report) -> None:
        for pub in self.started:
            try:
                await pub.publish(report)
            except Exception as exc:  # never let a publisher's trouble reach the controller
                log.error(
                    kv("publish_failed", publisher=pub.name, error=f"{type(exc).__name__}: {exc}")
                )

    async def close(self) -> None:
        for pub in self.started:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await pub.close()
            except Exception as exc:  # a publisher failing to close must not block the exit
                log.warning(kv("publisher_close_failed", publisher=pub.name, error=str(exc)))
