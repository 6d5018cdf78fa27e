"""Confirming that the arm stands after speedStop/stopJ, and the protective stop when it does not.

speedStop and stopJ are commands to the control script: a script that does not act on them (a
stuck thread, a script of another version) answers and the arm runs on. So the worker watches
the receive interface after the stop: the first fresh package showing every joint below
REST_RAD_S confirms it (stopJ blocks until its ramp ends, so on a working controller that is the
next package). While packages keep showing motion for CONFIRM_S, the worker escalates to
ur_rtde's `triggerProtectiveStop()` (cmd 31: the script calls URScript `protective_stop()`, on
controllers 3.8 and newer), the controller's own category-2 stop. A protective stop pauses the
program: the command is never answered "done", so ur_rtde returns False, and the stop is
confirmed from the packages again, within PROTECTIVE_S. The paused control script is then
stopped from the dashboard, so that neither Play on the pendant nor the dashboard can resume
it: the arm is left protective-stopped, nothing queued, until a person inspects it and unlocks
the stop (Polyscope allows that 5 s after the stop at the earliest).

When no fresh package comes the arm cannot be seen: nothing is escalated here, and the driver's
stop timeout kills the worker, after which the controller's RTDE watchdog ends the script.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from drivers.ur_rtde.wire import Fault, FaultKind

REST_RAD_S = 0.01  # every joint slower than this: the arm stands
CONFIRM_S = 0.25  # packages showing motion this long after stopJ returned: not stopped
PROTECTIVE_S = 1.0  # the controller's protective stop has stood the arm within this
_POLL_S = 0.002


def motion_after(recv: Any, window_s: float) -> float | None:
    """0.0 as soon as a fresh package shows the arm at rest; the fastest joint speed (rad/s)
    the last fresh package showed when the arm still moved after `window_s`; None when no fresh
    package came in that time (the arm cannot be seen)."""
    last_ts = recv.getTimestamp()
    seen: float | None = None
    deadline = time.monotonic() + window_s
    while True:
        ts = recv.getTimestamp()
        if ts != last_ts:
            last_ts = ts
            speed = max(abs(v) for v in recv.getActualQd())
            if speed < REST_RAD_S:
                return 0.0
            seen = speed
        if time.monotonic() > deadline:
            return seen
        time.sleep(_POLL_S)


def protective_stop(ctrl: Any, recv: Any, host: str, dashboard_port: int, speed: float) -> str:
    """The escalation after speedStop/stopJ left the arm moving at `speed` rad/s: what was
    done, for the abort's message; Fault when even the protective stop is not confirmed."""
    started = time.monotonic()
    # False is its normal answer: the protective stop pauses the script before it says "done".
    with contextlib.suppress(Exception):
        ctrl.triggerProtectiveStop()
    left = motion_after(recv, PROTECTIVE_S)
    if left != 0.0:
        seen = "cannot be seen (no RTDE package)" if left is None else f"moves at {left:.3f} rad/s"
        raise Fault(
            f"the arm still moved at {speed:.3f} rad/s {CONFIRM_S:g} s after speedStop/stopJ, "
            f"and {PROTECTIVE_S:g} s after triggerProtectiveStop it {seen}",
            FaultKind.ABORT,
        )
    took_s = time.monotonic() - started
    program = _stop_program(host, dashboard_port)
    return (
        f"speedStop/stopJ did not stop the arm (still {speed:.3f} rad/s after {CONFIRM_S:g} s): "
        f"protective stop triggered (triggerProtectiveStop), the arm stood {took_s:.2f} s later; "
        f"{program}. Inspect the arm and the controller, then unlock the protective stop at "
        "the pendant (or the dashboard's 'unlock protective stop') before the next cycle"
    )


def _stop_program(host: str, dashboard_port: int) -> str:
    """Stop the paused control script from a dashboard connection of its own (the worker's
    is the request thread's, which may be mid-request)."""
    import dashboard_client

    dash = dashboard_client.DashboardClient(host, dashboard_port)
    try:
        dash.connect()
        dash.stop()
    except Exception as exc:  # ur_rtde raises when the answer is not "Stopped"
        return (
            f"the paused control script could not be stopped from the dashboard ({exc}): stop "
            "the program at the pendant, so that Play does not resume it"
        )
    finally:
        with contextlib.suppress(Exception):
            dash.disconnect()
    return "the paused control script was stopped from the dashboard, so Play resumes nothing"
