"""The simulated controller's record of its own motions, kept apart from everything the agent
writes: one JSON line when a motion starts and one when it ends, appended to the file of
`settings.motion_log`. Several sims (two controllers that are one machine, two daemons) may
share one file: each line is a single O_APPEND write, so lines never interleave.

A line: {"event": "start"|"end", "machine": controller, "joint", "what": "cycle"|"move",
"pid", "t_s": CLOCK_MONOTONIC seconds (one clock for every process of the host), "wall":
Unix time, and on start "from_rad", "to_rad" (the travel commanded), on end "how": "done",
"stopped" or "failed"}. Tests read it with `read_motions`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def append(path: str, **fields: Any) -> None:
    line = json.dumps({**fields, "pid": os.getpid(), "t_s": time.monotonic(), "wall": time.time()})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@dataclass(frozen=True)
class LoggedMotion:
    machine: str
    joint: str
    what: str
    pid: int
    start_s: float  # CLOCK_MONOTONIC
    wall_start: float
    from_rad: float | None  # None: an excitation (no one travel)
    to_rad: float | None
    end_s: float | None  # None: no end line (the process died mid-motion)
    how: str | None


def read_motions(path: str | Path) -> list[LoggedMotion]:
    """The motions of the log, in start order; each start paired with the next end line of the
    same pid (one sim moves one motion at a time)."""
    p = Path(path)
    if not p.exists():
        return []
    open_by: dict[tuple[int, str], dict[str, Any]] = {}
    done: list[LoggedMotion] = []

    def close(start: dict[str, Any], end: dict[str, Any] | None) -> None:
        done.append(
            LoggedMotion(
                start["machine"], start["joint"], start["what"], start["pid"], start["t_s"],
                start["wall"], start["from_rad"], start["to_rad"],
                None if end is None else end["t_s"], None if end is None else end["how"],
            )
        )  # fmt: skip

    for line in p.read_text().splitlines():
        rec = json.loads(line)
        key = (rec["pid"], rec["machine"])
        if rec["event"] == "start":
            if key in open_by:  # a start without an end: the sim was torn down mid-motion
                close(open_by.pop(key), None)
            open_by[key] = rec
        elif key in open_by:
            close(open_by.pop(key), rec)
    for start in open_by.values():
        close(start, None)
    return sorted(done, key=lambda m: m.start_s)
