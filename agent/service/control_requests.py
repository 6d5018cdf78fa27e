"""What the daemon answers on its control socket (agent.service.control_socket carries the
JSON): `status`, and `cycle_now` for one joint, every joint or the identification.

A request only queues: the reply says the cycle still waits for a production stop it fits in
and for every interlock. Anything malformed gets an error reply, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.history.records import Trigger
from agent.service.control_socket import ControlCommand
from agent.service.runner import ControllerRunner
from drivers.base import CycleKind


def answer_request(
    request: dict[str, Any],
    status: Callable[[], dict[str, Any]],
    runners: Mapping[str, ControllerRunner],
) -> dict[str, Any]:
    """The reply to one request; `status()` is the daemon's own part of a `status` reply."""
    cmd = request.get("cmd")
    if cmd == ControlCommand.STATUS:
        return {
            "ok": True,
            **status(),
            "controllers": {name: r.to_dict() for name, r in runners.items()},
        }
    if cmd == ControlCommand.CYCLE_NOW:
        return _cycle_now(request, runners)
    return {"ok": False, "error": f"unknown cmd {cmd!r}: expected 'status' or 'cycle_now'"}


def _cycle_now(request: dict[str, Any], runners: Mapping[str, ControllerRunner]) -> dict[str, Any]:
    name, joint = request.get("controller"), request.get("joint")
    ident = request.get("identification", False)
    if not isinstance(name, str) or not (joint is None or isinstance(joint, str)):
        return {
            "ok": False,
            "error": "expected a string 'controller' and optional string 'joint'",
        }
    if not isinstance(ident, bool) or (ident and joint is not None):
        return {
            "ok": False,
            "error": "expected 'identification' true or false, and no 'joint' with it "
            "(the identification moves every joint)",
        }
    runner = runners.get(name)
    if runner is None:
        known = ", ".join(runners) or "none"
        return {"ok": False, "error": f"unknown controller {name!r} (known: {known})"}
    try:
        if ident:
            queued = runner.enqueue_identification(Trigger.ON_DEMAND)
        else:
            queued = runner.enqueue(joint, Trigger.ON_DEMAND)
    except ValueError as exc:
        return {"ok": False, "error": str(exc)}
    return {
        "ok": True,
        "queued": queued,
        "kind": CycleKind.IDENTIFICATION if ident else CycleKind.BACKLASH,
        "controller": name,
        "message": "queued: the cycle waits for a production stop it fits in and for "
        "every interlock",
    }
