"""asyncua's log lines about the connections it refuses at its cap or closes for want of an
activated session, at most one a minute: under a flood of connections, one line per refused
connection would flood the journal (agent.service.loop_errors does the same for the event
loop's own reports)."""

from __future__ import annotations

import logging
import math
import time


class OncePerMinute(logging.Filter):
    """asyncua logs every connection it refuses at the cap: a flood would be a log flood too.
    The first of each minute passes, with the count of those held back since."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -math.inf
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(("Refusing connection", "Closing idle connection")):
            return True
        now = time.monotonic()
        if now - self._last < 60.0:
            self._held += 1
            return False
        self._last = now
        if self._held:
            record.msg = f"{record.msg} (and {self._held} more refused or closed since)"
            self._held = 0
        return True


_REFUSALS = OncePerMinute()


def quiet_refusals() -> None:
    logger = logging.getLogger("asyncua.server.binary_server_asyncio")
    if _REFUSALS not in logger.filters:
        logger.addFilter(_REFUSALS)
