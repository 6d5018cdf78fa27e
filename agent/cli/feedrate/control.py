"""`jha feedrate hold` / `jha feedrate resume`: hold a running `jha feedrate stream` from another
terminal (docs/safety.md, G13).

  jha feedrate hold   (--pid PID | --pid-file FILE)
  jha feedrate resume (--pid PID | --pid-file FILE)

The serial port belongs to the streamer (it is locked exclusively), so no other program can send
the controller a feed hold. The streamer therefore takes signals: SIGUSR1 holds (GRBL's '!', or
the DNC control's `dnc_feed_hold`; no further line is sent) and SIGUSR2 resumes (GRBL's '~', or
`dnc_resume`; streaming goes on). A resume releases only a hold asked this way: a machine held
by its own button or door is released at the machine. Signals need no listener and no socket
of their own, the kernel checks who may send them (the same user, or root), and
`kill -USR1 PID` works where jha is not installed. `jha feedrate stream --pid-file FILE`
writes its pid for these commands.

Before signalling, the command checks that the pid is a `jha feedrate stream`: a stale pid file
may name a process that has since been reused, and SIGUSR1's default action ends a process.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from agent.cli.common import UsageError
from agent.errors import EX_OK, EX_UNAVAILABLE, AgentError

HOLD_SIGNAL, RESUME_SIGNAL = signal.SIGUSR1, signal.SIGUSR2


class StreamUnreachable(AgentError):
    """No running `jha feedrate stream` at the pid given: nothing was signalled."""

    exit_code = EX_UNAVAILABLE


def register(group: Any) -> None:
    """Add `hold` and `resume` to the `jha feedrate` command group."""
    for name, sig, text in (
        ("hold", HOLD_SIGNAL, "feed hold of a running `jha feedrate stream` (SIGUSR1)"),
        ("resume", RESUME_SIGNAL, "resume a held `jha feedrate stream` (SIGUSR2)"),
    ):
        cmd = group.add_parser(name, help=text)
        which = cmd.add_mutually_exclusive_group(required=True)
        which.add_argument("--pid", type=int, help="the streamer's process id")
        which.add_argument(
            "--pid-file", type=Path, help="the file the streamer wrote with --pid-file"
        )
        cmd.set_defaults(func=_signal_command, signal=sig, action=name)


def _signal_command(args: argparse.Namespace) -> int:
    pid, where = _target(args.pid, args.pid_file)
    signal_stream(pid, args.signal, where)
    what = "feed hold" if args.action == "hold" else "resume (cycle start)"
    print(
        f"{what} asked of jha feedrate stream, pid {pid}{where}: its progress line shows "
        "HELD and the controller's state",
        flush=True,
    )
    return EX_OK


def _target(pid: int | None, pid_file: Path | None) -> tuple[int, str]:
    if pid is not None:
        if pid <= 0:
            raise StreamUnreachable(f"--pid: expected a process id > 0, found {pid}")
        return pid, ""
    if pid_file is None:  # argparse makes --pid and --pid-file a required alternative
        raise UsageError("give --pid PID or --pid-file FILE")
    try:
        text = pid_file.read_text().strip()
    except OSError as exc:
        raise StreamUnreachable(
            f"{pid_file}: cannot read the streamer's pid file ({exc}); is "
            "a `jha feedrate stream --pid-file` running?"
        ) from exc
    if not text.isdigit() or int(text) <= 0:
        raise StreamUnreachable(f"{pid_file}: expected a process id, found {text[:40]!r}")
    return int(text), f" (from {pid_file})"


def signal_stream(pid: int, sig: signal.Signals, where: str = "") -> None:
    """Send `sig` to `pid` once it is known to be a `jha feedrate stream`."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        raise StreamUnreachable(
            f"no process {pid}{where}: the stream has ended (a stale pid "
            "file?); nothing was signalled"
        ) from None
    except OSError as exc:
        raise StreamUnreachable(
            f"process {pid}{where}: cannot read its command line ({exc}); nothing was signalled"
        ) from exc
    if (b"feedrate", b"stream") not in set(itertools.pairwise(argv)):
        shown = b" ".join(argv).decode("utf-8", "replace")[:120]
        raise StreamUnreachable(
            f"process {pid}{where} is not a `jha feedrate stream` ({shown!r});"
            " nothing was signalled"
        )
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        raise StreamUnreachable(
            f"process {pid}{where} ended just now; nothing was signalled"
        ) from None
    except PermissionError as exc:
        raise StreamUnreachable(
            f"process {pid}{where}: not allowed to signal it ({exc}); run "
            "as the user who started the stream, or root"
        ) from exc


@contextlib.contextmanager
def hold_signals(hold: Callable[[], None], resume: Callable[[], None]) -> Iterator[None]:
    """SIGUSR1 calls `hold`, SIGUSR2 `resume` while the block runs; the previous handlers come
    back after it (the CLI also runs inside test processes)."""
    previous = {sig: signal.getsignal(sig) for sig in (HOLD_SIGNAL, RESUME_SIGNAL)}
    signal.signal(HOLD_SIGNAL, lambda signum, frame: hold())
    signal.signal(RESUME_SIGNAL, lambda signum, frame: resume())
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def pid_file(path: Path | None) -> Iterator[None]:
    """Write this process's pid to `path` for the block; remove it after, unless another
    stream has written its own there meanwhile."""
    if path is None:
        yield
        return
    from agent.atomic import atomic_write_text

    mine = f"{os.getpid()}\n"
    atomic_write_text(path, mine)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path.read_text() == mine:
                path.unlink()
