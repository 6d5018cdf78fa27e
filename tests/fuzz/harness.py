"""What every fuzz target shares: case budget, hypothesis settings, the crash oracle.

The property of a parser under fuzzing: for any input it either returns an object that holds
its own invariants, or raises one of our typed errors (agent.errors.AgentError and the
protocol modules' own error types) with a message that names the place; never another
exception, never a hang. `Oracle.call` checks the error half and counts the case; each target
checks the invariants of what came back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from hypothesis import HealthCheck, example, given, settings

from agent.errors import AgentError
from tests.support.summary import Tally, counted

T = TypeVar("T")

# Cases per target: 2,000 in `make test`; `make fuzz` (python -m tests.fuzz) sets more.
FUZZ_CASES = max(1, int(os.environ.get("FUZZ_CASES", "2000")))
# One case may take this long before it counts as a hang (a real case takes milliseconds).
CASE_LIMIT_S = float(os.environ.get("FUZZ_CASE_LIMIT_S", "2.0"))
# The size limit: each target's strategy bounds its inputs (a few hundred bytes to a few KiB,
# a whole shipped config at most), so a case is judged on content and a slow one is a finding.


def fuzz_settings(cases: int = FUZZ_CASES, **more: Any) -> settings:
    """Deterministic (derandomized, no example database) settings running `cases` cases."""
    return settings(
        max_examples=cases,
        deadline=None,  # the per-case limit is the SIGALRM one below, which also stops a hang
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        **more,
    )


class Hang(Exception):
    """A case ran past CASE_LIMIT_S."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` (SIGALRM: main thread only, where pytest runs)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"case ran longer than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class KnownBug(Exception):
    """An invariant broke the way a reported bug does: the case ends, uncounted as a crash."""


class CrashFound(AssertionError):
    """The property broke on a case (re-raised so hypothesis shrinks it and the test fails)."""


class Oracle:
    """Counts the cases of one target and judges how each ended.

    `expected` are the exception types the parser may raise on bad input; `place` checks that
    such an error's message names where the problem is (a file:line, a field, a frame...).
    """

    def __init__(
        self,
        target: str,
        expected: tuple[type[BaseException], ...] = (AgentError,),
        place: Callable[[BaseException], bool] | None = None,
        section: str = "fuzzing",
        known: Mapping[str, Callable[[str], bool]] | None = None,
    ) -> None:
        self.target = target
        # Crashes already reported in code we may not edit, label -> predicate on the detail
        # ("TypeName: message"): counted in the "known bugs" table, not as crashes, each backed
        # by a strict xfail regression test that starts passing (and so fails) once fixed.
        self.known = dict(known or {})
        self.expected = expected
        self.place = place
        self.tally: Tally = counted(section, target)
        self.cases = 0  # this oracle's own cases (the tally may be shared by name)
        self.accepted = 0  # cases that returned an object (the rest raised a typed error)
        self.errors: dict[str, int] = {}  # typed errors by class name, to see what was reached

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """fn(*args) under the time limit: its result, or None after an expected error."""
        self.tally.case()
        self.cases += 1
        try:
            # A warning inside a parser (numpy casting complex to real, an overflow) is data
            # silently changed: as much a finding as an exception.
            with time_limit(CASE_LIMIT_S), warnings.catch_warnings():
                warnings.simplefilter("error")
                result = fn(*args, **kwargs)
        except self.expected as exc:
            message = str(exc)
            if not message.strip() or (self.place is not None and not self.place(exc)):
                self.crash(f"{type(exc).__name__} without a place: {message!r}")
            name = type(exc).__name__
            self.errors[name] = self.errors.get(name, 0) + 1
            return None
        except CrashFound:
            raise
        except KnownBug:
            return None
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            if self._known(detail):
                return None
            self.tally.crash(detail)
            raise CrashFound(f"{self.target}: {detail}") from exc
        self.accepted += 1
        return result

    def check(self, ok: bool, what: str) -> None:
        """An invariant of an accepted result; a broken one is a crash."""
        if not ok:
            self.crash(what)

    def _known(self, detail: str) -> bool:
        for label, matches in self.known.items():
            if matches(detail):
                bug = counted("known bugs", label)
                bug.case()
                bug.crash(detail)
                return True
        return False

    def crash(self, detail: str) -> None:
        if self._known(detail):
            raise KnownBug(detail)
        self.tally.crash(detail)
        raise CrashFound(f"{self.target}: {detail}")

    def assert_done(self, least: int = FUZZ_CASES) -> None:
        """After the hypothesis run: enough cases executed, none crashed."""
        if os.environ.get("FUZZ_VERBOSE"):  # how deep the cases got: `pytest -s` shows it
            print(
                f"\n{self.target}: {self.cases} cases, {self.accepted} returned a result, "
                f"errors {self.errors}"
            )
        assert self.tally.crashes == 0, self.tally.examples
        assert self.cases >= least, (
            f"{self.target}: only {self.cases} cases ran, expected at least {least}"
        )


def fuzz(
    oracle: Oracle,
    strategy: Any,
    case: Callable[[Any], Any],
    *,
    cases: int = FUZZ_CASES,
    examples: tuple[Any, ...] = (),
) -> None:
    """Run `case` under the oracle on `cases` inputs drawn from `strategy` (plus `examples`,
    the regression inputs, first), then fail unless every case ran and none crashed."""

    def body(value: Any) -> None:
        oracle.call(case, value)

    run = given(strategy)(body)
    for value in examples:
        run = example(value)(run)
    fuzz_settings(cases)(run)()
    oracle.assert_done(min(cases, FUZZ_CASES))
