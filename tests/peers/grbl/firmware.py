"""The GRBL peer's firmware: the real-time commands taken out by the receive interrupt, the
line protocol (G-code lines through the parser of gcode.py into the planner of motion.py, '$'
commands, jogs, check mode, alarms, injected faults), spindle and coolant, status reports and
the machine's inputs (safety door, boot lock), over the serial port of serial_port.py. The
behaviour and options are those of tests/peers/grbl_controller.py, the peer's entry point.

As GRBL 1.1 (realtime_cmds.md): a feed hold '!' keeps the planner and the receive buffer, and
cycle start '~' runs them on; only a soft reset (0x18) empties them, stops spindle and coolant
and restores the parser's modal defaults; a reset while the axes move (a hold still
decelerating included) throws ALARM:3 and locks until $X or $H.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import deque
from typing import Any

from .gcode import GrblError, Parser, Step
from .motion import Machine
from .serial_port import SerialPort

BANNER = b"\r\nGrbl 1.1h ['$' for help]\r\n"
SETTINGS = ("$11=0.010", "$12=0.002", "$110={rate:.3f}", "$120={accel:.3f}")
_COMMENT = re.compile(rb"\([^)]*\)|;.*")


class Grbl:
    """What the bytes and lines from the serial port mean to GRBL, around parser and machine."""

    def __init__(self, args: argparse.Namespace, master: int) -> None:
        self.args = args
        travel = tuple(float(v) for v in args.soft_limits.split(",")) if args.soft_limits else None
        self.parser = Parser(travel)  # type: ignore[arg-type]
        self.machine = Machine(
            args.planner_blocks, args.accel, args.max_rate / 60.0, args.time_scale
        )
        # The steps of the line being run and its number (lines_received); None: none.
        self.pending: tuple[deque[Step], int] | None = None
        self.spindle, self.rpm, self.coolant = "off", 0.0, False
        self.realtime: list[dict[str, Any]] = []  # each '!', '~' and 0x18, as the machine was
        self.alarm: str | None = None  # None, "locked" or "critical"
        self.status_due = self.stalled = self.waiting = False
        self.door, self.door_closed_held = args.door_open, False
        self.check_mode = self.jogging = False
        self.stuck = False  # --stuck-at: the machine stopped moving, the state still Run
        self.deaf = False  # --deaf-at: no line is taken from the receive ring, '?' still answered
        if args.boot_alarm:
            self.alarm = "locked"
        self.stats: dict[str, Any] = dict.fromkeys(
            (
                "lines_received",
                "oks_sent",
                "errors_sent",
                "alarms_sent",
                "rx_max_bytes",
                "rx_overflow_bytes",
                "planner_full_waits",
                "status_reports",
                "resets",
                "xoff_sent",
                "xon_sent",
                "max_bytes_after_xoff",
                "bytes_received",
                "max_read_bytes",
                "late_reads",
            ),
            0,
        )
        self.port = SerialPort(master, args.rx_buffer, args.dnc, self.stats)

    # -- receive interrupt
    def isr(self, data: bytes) -> None:
        self.port.count(data)
        if not any(c in data for c in b"?!~\x18") and max(data) < 0x80:
            self.store(data)
            return
        for i, c in enumerate(data):
            if c == 0x3F:
                self.status_due = self.alarm != "critical"
            elif c == 0x21:
                self.note("!")
                self.machine.hold()
            elif c == 0x7E:
                self.note("~")
                if not self.door:  # GRBL resumes from Door only once the door is closed
                    self.machine.resume()
                    self.door_closed_held = self.door_closed_held and self.machine.stopping
            elif c == 0x18:
                self.note("0x18")
                self.reset()
            elif c < 0x80:
                self.store(data[i : i + 1])

    def store(self, data: bytes) -> None:
        if self.alarm == "critical" or self.stalled:
            return  # GRBL's critical-event loop reads nothing
        self.port.store(data)

    def note(self, code: str) -> None:
        self.machine.advance()
        self.realtime.append(
            {
                "code": code,
                "state": self.state(),
                "speed_mm_min": self.machine.speed() * 60.0,
                "runnable_lines": self.runnable_lines(),
            }
        )

    def reset(self) -> None:
        self.stats["resets"] += 1
        # A reset during a finished feed hold keeps the position (the machine stands still);
        # one while the axes move (a hold still decelerating too) loses it: ALARM:3.
        moving = self.machine.moving
        self.machine.clear()
        self.machine.resume()
        self.port.clear()
        self.pending, self.waiting = None, False
        self.check_mode = self.jogging = self.stuck = self.deaf = False
        self.apply({"spindle": "off", "rpm": 0.0, "coolant": False})
        self.parser.defaults()
        self.parser.position = list(self.machine.pos)
        if self.door:
            self.machine.hold()  # GRBL re-enters Door after a reset while the door is ajar
        if moving:
            self.port.send("ALARM:3")
            self.alarm = "locked"
        elif self.alarm == "critical":
            self.alarm = "locked"
        self.port.tx += BANNER
        if self.alarm:
            self.port.send("[MSG:'$H'|'$X' to unlock]")

    # -- main loop
    def answer(self, text: str) -> None:
        if text == "ok":
            self.stats["oks_sent"] += 1
            if self.args.dnc:
                return
            if self.stats["oks_sent"] == self.args.extra_ok_at:
                self.port.send("ok")  # the same write as the real one: one read sees both
        else:
            self.stats["errors_sent"] += 1
        self.port.send(text)

    def throw(self, code: int, critical: bool) -> None:
        self.stats["alarms_sent"] += 1
        self.machine.clear()
        self.pending = None
        self.apply({"spindle": "off", "rpm": 0.0, "coolant": False})
        self.port.send(f"ALARM:{code}")
        if critical:
            self.port.send("[MSG:Reset to continue]")
            self.port.clear()
        self.alarm = "critical" if critical else "locked"

    def service(self) -> None:
        while self.alarm != "critical" and not self.stalled and not self.deaf:
            if self.pending is not None and not self.drain():
                return
            line = self.port.take_line()
            if line is None:
                return
            self.handle(line)

    def drain(self) -> bool:
        """Run the pending line's steps as far as the machine lets them; True once done."""
        if self.pending is None:
            return True
        steps, line_no = self.pending
        m = self.machine
        while steps:
            step = steps[0]
            if step[0] == "move":
                points, speed = step[1], step[2]
                while points and m.free > 0:
                    m.push(points.popleft(), speed, line_no)
                if points:
                    if not self.waiting:
                        self.stats["planner_full_waits"] += 1
                        self.waiting = True
                    return False
            elif step[0] == "sync":  # GRBL's protocol_buffer_synchronize, then the action
                if not m.idle:
                    return False
                self.apply(step[1])
                if step[1].get("stop") == 0:  # M0: a feed hold until cycle start
                    m.hold()
                    steps[0] = ("paused",)
                    continue
            elif step[0] == "paused":
                if m.frozen is not None:
                    return False
            elif step[0] == "dwell":
                steps[0] = ("until", m.now() + step[1])
                continue
            elif step[0] == "until" and m.now() < step[1]:
                return False
            steps.popleft()
        self.pending, self.waiting = None, False
        self.answer("ok")
        return True

    def apply(self, effects: dict[str, Any]) -> None:
        """Spindle and coolant as a line (once the planner has emptied) or a reset sets them."""
        if "spindle" in effects:
            self.spindle, self.rpm = effects["spindle"], effects["rpm"]
        if "coolant" in effects:
            self.coolant = effects["coolant"]
        if effects.get("stop") in (2, 30):  # program end
            self.spindle, self.rpm, self.coolant = "off", 0.0, False

    def runnable_lines(self) -> int:
        """Lines the machine would still run on cycle start: those with blocks in the
        planner, the one the parser is running, and the complete lines in the receive ring."""
        lines = self.machine.lines() | ({self.pending[1]} if self.pending else set())
        return len(lines) + bytes(self.port.rx).count(b"\n")

    def handle(self, raw: bytes) -> None:
        self.stats["lines_received"] += 1
        k, a = self.stats["lines_received"], self.args
        if k in (a.stall_at, a.disconnect_at):
            self.port.flush()  # the answers to the lines before this one still go out
            self.stalled = True
            if k == a.disconnect_at:
                self.port.drained()
                raise SystemExit(0)
            return
        if k == a.deaf_at:  # this line and the ones after it stay in the ring, unanswered
            self.port.rx[:0] = raw + b"\n"
            self.deaf = True
            return
        if k == a.stuck_at:  # a drive fault the firmware does not see: Run, but no motion
            self.machine.frozen, self.stuck = self.machine.now(), True
        if a.alarm_at and k == a.alarm_at[0]:
            self.throw(a.alarm_at[1], critical=True)
            return
        if a.error_at and k == a.error_at[0]:
            self.answer(f"error:{a.error_at[1]}")
            return
        line = b"".join(_COMMENT.sub(b"", raw).split()).upper().decode("ascii", "replace")
        if len(line) > 79:
            self.answer("error:11")
        elif not line:
            self.answer("ok")
        elif line.startswith("$J="):
            self.jog(line[3:])
        elif line.startswith("$"):
            self.system(line)
        elif self.alarm:
            self.answer("error:9")
        else:
            try:
                steps = self.parser.parse(line)
            except GrblError as exc:
                self.answer(f"error:{exc.code}")
                return
            if steps and steps[0][0] == "soft_limit":
                self.throw(2, critical=True)
            elif self.check_mode or not steps:
                self.answer("ok")  # check mode: parsed and checked, never executed
            else:
                queued = deque(("move", deque(s[1]), s[2]) if s[0] == "move" else s for s in steps)
                self.pending = (queued, k)

    def jog(self, words: str) -> None:
        """$J=...: a G1 move with its own feed, in G90/G91 and G20/G21 only, leaving the
        parser's modal state as it was (GRBL's jog_execute)."""
        if self.alarm or self.pending is not None or "F" not in words:
            self.answer("error:16" if not self.alarm else "error:9")
            return
        p = self.parser
        saved = (p.motion, p.plane, p.scale, p.absolute, p.inverse, p.feed)
        try:
            steps = p.parse("G1G94" + words)
        except GrblError:
            steps = []
        finally:
            p.motion, p.plane, p.scale, p.absolute, p.inverse, p.feed = saved
        if [s[0] for s in steps] != ["move"]:
            self.answer("error:16")
            return
        self.jogging = True
        move = ("move", deque(steps[0][1]), steps[0][2])
        self.pending = (deque([move]), self.stats["lines_received"])

    def system(self, line: str) -> None:
        if line == "$C":
            if self.check_mode:
                self.port.send("[MSG:Disabled]")
                self.answer("ok")
                self.reset()  # GRBL leaves check mode through a soft reset
                return
            if self.alarm or not self.machine.idle:
                self.answer("error:8")
                return
            self.check_mode = True
            self.port.send("[MSG:Enabled]")
        elif line == "$X" and self.alarm != "critical":
            self.alarm = None
            self.port.send("[MSG:Caution: Unlocked]")
        elif line == "$$":
            for s in SETTINGS:
                self.port.send(s.format(rate=self.args.max_rate, accel=self.args.accel))
        elif line == "$I":
            self.port.send("[VER:1.1h.20190825:]")
            self.port.send(f"[OPT:V,{self.args.planner_blocks},{self.args.rx_buffer}]")
        elif line != "$":
            self.answer("error:3")
            return
        self.answer("ok")

    def state(self) -> str:
        m = self.machine
        # Run while blocks execute or a line waits on them; a dwell runs with the planner
        # empty, and GRBL then reports Idle.
        steps = self.pending[0] if self.pending else None
        dwelling = bool(steps) and steps[0][0] in ("dwell", "until")  # type: ignore[index]
        # Deaf (--deaf-at), the lines in the ring wait for a parser that does not come: Idle.
        waiting = self.pending is not None or (not self.port.empty() and not self.deaf)
        busy = not m.idle or (not dwelling and waiting)
        if self.jogging and not busy:
            self.jogging = False
        if self.alarm:
            return "Alarm"
        if self.stuck:
            return "Run"
        if self.door:
            return "Door:1"
        if m.stopping:
            return "Door:2" if self.door_closed_held else "Hold:1"
        if m.frozen is not None:
            return "Door:0" if self.door_closed_held else "Hold:0"
        if self.check_mode:
            return "Check"
        if self.jogging:
            return "Jog"
        return "Run" if busy else "Idle"

    def status(self, count: bool = True) -> str:
        m = self.machine
        state = self.state()
        x, y, z = m.position()
        self.stats["status_reports"] += count
        # A: (accessories) only while one is on, as GRBL 1.1 shows it; S CW, C CCW, F flood.
        on = {"cw": "S", "ccw": "C"}.get(self.spindle, "") + ("F" if self.coolant else "")
        return (
            f"<{state}|MPos:{x:.3f},{y:.3f},{z:.3f}|Bf:{max(m.free, 0)},"
            f"{self.port.rx_free}|FS:{m.speed() * 60.0:.0f},{self.rpm:.0f}|Ov:100,100,100"
            + (f"|A:{on}" if on else "")
            + ">"
        )

    def buffers(self) -> dict[str, Any]:
        """What the machine holds and does now (the peer's `buffers` command, for tests)."""
        m = self.machine
        m.advance()
        return {
            "state": self.state(),
            "runnable_lines": self.runnable_lines(),
            "planner_blocks": m.blocks,
            "rx_bytes": len(self.port.rx) + len(self.port.linebuf),
            "position_mm": m.position(),
            "speed_mm_min": m.speed() * 60.0,
            "spindle": self.spindle,
            "rpm": self.rpm,
            "coolant": self.coolant,
            "alarm": self.alarm,
        }

    def command(self, text: str) -> None:
        """One line from stdin: the machine's inputs and display, outside the serial port."""
        if text == "door open":
            self.door, self.door_closed_held = True, False
            self.machine.hold()
        elif text == "door close":
            self.door = False
            self.door_closed_held = self.machine.frozen is not None or self.machine.stopping
        elif text == "status":
            self.machine.advance()
            print(self.status(count=False), flush=True)
        elif text == "buffers":
            print(json.dumps(self.buffers()), flush=True)
        elif text:
            print(f"grbl peer: unknown command {text!r}", file=sys.stderr, flush=True)

    def step(self) -> float:
        """Advance clock and parser, write what is due; the select timeout until the next event."""
        self.machine.advance()
        self.service()
        self.stats["planner_max_blocks"] = self.machine.max_blocks
        if self.status_due:
            self.status_due = False
            self.port.send(self.status())
        self.port.flush()
        wake = [w for w in (self.machine.next_event_wall(), self._dwell_wall()) if w is not None]
        return max(0.0, min([*wake, time.monotonic() + 0.05]) - time.monotonic())

    def _dwell_wall(self) -> float | None:
        if self.pending and self.pending[0] and self.pending[0][0][0] == "until":
            m = self.machine
            return m.wall0 + (self.pending[0][0][1] + m.offset) / m.scale
        return None

    def final_stats(self) -> dict[str, Any]:
        return {
            **self.stats,
            "blocks_executed": self.machine.executed,
            "planner_max_blocks": self.machine.max_blocks,
            "machine_time_s": self.machine.now(),
            "position_mm": self.machine.position(),
            "alarm": self.alarm,
            "stalled": self.stalled,
            "held": self.machine.frozen is not None or self.machine.stopping,
            "spindle": self.spindle,
            "realtime": self.realtime,
            "door": self.door,
            "check_mode": self.check_mode,
        }
