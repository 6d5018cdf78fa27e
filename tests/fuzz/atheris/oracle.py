"""What every atheris target shares: the property, the per-input time limit, the registry.

An atheris target is a function of one bytes input. The property is the one of
tests/fuzz/harness.py: the parser returns a result holding its invariants, or raises one of the
project's typed errors with a message naming the place; never another exception, never a hang.
`guarded` turns a broken property into an exception that escapes the target, which is how
libFuzzer (through atheris) learns of a crash: it prints the traceback, writes the input as a
crash-* file and exits non-zero.

This module imports neither atheris nor the code under test, so the targets also run in-process
under pytest (tests/fuzz/test_regressions.py replays the stored crash inputs through them).
"""

from __future__ import annotations

import os
import signal
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# One input may run this long before it counts as a hang; a real input takes milliseconds.
INPUT_LIMIT_S = float(os.environ.get("ATHERIS_INPUT_LIMIT_S", "2.0"))
# Where targets that read files write one per input: ATHERIS_SCRATCH (test_atheris.py gives
# each run a directory of its own and removes it: libFuzzer's exit skips Python's cleanup),
# else /dev/shm when the system has it (the disk is not what is under test).
SCRATCH = Path(
    os.environ.get("ATHERIS_SCRATCH")
    or ("/dev/shm" if Path("/dev/shm").is_dir() else os.environ.get("TMPDIR", "/tmp"))
)


class PropertyBroken(AssertionError):
    """The parser answered with something that breaks its contract (a crash to libFuzzer)."""


class Hang(Exception):
    """One input ran past INPUT_LIMIT_S."""


def check(ok: bool, what: str) -> None:
    """An invariant of the parser's answer; a broken one fails the input."""
    if not ok:
        raise PropertyBroken(what)


def expect_place(exc: BaseException, place: str) -> None:
    """A typed error must carry a message that names where the problem is."""
    message = str(exc)
    check(bool(message.strip()), f"{type(exc).__name__} without a message")
    check(place in message, f"{type(exc).__name__} does not name {place!r}: {message!r}")


def _on_alarm(signum: int, frame: Any) -> None:
    raise Hang(f"input ran longer than {INPUT_LIMIT_S:g} s")


def guarded(body: Callable[[bytes], None]) -> Callable[[bytes], None]:
    """`body` under the time limit, with warnings as errors (a numpy casting or overflow warning
    inside a parser is data silently changed, as much a finding as an exception)."""

    def one_input(data: bytes) -> None:
        # Installed per input, not once: pytest (test_regressions) keeps its own handler too.
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, INPUT_LIMIT_S)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                body(data)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    return one_input


@dataclass(frozen=True)
class Target:
    """One atheris target: its input function and the seeds it starts from.

    `seeds` are valid or near-valid inputs from the repository (configs, programs,
    captures written by the simulator) so that the search starts deep inside the parser.
    """

    name: str
    one_input: Callable[[bytes], None]
    seeds: Callable[[], Iterable[bytes]]
    doc: str = field(default="", compare=False)
