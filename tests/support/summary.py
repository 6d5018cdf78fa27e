"""Registry of the figures `make test` prints at the end (fuzzing, faults, security).

Any test records a row; tests/conftest.py prints every section as a table in the terminal
summary. Import it as `tests.support.summary` (never `summary`) so every test shares one registry.

    from tests.support.summary import counted, fault, record, security

    security("control socket refuses other uids", passed=True)   # security: check, passed
    fault("kill -9 during the capture write", records_lost=n)    # faults: scenario, records lost
    tally = counted("fuzzing", "config")   # a live row (target, cases, crashes), read at the end
    tally.case()                           # once per executed case
    tally.crash("ValueError: ...")         # a case that broke the property
    record("my section", "name", "value", "more values")        # any other table

Recording a name again replaces its row (counted() returns the same live row, so counts add up).

A test must still assert on its figures: the table reports, the assertion fails the run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# Column headers of the fixed sections; any other section gets (name, value...).
HEADERS: dict[str, tuple[str, ...]] = {
    "fuzzing": ("target", "cases", "crashes"),
    "faults": ("scenario", "records lost"),
    "security": ("check", "passed"),
    "known bugs": ("xfail regression", "cases", "crashes"),
    "aborts": ("cause", "stopped by", "at rest", "joint off test pose", "agent next"),
    # Counted by the simulated controller's own motion log, not the agent's records.
    "one machine, one runner": (
        "scenario",
        "motions",
        "outside the limits in force",
        "overlapping",
        "after a failed save",
    ),
    "listening sockets": ("scenario", "measured"),
}
# Print order; sections not listed here follow in the order they were first recorded.
ORDER = ("fuzzing", "faults", "aborts", "one machine, one runner", "security", "known bugs")

_lock = threading.Lock()  # fault tests may record from worker threads


@dataclass
class Tally:
    """Live counter of one row: cases executed and the ones that failed (first few kept)."""

    section: str
    name: str
    cases: int = 0
    crashes: int = 0
    examples: list[str] = field(default_factory=list)

    def case(self, n: int = 1) -> None:
        with _lock:
            self.cases += n

    def crash(self, detail: str = "") -> None:
        with _lock:
            self.crashes += 1
            if detail and len(self.examples) < 5:
                self.examples.append(detail)

    def row(self) -> tuple[str, ...]:
        return (self.name, str(self.cases), str(self.crashes))


# section -> name -> fixed row values or a live Tally (read when the summary is printed).
_rows: dict[str, dict[str, tuple[str, ...] | Tally]] = {}


def record(section: str, name: str, value: str, *more: str) -> None:
    """Set the row `name` of `section` (a later record of the same name replaces it)."""
    with _lock:
        _rows.setdefault(section, {})[name] = (name, str(value), *map(str, more))


def counted(section: str, name: str) -> Tally:
    """The live counter of row `name`; the same object for repeated calls, so counts add up."""
    with _lock:
        rows = _rows.setdefault(section, {})
        existing = rows.get(name)
        if isinstance(existing, Tally):
            return existing
        tally = Tally(section, name)
        rows[name] = tally
        return tally


def fuzzed(target: str, cases: int, crashes: int) -> None:
    """Row of the fuzzing table."""
    record("fuzzing", target, str(cases), str(crashes))


def fault(scenario: str, records_lost: int) -> None:
    """Row of the fault-injection table."""
    record("faults", scenario, str(records_lost))


def abort(
    cause: str, *, stopped_by: str, at_rest: bool, off_pose_rad: float | None, next_step: str
) -> None:
    """Row of the abort table, every cell measured against the peer: who stopped the arm (the
    peer's command log), whether it stood still, how far from its test pose the stop left it,
    and what the agent did next."""
    off = "unknown" if off_pose_rad is None else f"{off_pose_rad:.3f} rad"
    record("aborts", cause, stopped_by, "yes" if at_rest else "NO", off, next_step)


def security(check: str, passed: bool) -> None:
    """Row of the security table."""
    record("security", check, "yes" if passed else "NO")


def snapshot() -> dict[str, list[tuple[str, ...]]]:
    """Every section's rows as strings, sections in print order."""
    with _lock:
        names = [s for s in ORDER if s in _rows] + [s for s in _rows if s not in ORDER]
        return {
            s: [v.row() if isinstance(v, Tally) else v for v in _rows[s].values()] for s in names
        }


def export() -> dict[str, dict[str, list[object]]]:
    """The registry as plain data: how a pytest-xdist worker hands its rows to the controller."""
    with _lock:
        return {
            section: {
                name: (
                    ["tally", v.cases, v.crashes, list(v.examples)]
                    if isinstance(v, Tally)
                    else ["row", *v]
                )
                for name, v in rows.items()
            }
            for section, rows in _rows.items()
        }


def merge(data: dict[str, dict[str, list[object]]]) -> None:
    """Add a worker's export: counts add up, a security check passes only if it passed
    everywhere, any other row is replaced."""
    for section, rows in data.items():
        for name, value in rows.items():
            if value[0] == "tally":
                tally = counted(section, name)
                tally.case(int(str(value[1])))
                with _lock:
                    tally.crashes += int(str(value[2]))
                    examples = value[3] if isinstance(value[3], list) else []
                    tally.examples.extend(str(e) for e in examples[: 5 - len(tally.examples)])
                continue
            cells = [str(c) for c in value[1:]]
            with _lock:
                old = _rows.get(section, {}).get(name)
            if section == "security" and isinstance(old, tuple) and old[1] == "NO":
                continue
            record(section, cells[0], cells[1], *cells[2:])


def render() -> list[str]:
    """The summary as text lines: per section a title, a header and aligned rows."""
    lines: list[str] = []
    for section, rows in snapshot().items():
        if not rows:
            continue
        width = max(len(r) for r in rows)
        header = HEADERS.get(section, ("name", *("value" for _ in range(width - 1))))
        header = header + ("",) * (width - len(header))
        table = [header] + [r + ("",) * (len(header) - len(r)) for r in rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        lines.append(f"{section}:")
        for i, r in enumerate(table):
            # Names left-aligned, figures right-aligned, like a ledger.
            figures = zip(r[1:], widths[1:], strict=True)
            cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in figures]
            lines.append("  " + "  ".join(cells).rstrip())
            if i == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
    return lines


@contextmanager
def isolated() -> Iterator[None]:
    """An empty registry inside the block, the previous one back after (the summary's tests)."""
    with _lock:
        saved = {s: dict(rows) for s, rows in _rows.items()}
        _rows.clear()
    try:
        yield
    finally:
        with _lock:
            _rows.clear()
            _rows.update(saved)
