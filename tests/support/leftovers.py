"""After `make test`: no process the suite started may still run.

make test exports JHA_TEST_RUN (a value of its own) to both pytest runs; every process a test
starts inherits it, also once orphaned and re-parented to init. This looks for it in every
process's environment, gives what it finds a grace period to end (a broker or PostgreSQL still
shutting down), then names each one left, kills it so the machine is clean for what runs next,
and exits 1.

    python -m tests.support.leftovers [--grace-s S]   (JHA_TEST_RUN in the environment)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from tests.support.processes import exited

MARK = "JHA_TEST_RUN"


def marked(value: str) -> dict[int, str]:
    """pid -> command line of every process (but this one) whose environment carries the mark."""
    needle = f"{MARK}={value}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if needle not in environ.split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # ended while we looked, or not ours to read
        if not exited(int(entry.name)):  # a zombie runs nothing; its parent reaps it
            found[int(entry.name)] = cmdline.decode(errors="replace")[:300]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grace-s", type=float, default=20.0)
    args = parser.parse_args(argv)
    value = os.environ.get(MARK)
    if not value:
        print(f"leftovers: {MARK} is not set: nothing to look for", file=sys.stderr)
        return 2
    mine = {os.getppid()}  # the recipe's shell that runs this carries the mark too
    deadline = time.monotonic() + args.grace_s
    while (left := {p: c for p, c in marked(value).items() if p not in mine}) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)
    if not left:
        print("leftovers: no process of the suite is running")
        return 0
    print(f"leftovers: {len(left)} process(es) of the suite still running:", file=sys.stderr)
    for pid, cmdline in sorted(left.items()):
        print(f"  pid {pid}: {cmdline}", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return 1


if __name__ == "__main__":
    sys.exit(main())
