"""The event loop's error reports at most once a minute per kind (agent.service.loop_errors): out
of descriptors, asyncio's accept retries once wrote 1.1 million lines in 4 minutes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agent.service.loop_errors import OncePerMinute

ACCEPT = "socket.accept() out of system resource"


def test_repeats_within_the_minute_are_counted_and_summed_up_in_the_next_report(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    handler = OncePerMinute(clock=lambda: now[0])
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for _ in range(10_000):  # one retry every 6 ms for a minute
                handler(loop, {"message": ACCEPT, "exception": OSError(24, "Too many open files")})
                now[0] += 0.006
            handler(loop, {"message": "Task exception was never retrieved"})
            handler(loop, {"message": ACCEPT})
    finally:
        loop.close()
    lines: list[Any] = [r.getMessage() for r in caplog.records]
    accept = [line for line in lines if line.startswith(ACCEPT)]
    # A minute of retries: the first, then the one a minute later with the count between.
    assert accept == [ACCEPT, f"{ACCEPT} (and 9999 more like it since the last)"]
    assert sum("never retrieved" in line for line in lines) == 1  # another kind goes out
