"""What `jha run --once` exits with: 0 only when every cycle of the stop was measured and
recorded; otherwise the worst thing that happened, as a sysexits code (docs/service.md).

    73 EX_CANTCREAT    a capture, record or report was not saved, or the preflight refused the
                       stop (state directory, disk space, file descriptors, history)
    69 EX_UNAVAILABLE  a cycle was aborted mid-motion (and stopped)
    70 EX_SOFTWARE     an analysis failed
    77 EX_NOPERM       a cycle was refused before motion (interlock, travel limit)
    65 EX_DATAERR      a capture was refused by its analysis (not to be trusted)
    74 EX_IOERR        the controller could not be reached (agent.service.runner)
    75 EX_TEMPFAIL     no production stop came in time (agent.service.runner)
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.errors import (
    EX_CANTCREAT,
    EX_DATAERR,
    EX_NOPERM,
    EX_OK,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
)
from agent.history.records import Outcome
from agent.kinds.base import JointJob

# One home for the codes (agent.errors); re-exported here for the --once table above.
__all__ = ["EX_CANTCREAT", "EX_DATAERR", "EX_NOPERM", "EX_OK", "EX_SOFTWARE", "EX_UNAVAILABLE"]


def once_exit_code(jobs: Iterable[JointJob], unrecorded: int) -> int:
    """The exit code of a --once run whose stop ran `jobs`; `unrecorded` stops failed to be
    recorded or reported."""
    jobs = list(jobs)
    if unrecorded or any(j.outcome is Outcome.ERROR and j.capture_path is None for j in jobs):
        return EX_CANTCREAT
    outcomes = {j.outcome for j in jobs}
    for outcome, code in (
        (Outcome.ABORTED, EX_UNAVAILABLE),
        (Outcome.ERROR, EX_SOFTWARE),
    ):
        if outcome in outcomes:
            return code
    if Outcome.REJECTED in outcomes:
        refused_before_motion = any(
            j.outcome is Outcome.REJECTED and (j.error or "").startswith("interlock:") for j in jobs
        )
        return EX_NOPERM if refused_before_motion else EX_DATAERR
    return EX_OK
