"""Ending a stream early with nothing left to run: feed hold, standstill, soft reset.

GRBL 1.1 keeps its planner queue and its serial receive buffer through a feed hold ('!'):
cycle start ('~', at the machine or from any sender) runs them on, spindle first. Only a soft
reset (0x18) empties them, and a reset while the axes move loses the position (ALARM:3, locked
until $X or $H; gnea/grbl doc/markdown/commands.md, realtime commands). So a stream that ends
before its last line (an `error:N`, a signal, a stall, a refused line, a filter error) holds the
feed, polls '?' until the machine stands (Hold:0, Idle, Door:0/1 or Alarm), and then resets:
the controller is left with nothing that cycle start could run. A DNC drip feed ends the same
way with its controller's own hold and reset codes (settings dnc_feed_hold, dnc_reset).
"""

from __future__ import annotations

import contextlib
import time

from agent.feedrate.streaming.grbl_protocol import GRBL_BANNER_PREFIX, StatusReport, parse_status
from agent.feedrate.streaming.session import Session, StreamError, code_name

FEED_HOLD, SOFT_RESET, STATUS_QUERY = b"!", b"\x18", b"?"


def standing(report: StatusReport) -> bool:
    """Whether the machine in `report` stands still (a reset now keeps the position)."""
    if report.state == "Hold":
        return report.substate == 0
    if report.state == "Door":
        return report.substate in (0, 1)
    if report.state == "Idle":
        return not report.feed_mm_min
    return report.state in ("Alarm", "Sleep", "Check")


def _label(report: StatusReport) -> str:
    return report.state + (f":{report.substate}" if report.substate is not None else "")


def wait_standstill(session: Session, timeout_s: float, poll_s: float) -> str | None:
    """Poll '?' until a status report shows standstill; its state, or None on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not session.send_realtime(STATUS_QUERY):
            return None
        until = min(time.monotonic() + poll_s, deadline)
        while (left := until - time.monotonic()) > 0:
            try:
                lines = session.read(left)
            except StreamError:
                return None  # the port went away: nothing more can be seen or sent
            for line in lines:
                if line.startswith("<"):
                    with contextlib.suppress(ValueError):
                        report = parse_status(line)
                        session.status = report
                        if standing(report):
                            return _label(report)
                elif line.startswith("ALARM:"):
                    return line  # the controller halted itself: it stands
    return None


def wait_banner(session: Session, timeout_s: float) -> tuple[str | None, list[str]]:
    """The banner GRBL prints after a reset, and what it said before it (ALARM:3, [MSG:])."""
    heard: list[str] = []
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            lines = session.read(left)
        except StreamError:
            break
        for line in lines:
            if line.startswith(GRBL_BANNER_PREFIX):
                return line, heard
            if line.startswith(("ALARM:", "[MSG:")):
                heard.append(line)
    return None, heard


def stop_grbl(
    session: Session,
    hold_timeout_s: float,
    poll_s: float,
    reset_timeout_s: float,
    *,
    whatever_was_sent: bool = False,
) -> str:
    """Feed hold, wait for standstill, soft reset; what was done, for the error message.
    `whatever_was_sent`: also when this session sent nothing (`jha feedrate stop`, after a
    streamer that died)."""
    return hold_then_reset(
        session,
        FEED_HOLD,
        SOFT_RESET,
        hold_timeout_s,
        poll_s,
        reset_timeout_s,
        whatever_was_sent=whatever_was_sent,
    )


def hold_then_reset(
    session: Session,
    hold_code: bytes,
    reset_code: bytes,
    hold_timeout_s: float,
    poll_s: float,
    reset_timeout_s: float,
    *,
    whatever_was_sent: bool = False,
    confirms_reset: bool = True,
) -> str:
    """`hold_code`, standstill (asked with '?'), `reset_code`; what was done, for the error.
    `confirms_reset`: the controller prints GRBL's banner after a reset; a DNC control need
    not, and then a silent controller is reported as unconfirmed, not as failed."""
    if session.sent == 0 and not whatever_was_sent:
        return "nothing was sent, so nothing was held or reset"
    hold, reset = code_name(hold_code, "feed hold"), code_name(reset_code, "reset")
    started = time.monotonic()
    if not session.send_realtime(hold_code):
        return f"the {hold} could not be written: stop the machine at the controller"
    stood = wait_standstill(session, hold_timeout_s, poll_s)
    if stood is not None:
        took_s = time.monotonic() - started
        note = f"{hold} sent; the machine stood still ({stood}) after {took_s:.2f} s"
    else:
        note = (
            f"{hold} sent; no standstill reported within {hold_timeout_s:g} s, so the "
            "reset may cost the position"
        )
    if not session.send_realtime(reset_code):
        return (
            f"{note}; the {reset} could not be written: the controller still holds queued "
            "lines that cycle start would run: reset it at the machine"
        )
    banner, heard = wait_banner(session, reset_timeout_s)
    if banner is not None:
        note += (
            f"; {reset} sent: the controller restarted ({banner}) with its planner and receive "
            "buffer empty, so cycle start runs nothing"
        )
    elif confirms_reset:
        note += (
            f"; {reset} sent, but the controller did not restart within {reset_timeout_s:g} s: "
            "check at the machine that it holds no queued line"
        )
    else:
        note += (
            f"; {reset} sent (the controller confirms no reset: check at the machine that it "
            "holds no queued line)"
        )
    alarms = [h for h in heard if h.startswith("ALARM:")]
    if alarms:
        note += (
            f"; it reports {', '.join(alarms)}: check the position, then unlock ($X) or home ($H)"
        )
    return note
