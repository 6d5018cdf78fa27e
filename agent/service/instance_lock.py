"""One agent per state directory: an exclusive lock held for the daemon's whole life.

Two daemons on one state directory would run cycles on the same machines and the second would
replace the first's control socket. `jha run` (service or --once) takes `agent.lock` in the state
directory before it opens anything else there; a second one exits 75 naming the first's pid and
touches nothing. flock(2), not a pid file alone: the kernel drops the lock when its holder dies,
kill -9 included, so a crash never leaves a stale lock that needs a person.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from agent.errors import EX_TEMPFAIL, AgentError

LOCK_NAME = "agent.lock"


class AlreadyRunning(AgentError):
    """Another agent holds the state directory; nothing was started."""

    exit_code = EX_TEMPFAIL


@dataclass
class InstanceLock:
    path: Path
    fd: int

    def release(self) -> None:
        # The file stays: unlinking it would let a newcomer lock a new file while a third
        # process still waits on the old one.
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def hold_state_dir(state_dir: Path) -> InstanceLock:
    """Lock `state_dir` for this process, or raise AlreadyRunning naming the holder."""
    path = state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyRunning(
            f"{state_dir}: another agent (pid {holder}) runs on this state directory (it "
            f"holds {path}); one agent per state directory: stop that one first"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return InstanceLock(path, fd)
