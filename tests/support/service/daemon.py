"""Running an in-process `Agent` in a test: wait for a condition, serve a scenario, read the
history. Shared by the daemon's service tests (tests/service/)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agent.history.store import HistoryStore
from agent.service.daemon import Agent


async def until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def serve(agent: Agent, scenario: Callable[[], Awaitable[None]]) -> int:
    """Run the agent as a service while `scenario` plays; then stop it as SIGTERM would, and
    check that it left no task behind."""

    async def main() -> int:
        task = asyncio.create_task(agent.run())
        try:
            await until(
                lambda: len(agent.runners) == len(agent.config.controllers),
                10,
                "the controller tasks",
            )
            await scenario()
        finally:
            agent.request_stop("test")
        code = await asyncio.wait_for(task, 10)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        return code

    return asyncio.run(main())


def cycles(state: Path, kind: str | None = None) -> list[Any]:
    """The history's cycles (of one kind, if given) in the order they started."""
    path = state / "history.sqlite"
    if not path.exists():
        return []
    with HistoryStore(path) as store:
        found = sorted(store.cycles(500), key=lambda c: (c.started_at, c.id))
    return [c for c in found if kind is None or c.kind == kind]
