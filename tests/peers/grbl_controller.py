"""Peer: a GRBL 1.1 controller on the master side of a pty pair (tests and bench).

    python -P tests/peers/grbl_controller.py [--time-scale S] [--accel MM_S2] [--max-rate MM_MIN]
        [--planner-blocks 15] [--rx-buffer 128] [--soft-limits X,Y,Z] [--dnc]
        [--error-at K[:CODE]] [--alarm-at K[:CODE]] [--disconnect-at K] [--stall-at K]
        [--extra-ok-at K] [--boot-alarm] [--door-open] [--stats FILE]

It opens a pty pair (os.openpty), prints `READY <slave path>` and speaks GRBL 1.1 on the master:

* Receive path as serial.c: an "interrupt" reads every byte as soon as it arrives, takes out the
  real-time commands ('?' status report, '!' feed hold, '~' resume, 0x18 reset; bytes > 0x7f are
  dropped) and keeps the rest in a --rx-buffer (128) byte ring. More than that is a protocol
  violation: counted in the stats (rx_overflow_bytes), reported on stderr, the excess dropped as
  GRBL drops it. The parser moves bytes out of the ring into its 80-byte line buffer, so the
  ring holds only what it has not read yet; it stops reading while a line waits for the planner.
* Parser: G0-G3 (G17-G19 arcs, I/J/K or R), G4 P (seconds), G17-G21, G54-G59, G61, G64, G90,
  G91, G93, G94, F, S, T, N, M0-M9, M30, '$' commands ($X $$ $I $; $C check mode: lines are
  parsed and answered but nothing moves, left through a soft reset; $J=... jogs: state Jog
  while the jog moves, the parser's modal state untouched, error:16 for a bad jog); GRBL's
  error codes: 1 no
  letter, 2 bad number, 4 negative F/S/T/P/N, 11 line over 79 characters, 20 unsupported
  code or letter, 21 modal group violation, 22 undefined feed, 25 repeated word, 26 no axis
  words, 28 G4 without P, 32/33/34/35 arc errors, 36 unused words, 9 while in alarm.
* Planner: --planner-blocks (15) blocks including the one executing. A line is answered `ok`
  once all its blocks (an arc: GRBL's chords at $12 = 0.002 mm tolerance) are in the planner; the
  parser blocks while the planner is full, as GRBL's mc_line does. G4, M0-M9 and M30 first wait
  for the planner to empty (GRBL's buffer synchronisation). Soft limits (|coordinate| > travel
  on any axis) raise ALARM:2 and a critical halt: nothing but a reset is heard after it.
* Execution clock: each block takes the time of a trapezoidal speed profile at --accel with
  GRBL's junction-deviation corner speeds ($11 = 0.01 mm; entry speeds planned over the queue
  when a block starts, the last queued block ending at rest; a running block's profile is
  fixed), --time-scale times faster than the wall clock. No step timing, no overrides.
  `?` answers `<Idle|MPos:..|Bf:free,rx|FS:..|Ov:100,100,100>` (no overrides are applied).
* --dnc: drip-feed mode, no `ok`; XOFF (0x13) when the ring holds >= 96 bytes, XON (0x11) once it
  holds < 64 (GRBL's ENABLE_XONXOFF watermarks). Bytes arriving in reads that started after an
  XOFF was sent are counted (max_bytes_after_xoff): what the sender failed to hold back.
* Faults at line K (K counts every line the parser reads, blank ones too): --error-at K[:N]
  answers error:N (default 20) instead of ok; --alarm-at K[:N] throws ALARM:N (default 1,
  critical); --disconnect-at K closes the pty (once the answers before K have been read) and
  exits; --stall-at K stops parsing and answering (status reports too), keeping the pty open:
  only the receive interrupt still works, so the real-time feed hold '!' and resume '~' still
  act on the machine, as GRBL's do from its serial ISR and realtime loop; --extra-ok-at K
  sends the K-th `ok` twice (an answer nobody asked for, as with a second sender on the port).
* Machine inputs: --boot-alarm starts locked in Alarm as GRBL with homing enabled ($22=1) does
  at power-up ([MSG:'$H'|'$X' to unlock]; a soft reset keeps the lock); --door-open starts with
  the safety door open. On stdin, one command a line: `door open` (feed hold, state Door:1),
  `door close` (Door:0, held until '~'), `status` (the status report printed on stdout, read by
  a test as a person reads the machine's display, without touching the serial port).
Stats (JSON) go to --stats at exit. The peer exits on SIGTERM, when stdin closes, or on a
disconnect fault.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import select
import signal
import struct
import sys
import termios
import time
import tty
from collections import deque
from typing import Any

# The machine model lives beside this file; `python -P` does not put this directory on the path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grbl_motion import GrblError, Machine, Parser

BANNER = b"\r\nGrbl 1.1h ['$' for help]\r\n"
SETTINGS = ("$11=0.010", "$12=0.002", "$110={rate:.3f}", "$120={accel:.3f}")
_COMMENT = re.compile(rb"\([^)]*\)|;.*")


class Grbl:
    """The serial protocol around parser and machine."""

    def __init__(self, args: argparse.Namespace, master: int) -> None:
        self.args, self.master = args, master
        travel = tuple(float(v) for v in args.soft_limits.split(",")) if args.soft_limits else None
        self.parser = Parser(travel)  # type: ignore[arg-type]
        self.machine = Machine(
            args.planner_blocks, args.accel, args.max_rate / 60.0, args.time_scale
        )
        self.rx, self.linebuf, self.tx = bytearray(), bytearray(), bytearray()
        self.pending: tuple[str, Any, int] | None = None  # what the current line waits for
        self.alarm: str | None = None  # None, "locked" or "critical"
        self.status_due = self.stalled = self.waiting = False
        self.door, self.door_closed_held = args.door_open, False
        self.check_mode = self.jogging = False
        self.slave = -1  # the pty's other end, to see what the client has not read yet
        if args.boot_alarm:
            self.alarm = "locked"
        self.xoff = self.xoff_counting = False
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
            ),
            0,
        )
        self.after_xoff = 0

    # -- receive interrupt
    def isr(self, data: bytes) -> None:
        self.stats["bytes_received"] += len(data)
        self.stats["max_read_bytes"] = max(self.stats["max_read_bytes"], len(data))
        if self.xoff_counting:
            self.after_xoff += len(data)
            self.stats["max_bytes_after_xoff"] = max(
                self.stats["max_bytes_after_xoff"], self.after_xoff
            )
        if self.xoff:
            self.xoff_counting = True
        if not any(c in data for c in b"?!~\x18") and max(data) < 0x80:
            self.store(data)
            return
        for i, c in enumerate(data):
            if c == 0x3F:
                self.status_due = self.alarm != "critical"
            elif c == 0x21:
                self.machine.hold()
            elif c == 0x7E:
                if not self.door:  # GRBL resumes from Door only once the door is closed
                    self.machine.resume()
                    self.door_closed_held = False
            elif c == 0x18:
                self.reset()
            elif c < 0x80:
                self.store(data[i : i + 1])

    def store(self, data: bytes) -> None:
        if self.alarm == "critical" or self.stalled:
            return  # GRBL's critical-event loop reads nothing
        room = self.args.rx_buffer - len(self.rx)
        if len(data) > room:
            self.stats["rx_overflow_bytes"] += len(data) - room
            print(
                f"grbl peer: RX buffer overflow, {len(data) - room} bytes dropped at line "
                f"{self.stats['lines_received'] + 1}",
                file=sys.stderr,
                flush=True,
            )
            data = data[: max(room, 0)]
        self.rx += data
        self.stats["rx_max_bytes"] = max(self.stats["rx_max_bytes"], len(self.rx))
        if self.args.dnc and not self.xoff and len(self.rx) >= 96:
            self.xoff = True
            self.stats["xoff_sent"] += 1
            self.tx[:0] = b"\x13"
            self.flush()

    def reset(self) -> None:
        self.stats["resets"] += 1
        # A reset during a finished feed hold keeps the position (the machine stands still);
        # one while the axes move loses it: ALARM:3.
        moving = not self.machine.idle and self.machine.frozen is None
        self.machine.clear()
        self.machine.resume()
        self.rx.clear()
        self.linebuf.clear()
        self.pending, self.waiting = None, False
        self.check_mode = self.jogging = False
        self.parser.position = list(self.machine.pos)
        if self.door:
            self.machine.hold()  # GRBL re-enters Door after a reset while the door is ajar
        if moving:
            self.send("ALARM:3")
            self.alarm = "locked"
        elif self.alarm == "critical":
            self.alarm = "locked"
        self.tx += BANNER
        if self.alarm:
            self.send("[MSG:'$H'|'$X' to unlock]")

    # -- main loop
    def send(self, line: str) -> None:
        self.tx += line.encode() + b"\r\n"

    def answer(self, text: str) -> None:
        if text == "ok":
            self.stats["oks_sent"] += 1
            if self.args.dnc:
                return
            if self.stats["oks_sent"] == self.args.extra_ok_at:
                self.send("ok")  # the same write as the real one: one read sees both
        else:
            self.stats["errors_sent"] += 1
        self.send(text)

    def throw(self, code: int, critical: bool) -> None:
        self.stats["alarms_sent"] += 1
        self.machine.clear()
        self.pending = None
        self.send(f"ALARM:{code}")
        if critical:
            self.send("[MSG:Reset to continue]")
            self.rx.clear()
            self.linebuf.clear()
        self.alarm = "critical" if critical else "locked"

    def service(self) -> None:
        while self.alarm != "critical" and not self.stalled:
            if self.pending is not None and not self.drain():
                return
            line = self.take_line()
            if line is None:
                return
            self.handle(line)

    def drain(self) -> bool:
        assert self.pending is not None
        kind, what, line_no = self.pending
        m = self.machine
        if kind == "move":
            points, feed = what
            while points and m.free > 0:
                m.push(points.popleft(), feed, line_no)
            if points:
                if not self.waiting:
                    self.stats["planner_full_waits"] += 1
                    self.waiting = True
                return False
        elif kind == "sync":
            if not m.idle:
                return False
            if what:
                self.pending = ("dwell", m.now() + what, line_no)
                return False
        elif kind == "dwell" and m.now() < what:
            return False
        self.pending, self.waiting = None, False
        self.answer("ok")
        return True

    def take_line(self) -> bytes | None:
        ends = [i for i in (self.rx.find(b"\n"), self.rx.find(b"\r")) if i >= 0]
        if not ends:
            self.linebuf += self.rx
            self.rx.clear()
            line = None
        else:
            k = min(ends)
            line = bytes(self.linebuf + self.rx[:k])
            del self.rx[: k + 1]
            self.linebuf.clear()
        if self.xoff and len(self.rx) < 64:
            self.xoff = self.xoff_counting = False
            self.after_xoff = 0
            self.stats["xon_sent"] += 1
            self.tx += b"\x11"
        return line

    def handle(self, raw: bytes) -> None:
        self.stats["lines_received"] += 1
        k, a = self.stats["lines_received"], self.args
        if k in (a.stall_at, a.disconnect_at):
            self.flush()  # the answers to the lines before this one still go out
            self.stalled = True
            if k == a.disconnect_at:
                self.drained()
                raise SystemExit(0)
            return
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
                kind, what = self.parser.parse(line)
            except GrblError as exc:
                self.answer(f"error:{exc.code}")
                return
            if kind == "soft_limit":
                self.throw(2, critical=True)
            elif self.check_mode:
                self.answer("ok")  # parsed and checked, never executed
            elif kind == "move":
                points, feed = what
                self.pending = ("move", (deque(points), feed), k)
            elif kind in ("sync", "dwell"):
                self.pending = ("sync", what if kind == "dwell" else 0.0, k)
            else:
                self.answer("ok")

    def jog(self, words: str) -> None:
        """$J=...: a G1 move with its own feed, in G90/G91 and G20/G21 only, leaving the
        parser's modal state as it was (GRBL's jog_execute)."""
        if self.alarm or self.pending is not None or "F" not in words:
            self.answer("error:16" if not self.alarm else "error:9")
            return
        p = self.parser
        saved = (p.motion, p.plane, p.scale, p.absolute, p.inverse, p.feed)
        try:
            kind, what = p.parse("G1G94" + words)
        except GrblError:
            kind, what = "bad", None
        finally:
            p.motion, p.plane, p.scale, p.absolute, p.inverse, p.feed = saved
        if kind != "move":
            self.answer("error:16")
            return
        points, feed = what
        self.jogging = True
        self.pending = ("move", (deque(points), feed), self.stats["lines_received"])

    def system(self, line: str) -> None:
        if line == "$C":
            if self.check_mode:
                self.send("[MSG:Disabled]")
                self.answer("ok")
                self.reset()  # GRBL leaves check mode through a soft reset
                return
            if self.alarm or not self.machine.idle:
                self.answer("error:8")
                return
            self.check_mode = True
            self.send("[MSG:Enabled]")
        elif line == "$X" and self.alarm != "critical":
            self.alarm = None
            self.send("[MSG:Caution: Unlocked]")
        elif line == "$$":
            for s in SETTINGS:
                self.send(s.format(rate=self.args.max_rate, accel=self.args.accel))
        elif line == "$I":
            self.send("[VER:1.1h.20190825:]")
            self.send(f"[OPT:V,{self.args.planner_blocks},{self.args.rx_buffer}]")
        elif line != "$":
            self.answer("error:3")
            return
        self.answer("ok")

    def status(self, count: bool = True) -> str:
        m = self.machine
        busy = not (m.idle and self.pending is None and not self.rx and not self.linebuf)
        if self.jogging and not busy:
            self.jogging = False
        if self.alarm:
            state = "Alarm"
        elif self.door:
            state = "Door:1"
        elif m.frozen is not None:
            state = "Door:0" if self.door_closed_held else "Hold:0"
        elif self.check_mode:
            state = "Check"
        elif self.jogging:
            state = "Jog"
        else:
            state = "Run" if busy else "Idle"
        x, y, z = m.position()
        feed = m.head[1].v_peak * 60.0 if m.head else 0.0
        self.stats["status_reports"] += count
        return (
            f"<{state}|MPos:{x:.3f},{y:.3f},{z:.3f}|Bf:{max(m.free, 0)},"
            f"{self.args.rx_buffer - len(self.rx)}|FS:{feed:.0f},0|Ov:100,100,100>"
        )

    def command(self, text: str) -> None:
        """One line from stdin: the machine's inputs and display, outside the serial port."""
        if text == "door open":
            self.door, self.door_closed_held = True, False
            self.machine.hold()
        elif text == "door close":
            self.door = False
            self.door_closed_held = self.machine.frozen is not None
        elif text == "status":
            self.machine.advance()
            print(self.status(count=False), flush=True)
        elif text:
            print(f"grbl peer: unknown command {text!r}", file=sys.stderr, flush=True)

    def drained(self, timeout_s: float = 1.0) -> None:
        """Wait until the other side has read what was written (a UART sends its last bytes
        before the line drops; a pty's unread bytes would vanish with the master)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.flush()
            waiting = struct.unpack("i", fcntl.ioctl(self.slave, termios.FIONREAD, b"\0" * 4))[0]
            if not self.tx and not waiting:
                return
            time.sleep(0.005)

    def flush(self) -> None:
        if self.tx:
            with contextlib.suppress(BlockingIOError):
                del self.tx[: os.write(self.master, self.tx)]

    def step(self) -> float:
        """Advance clock and parser, write what is due; the select timeout until the next event."""
        self.machine.advance()
        self.service()
        self.stats["planner_max_blocks"] = self.machine.max_blocks
        if self.status_due:
            self.status_due = False
            self.send(self.status())
        self.flush()
        wake = [w for w in (self.machine.next_event_wall(), self._dwell_wall()) if w is not None]
        return max(0.0, min([*wake, time.monotonic() + 0.05]) - time.monotonic())

    def _dwell_wall(self) -> float | None:
        if self.pending and self.pending[0] == "dwell":
            m = self.machine
            return m.wall0 + (self.pending[1] + m.offset) / m.scale
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
            "held": self.machine.frozen is not None,
            "door": self.door,
            "check_mode": self.check_mode,
        }


def _fault(text: str | None, default: int) -> tuple[int, int] | None:
    if text is None:
        return None
    line, _, code = text.partition(":")
    return int(line), int(code) if code else default


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--accel", type=float, default=500.0, help="mm/s^2 on each axis")
    p.add_argument("--max-rate", type=float, default=10_000.0, help="mm/min")
    p.add_argument("--planner-blocks", type=int, default=15)
    p.add_argument("--rx-buffer", type=int, default=128)
    p.add_argument("--soft-limits", default=None, help="X,Y,Z travel: |coordinate| <= travel")
    p.add_argument("--dnc", action="store_true")
    p.add_argument("--error-at", default=None)
    p.add_argument("--alarm-at", default=None)
    p.add_argument("--disconnect-at", type=int, default=None)
    p.add_argument("--stall-at", type=int, default=None)
    p.add_argument("--extra-ok-at", type=int, default=None)
    p.add_argument("--boot-alarm", action="store_true")
    p.add_argument("--door-open", action="store_true")
    p.add_argument("--stats", default=None)
    args = p.parse_args(argv)
    args.error_at, args.alarm_at = _fault(args.error_at, 20), _fault(args.alarm_at, 1)
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    grbl = Grbl(args, master)
    grbl.slave = slave
    os.write(master, BANNER)  # the boot banner, before anyone listens (pyserial's open drops it)

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    stdin = sys.stdin.fileno()
    commands = b""
    try:
        # READY inside the try: a SIGTERM right after it still ends with the stats written.
        print(f"READY {os.ttyname(slave)}", flush=True)
        while True:
            # Stalled: no parsing, no answers; the receive interrupt still takes '!' and '~'.
            timeout = None if grbl.stalled else grbl.step()
            writing = [master] if grbl.tx and not grbl.stalled else []
            ready, _, _ = select.select([master, stdin], writing, [], timeout)
            if master in ready:
                try:
                    data = os.read(master, 65536)
                except (BlockingIOError, InterruptedError):
                    data = b""
                if data:
                    grbl.isr(data)
            if stdin in ready:
                data = os.read(stdin, 4096)
                if not data:
                    return 0
                *lines, commands = (commands + data).split(b"\n")
                for line in lines:
                    grbl.command(line.decode("ascii", "replace").strip())
    finally:
        if args.stats:
            with open(args.stats, "w") as f:
                json.dump(grbl.final_stats(), f)
        os.close(master)
        os.close(slave)


if __name__ == "__main__":
    sys.exit(main())
