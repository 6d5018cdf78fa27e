"""The event loop's own error reports, each kind at most once a minute.

Out of descriptors, every listening socket of the agent (control socket, OPC UA server) makes
asyncio report "socket.accept() out of system resource" at every retry: 1.1 million lines,
697 MB of journal in 4 minutes, once. The first report of a kind goes out as asyncio words it;
the repeats within the minute are counted and summed up in the next one that goes out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

INTERVAL_S = 60.0


class OncePerMinute:
    """A loop exception handler passing each message on at most once per interval."""

    def __init__(
        self, interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        key = str(context.get("message", ""))
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            context = {**context, "message": f"{key} (and {held} more like it since the last)"}
        loop.default_exception_handler(context)
