"""Before a stop's cycles move anything: can the agent record what they measure?

A cycle that moves a machine and then cannot save its capture, its record or its report has
spent the stop (and the machine's wear) for nothing, and on a full disk it does so stop after
stop while the log fills with tracebacks. So before any motion: the state directory must take
a file, have room for the stop's captures and reports plus the configured reserve, the process
must have file descriptors to spare, and the history must open and pass SQLite's quick_check.
Any failure refuses the stop's cycles with the reason, and nothing moves.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from drivers.base import Cycle

# Bytes a cycle writes besides its capture: its share of the report (JSON and a self-contained
# HTML of a few hundred kB), history rows, MQTT outbox.
REPORT_BYTES_PER_CYCLE = 512 * 1024
# What a stop needs free on top of its captures: the files the agent opens while recording
# (capture, temp file, history, its journal, the pool's pipes) and the publishers' sockets.
FREE_FDS_NEEDED = 32


@dataclass(frozen=True)
class Preflight:
    """What the check found; `problems` empty means the stop may move."""

    problems: tuple[str, ...]
    free_bytes: int | None = None
    needed_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        return "; ".join(self.problems) if self.problems else "state directory and history ready"


def preflight(state_dir: Path, capture_bytes: int, n_cycles: int, reserve_bytes: int) -> Preflight:
    """Check the state directory, its free space, file descriptors and the history."""
    problems: list[str] = []
    probe = state_dir / ".preflight.tmp"
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0" * 4096)  # a full disk refuses the data, not the inode
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        problems.append(f"state directory {state_dir} cannot take a file: {exc.strerror or exc}")
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    needed = capture_bytes + n_cycles * REPORT_BYTES_PER_CYCLE + reserve_bytes
    free: int | None = None
    try:
        free = shutil.disk_usage(state_dir).free
        if free < needed:
            problems.append(
                f"state directory {state_dir} has {free / 1e6:.1f} MB free, the stop needs "
                f"{needed / 1e6:.1f} MB (captures, reports and agent.disk_reserve_mb)"
            )
    except OSError as exc:
        problems.append(f"state directory {state_dir}: free space unknown ({exc.strerror})")
    spare = _spare_fds()
    if spare is not None and spare < FREE_FDS_NEEDED:
        problems.append(
            f"only {spare} file descriptors left (need {FREE_FDS_NEEDED}): too many open "
            "connections or files"
        )
    history = _history_problem(state_dir / "history.sqlite")
    if history is not None:
        problems.append(history)
    return Preflight(tuple(problems), free, needed)


def _spare_fds() -> int | None:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0  # listing needs a descriptor: none is left
    if soft == resource.RLIM_INFINITY:
        return None
    return soft - used


def _history_problem(path: Path) -> str | None:
    """Why the history cannot take this stop's records, or None (a missing file is created)."""
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        try:
            row = conn.execute("PRAGMA quick_check").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return f"history {path} does not open: {exc}"
    if row is None or row[0] != "ok":
        return f"history {path} fails its integrity check: {row[0] if row else 'no answer'}"
    return None


def preflight_cycles(state_dir: Path, cycles: list[Cycle], reserve_bytes: int) -> Preflight:
    """The preflight of a stop that will run `cycles`."""
    return preflight(state_dir, sum(capture_bytes(c) for c in cycles), len(cycles), reserve_bytes)


def capture_bytes(cycle: Cycle) -> int:
    """What a cycle's capture takes on disk at most (uncompressed float64, time included)."""
    samples = round((cycle.settle_s + cycle.duration_s) * cycle.sample_rate_hz) + 1
    channels = 3 * len(getattr(cycle, "joints", ())) or 4
    return samples * (channels + 1) * 8
