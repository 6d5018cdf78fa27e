"""What tests ask of a process they started and may no longer own."""

from __future__ import annotations

from pathlib import Path


def state(pid: int) -> str | None:
    """The process's state letter from /proc (R, S, Z, ...), None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def exited(pid: int) -> bool:
    """True once `pid` is gone or a zombie (re-parented: nobody here may reap it)."""
    return state(pid) in (None, "Z")
