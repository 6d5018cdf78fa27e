"""GRBL 1.1's serial vocabulary: real-time bytes, error and alarm codes, status reports, and
what a line must look like to be sent (gnea/grbl doc/markdown/interface.md, commands.md).

No I/O here: agent.feedrate.streaming.grbl speaks the protocol with these, drivers/grbl/driver.py
reads status with them, tests and the bench check replies with them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

XON, XOFF = 0x11, 0x13
REALTIME_COMMANDS = frozenset(b"?!~\x18")
GRBL_BANNER_PREFIX = "Grbl "

GRBL_ERRORS: dict[int, str] = {
    1: "expected command letter",
    2: "bad number format",
    3: "invalid '$' statement",
    4: "negative value",
    5: "homing not enabled",
    6: "step pulse < 3 us",
    7: "EEPROM read failed",
    8: "'$' command only when idle",
    9: "G-code locked out (alarm/jog)",
    10: "soft limits need homing",
    11: "line overflow (too many characters)",
    12: "step rate > 30 kHz",
    13: "safety door open",
    14: "line length exceeded (EEPROM)",
    15: "jog travel exceeded",
    16: "invalid jog command",
    17: "laser mode needs PWM",
    20: "unsupported or invalid g-code command",
    21: "modal group violation",
    22: "undefined feed rate",
    23: "command requires an integer value",
    24: "two commands need axis words",
    25: "repeated g-code word",
    26: "no axis words",
    27: "invalid line number",
    28: "missing value word (P/L)",
    29: "G59.x not supported",
    30: "G53 needs G0/G1",
    31: "unused axis words",
    32: "arc without in-plane axis words",
    33: "invalid motion target",
    34: "arc radius error",
    35: "arc without in-plane offset",
    36: "unused value words",
    37: "G43.1 on wrong axis",
    38: "tool number too large",
}
GRBL_ALARMS: dict[int, str] = {
    1: "hard limit triggered",
    2: "soft limit: motion target exceeds machine travel",
    3: "reset while in motion",
    4: "probe fail (initial state)",
    5: "probe fail (no contact)",
    6: "homing fail (reset)",
    7: "homing fail (door)",
    8: "homing fail (pull-off)",
    9: "homing fail (switch not found)",
}
_COMMENT = re.compile(r"\([^)]*\)|;.*")

# Why a stream must not start in each GRBL 1.1 state but Idle (interface.md, "Machine State").
# After the handshake's soft reset only Alarm and Door survive (GRBL keeps an alarm lock across
# a reset and re-enters Door while the door is ajar); the others show with `handshake: none` or
# `banner`, when another program left the machine busy.
NOT_READY: dict[str, str] = {
    "Alarm": "the controller is locked in alarm (a limit, an aborted motion, or homing required "
    "at power-up): clear the cause, home ($H) or unlock ($X) it, check the position",
    "Door": "the safety door is open: close it (the controller would hold every motion)",
    "Hold": "a feed hold is in force: another program's motion is paused on the machine",
    "Run": "the machine is moving: another program or command is running",
    "Jog": "the machine is jogging",
    "Home": "a homing cycle is running",
    "Check": "the controller is in check mode ($C): lines would be parsed but not run",
    "Sleep": "the controller sleeps: reset it",
}


@dataclass(frozen=True)
class StatusReport:
    """A GRBL 1.1 `<State|MPos:x,y,z|Bf:15,128|FS:f,s|...>` report (interface.md)."""

    state: str
    substate: int | None
    machine_mm: tuple[float, ...] | None
    work_mm: tuple[float, ...] | None
    planner_free: int | None
    rx_free: int | None
    feed_mm_min: float | None
    fields: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_status(line: str) -> StatusReport:
    """Parse one status report line; ValueError when it is not one."""
    if not (line.startswith("<") and line.endswith(">")):
        raise ValueError(f"not a status report: {line!r}")
    body = line[1:-1]
    if "|" not in body and "," in body:
        # GRBL 0.9 (`<Idle,MPos:0.000,0.000,0.000,WPos:...>`): the state is what matters to the
        # streamer's start check; its comma-joined fields are not split apart.
        head, parts = body.partition(",")[0], []
    else:
        head, *parts = body.split("|")
    state, _, sub = head.partition(":")
    fields = dict(p.partition(":")[::2] for p in parts)

    def numbers(key: str) -> tuple[float, ...] | None:
        return tuple(float(v) for v in fields[key].split(",")) if key in fields else None

    bf, fs = numbers("Bf"), numbers("FS") or numbers("F")
    return StatusReport(
        state,
        int(sub) if sub.isdigit() else None,
        numbers("MPos"),
        numbers("WPos"),
        int(bf[0]) if bf else None,
        int(bf[1]) if bf and len(bf) > 1 else None,
        fs[0] if fs else None,
        fields,
    )


def not_ready_reason(report: StatusReport, heard: list[str] | tuple[str, ...] = ()) -> str:
    """Why a stream must not start on a controller reporting `report` (not Idle). `heard` are
    the controller's last messages (ALARM:N, [MSG:...]), quoted because they name the cause."""
    state = report.state + (f":{report.substate}" if report.substate is not None else "")
    why = NOT_READY.get(
        report.state, "a state GRBL 1.1 does not document: nothing may assume it is safe"
    )
    named: list[str] = []
    for h in heard:
        if h.startswith("ALARM:"):
            code = reply_code(h)
            named.append(f"{h} ({GRBL_ALARMS[code]})" if code in GRBL_ALARMS else h)
        elif h.startswith("[MSG:"):
            named.append(h)
    if named:
        why += "; the controller said " + ", ".join(named[-3:])
    return f"the controller reports {state}, not Idle: {why}. Refusing to stream; nothing was sent"


def prepare_line(text: str, compact: bool = True) -> str:
    """The line as sent: comments removed, spaces dropped (compact) or trimmed, no terminator."""
    body = _COMMENT.sub("", text.rstrip("\r\n"))
    return "".join(body.split()) if compact else body.strip()


def line_problem(line: str, max_chars: int | None) -> str | None:
    """Why the controller cannot take `line` as it is (None: it can)."""
    if not line.isascii():
        return "non-ASCII character (GRBL takes bytes > 0x7f as real-time commands)"
    for ch in line:
        if ord(ch) in REALTIME_COMMANDS or ord(ch) < 0x20:
            what = "a real-time command" if ord(ch) in REALTIME_COMMANDS else "a control byte"
            return f"contains {ch!r}, {what} the controller would take out of the line"
    if max_chars is not None and len(line) > max_chars:
        return f"{len(line)} characters, the controller accepts {max_chars}"
    return None


def reply_code(line: str) -> int | None:
    """N of `error:N` or `ALARM:N` (None when the reply carries no number)."""
    tail = line.partition(":")[2].strip()
    return int(tail) if tail.isdigit() else None
