"""Peer: a GRBL 1.1 controller on the master side of a pty pair (tests and bench).

    python -P tests/peers/grbl_controller.py [--time-scale S] [--accel MM_S2] [--max-rate MM_MIN]
        [--planner-blocks 15] [--rx-buffer 128] [--soft-limits X,Y,Z] [--dnc]
        [--error-at K[:CODE]] [--alarm-at K[:CODE]] [--disconnect-at K] [--stall-at K]
        [--extra-ok-at K] [--stuck-at K] [--deaf-at K] [--boot-alarm] [--door-open]
        [--stats FILE]

It opens a pty pair (os.openpty), prints `READY <slave path>` and speaks GRBL 1.1 on the master:

* Receive path as serial.c: an "interrupt" reads every byte as soon as it arrives, takes out the
  real-time commands ('?' status report, '!' feed hold, '~' resume, 0x18 reset; bytes > 0x7f are
  dropped) and keeps the rest in a --rx-buffer (128) byte ring. More than that is a protocol
  violation: counted in the stats (rx_overflow_bytes), reported on stderr, the excess dropped as
  GRBL drops it. The parser moves bytes out of the ring into its 80-byte line buffer, so the
  ring holds only what it has not read yet; it stops reading while a line waits for the planner.
* Parser (grbl/gcode.py): GRBL 1.1's g-code support list in its default build (G0-G3, G4,
  G10 L2/L20, G17-G21, G28/G30(.1), G38.2-5, G40, G43.1/G49, G53, G54-G59, G61, G80, G90/G91,
  G91.1, G92(.1), G93/G94; M0 M1 M2 M30 M3-M5 M8 M9; F I J K L N P R S T X Y Z); '$' commands
  ($X $$ $I $; $C check mode: lines are parsed and answered but nothing moves, left through a
  soft reset; $J=... jogs: state Jog while the jog moves, the parser's modal state untouched,
  error:16 for a bad jog); GRBL's error codes: 1 no letter ('%' too), 2 bad number, 4 negative
  F/S/T/P/N, 11 line over 79 characters, 20 unsupported code or letter (M6, M7, G64, G61.1,
  G90.1...), 21 modal group violation, 22 undefined feed, 23 non-integer code, 24 two axis
  commands, 25 repeated word, 26 no axis words, 28 missing P/L, 29 bad coordinate system, 30 G53
  without G0/G1, 31 axis words with G80, 32-35 arc errors, 36 unused words, 37 G43.1 axis, 38
  tool over 255, 9 while in alarm. Spindle (M3/M4/M5, S) and coolant (M8/M9) switch once the
  planner has emptied, as GRBL's do; the status report shows `FS:feed,rpm` and `A:S|C|F`.
* Planner: --planner-blocks (15) blocks including the one executing. A line is answered `ok`
  once all its blocks (an arc: GRBL's chords at $12 = 0.002 mm tolerance) are in the planner; the
  parser blocks while the planner is full, as GRBL's mc_line does. G4, M0-M9 and M30 first wait
  for the planner to empty (GRBL's buffer synchronisation). Soft limits (|coordinate| > travel
  on any axis) raise ALARM:2 and a critical halt: nothing but a reset is heard after it.
* Execution clock: each block takes the time of a trapezoidal speed profile at --accel with
  GRBL's junction-deviation corner speeds ($11 = 0.01 mm; entry speeds planned over the queue
  when a block starts, the last queued block ending at rest; a running block's profile is
  fixed), --time-scale times faster than the wall clock. No step timing, no overrides.
  Feed hold '!' decelerates (Hold:1) and stands (Hold:0) keeping planner and receive buffer;
  cycle start '~' (ignored until the hold is complete) runs them on; soft reset 0x18 empties
  them, stops spindle and coolant, restores the modal defaults, and while the axes move throws
  ALARM:3 (locked until $X).
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
  sends the K-th `ok` twice (an answer nobody asked for, as with a second sender on the port);
  --stuck-at K freezes the motion at line K while the state stays Run and '?' is answered (a
  drive fault the firmware does not see), until a soft reset; --deaf-at K stops taking lines
  from the receive ring at line K (unanswered, the ring fills) while the planner runs out and
  '?' is answered, Idle: the real firmware's state in the field report of issue 28, until a
  soft reset.
* Machine inputs: --boot-alarm starts locked in Alarm as GRBL with homing enabled ($22=1) does
  at power-up ([MSG:'$H'|'$X' to unlock]; a soft reset keeps the lock); --door-open starts with
  the safety door open. On stdin, one command a line: `door open` (feed hold, state Door:1),
  `door close` (Door:0, held until '~'), `status` (the status report printed on stdout, read by
  a test as a person reads the machine's display, without touching the serial port), `buffers`
  (JSON on stdout: state, runnable_lines (lines cycle start would still run: planner, parser,
  complete lines in the receive ring), planner_blocks, rx_bytes, position, speed, spindle).
  The stats also list every '!', '~' and 0x18 received with the state and speed at that moment.
Stats (JSON) go to --stats at exit. The peer exits on SIGTERM, when stdin closes, or on a
disconnect fault.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import tty
from typing import Any

# The peer's parts live in grbl/ beside this file; `python -P` does not put this directory on
# the path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grbl.firmware import BANNER, Grbl


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
    p.add_argument("--stuck-at", type=int, default=None)
    p.add_argument("--deaf-at", type=int, default=None)
    p.add_argument("--boot-alarm", action="store_true")
    p.add_argument("--door-open", action="store_true")
    p.add_argument("--stats", default=None)
    p.add_argument(
        "--rt-priority", type=int, default=10, help="SCHED_FIFO priority, 0: the machine's own"
    )
    args = p.parse_args(argv)
    args.error_at, args.alarm_at = _fault(args.error_at, 20), _fault(args.alarm_at, 1)
    if args.rt_priority > 0:
        # GRBL takes each byte in its receive interrupt and sends XOFF at once; a peer the
        # machine's other work holds up reads late, finds a pty buffer full of bytes a real UART
        # would never have delivered unthrottled, and reports an overflow the sender never made.
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.rt_priority))
        except OSError as exc:
            print(f"grbl peer: no real-time priority ({exc})", file=sys.stderr, flush=True)
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    grbl = Grbl(args, master)
    grbl.port.slave = slave
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
            writing = [master] if grbl.port.tx and not grbl.stalled else []
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
