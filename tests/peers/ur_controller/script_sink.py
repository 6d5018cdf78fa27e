"""Port 30003 takes URScript programs; ur_rtde's control script is recognised and emulated.

The emulator does not interpret URScript. It recognises the program ur_rtde uploads
(`def rtde_control():` with its HEADER/CONTROL_LOOP markers and the injected register offset) and
plays that program's main loop, once per controller cycle (one `sync()`), on the registers:

- `input_int_register_0` (+offset) is the command; the script answers on `output_int_register_0`:
  1 = ready for a command, 2 = done with it. Realtime commands (speedj, servoj, ...) are processed
  and answered "ready" every cycle; any other command runs once, answers "done", and waits for the
  client to clear the command (0) before answering "ready" again.
- `output_int_register_2` is the asynchronous-operation progress word, written exactly as the
  script's `write_async_progress_register` does (change counter, operation id, running bit).
- movej (1, sync or async), speedj (9), servoj (11: target q, t, lookahead, gain in input
  doubles 0-5, 8, 9, 10), speed_stop (15), servo_stop (16), stopl/stopj (33/34, sync or async),
  set_watchdog (35) and stop script (255) act on the arm; other commands are acknowledged and
  logged as unsupported, so a test can see they were never used.
- protective_stop (31, ur_rtde's triggerProtectiveStop): the script calls URScript's
  `protective_stop()` (the line is in the script for controllers 3.8 and newer only, `$3.8`):
  the controller's own protective stop (Controller.protective_stop), after which the program is
  paused and the command never answered "done" (ur_rtde then finds the script not running).
- The injected fault `stops_ignored` (Controller attribute, set by the tests): speed_stop,
  servo_stop and stopl/stopj are answered "done" at once and the arm runs on, as with a script
  whose stop does not take; only the agent's escalation can stop it then.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.peers.ur_controller.controller import Controller

log = logging.getLogger("ur_controller.script")

SCRIPT_PORT = 30003
REALTIME_CMDS = frozenset({24, 11, 9, 10, 6, 25, 26, 27, 38, 58, 66, 67, 68, 69, 70, 71})
CMD_NAMES = {
    0: "no_cmd",
    1: "movej",
    9: "speedj",
    11: "servoj",
    15: "speed_stop",
    16: "servo_stop",
    31: "protective_stop",
    33: "stopl",
    34: "stopj",
    35: "set_watchdog",
    255: "stop_script",
}
_OFFSET = re.compile(r"reg_offset_int = # int register offset\n\s*(\d+)")
_PROGRAM = re.compile(r"^def (\w+)\(\):\n.*?^end\s*$", re.S | re.M)


def is_rtde_control_script(text: str) -> bool:
    return (
        text.startswith("def rtde_control():")
        and "# HEADER_BEGIN" in text
        and "# NODE_CONTROL_LOOP_BEGINS" in text
    )


def register_offset(text: str) -> int:
    m = _OFFSET.search(text)
    return int(m.group(1)) if m else 0


class ControlScript:
    """ur_rtde's `rtde_control()` main loop, one iteration per controller cycle."""

    def __init__(self, controller: Controller, offset: int) -> None:
        self.c = controller
        self.off = offset
        self.executing = False
        self.pending_cmd = 0
        self._blocking = False
        self.move_async = False
        self.stop_async = False
        self.speeding = False
        self.servoing = False
        self._speed_applied: tuple[tuple[float, ...], float] | None = None
        self.wr_count = 0
        self.op_id = 0
        self._write_async(-1)  # reset_async_progress()
        self._out_int(0, 1)  # signal_ready()

    # Registers -----------------------------------------------------------------------------
    def _in_int(self, i: int) -> int:
        return self.c.input_int[i + self.off]

    def _in_dbl(self, i: int) -> float:
        return self.c.input_double[i + self.off]

    def _out_int(self, i: int, v: int) -> None:
        self.c.output_int[i + self.off] = v

    def _q(self) -> list[float]:
        return [self._in_dbl(i) for i in range(6)]

    def _write_async(self, value: int) -> None:
        self.wr_count = 0 if self.wr_count + 1 > 127 else self.wr_count + 1
        if value == 0:
            self.op_id = 0 if self.op_id + 1 > 127 else self.op_id + 1
        reg = self.wr_count * 65536 + self.op_id * 16777216
        if value >= 0:
            reg += min(value, 32767) + 32768
        self._out_int(2, reg)

    # One sync() ----------------------------------------------------------------------------
    def tick(self) -> bool:
        """Run one loop iteration; False when the script has terminated."""
        arm = self.c.arm
        if self.move_async and arm.profile_done and not arm.moving:
            self.move_async = False
            self._write_async(-1)
        if self.stop_async and not arm.moving:
            self.stop_async = False
            self._write_async(-1)
        if self._blocking:
            if arm.moving or not arm.profile_done:
                return True
            self._blocking = False
            return self._finish(self.pending_cmd)
        cmd = self._in_int(0)
        if cmd in REALTIME_CMDS:
            self._process(cmd)
            self._out_int(0, 1)
        elif cmd == 0:
            self.executing = False
            self._out_int(0, 1)
        elif not self.executing:
            self.pending_cmd = cmd
            self._process(cmd)
            if not self._blocking:
                return self._finish(cmd)
        return True

    def _finish(self, cmd: int) -> bool:
        self.executing = True
        if cmd == 255:
            return False
        self._out_int(0, 2)  # signal_done_with_cmd()
        return True

    def _stop_async_move(self) -> None:
        if self.move_async:
            self.move_async = False
            self._write_async(-1)

    def _process(self, cmd: int) -> None:
        c, arm = self.c, self.c.arm
        if not ((cmd == 9 and self.speeding) or (cmd == 11 and self.servoing)):
            c.log_command(cmd)
        if cmd == 1:
            q, v, a, asynchronous = self._q(), self._in_dbl(6), self._in_dbl(7), self._in_int(1)
            self._stop_async_move()
            arm.movej(q, v, a)
            if asynchronous == 1:
                self.move_async = True
                self._write_async(0)
            else:
                self._blocking = True
        elif cmd == 9:
            target = (tuple(self._q()), self._in_dbl(6))
            if target != self._speed_applied:
                self._speed_applied = target
                arm.speedj(list(target[0]), target[1])
            self.speeding = True
        elif cmd == 11:
            arm.servoj(self._q(), self._in_dbl(10))
            self.servoing = True
        elif cmd in (15, 16, 33, 34) and c.stops_ignored:
            c.event(f"{CMD_NAMES[cmd]} ignored (injected fault stops_ignored)")
        elif cmd == 31:
            if c.version[:2] >= (3, 8):
                c.protective_stop("protective_stop() called by the control script")
            else:
                c.event("protective_stop: not in the script for controllers before 3.8")
        elif cmd == 16:
            # the script kills its servo thread, then the arm decelerates to rest
            self.servoing = False
            arm.stopj(self._in_dbl(0))
            self._blocking = True
        elif cmd == 15:
            self.speeding = False
            self._speed_applied = None
            arm.stopj(self._in_dbl(0))
            self._blocking = True
        elif cmd in (33, 34):
            decel, asynchronous = self._in_dbl(0), self._in_int(1)
            if self.servoing:
                c.event("stopj while the servoj thread is alive (use servoStop)")
            if self.speeding:
                # URScript's speed_thread is not killed by stopj/stopl: it would resume.
                c.event("stopj while the speedj thread is alive (use speedStop)")
            self._stop_async_move()
            arm.stopj(decel)
            if asynchronous == 1:
                self.stop_async = True
                self._write_async(0)
            else:
                self._blocking = True
        elif cmd == 35:
            c.set_watchdog(f"input_int_register_{self.off}", self._in_dbl(0))
        elif cmd != 255:
            c.event(f"unsupported command {cmd}")


class ScriptSink:
    """Accepts URScript on port 30003 and hands every complete program to the controller."""

    def __init__(self, host: str, controller: Controller, port: int = SCRIPT_PORT) -> None:
        self.controller = controller
        self.listener = socket.create_server((host, port))
        self.thread = threading.Thread(target=self._accept_loop, name="script", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.listener.close()

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        buf = ""
        with sock:
            while True:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data.decode(errors="replace")
                while True:
                    m = _PROGRAM.search(buf)
                    if m is None:
                        break
                    self.controller.load_script(m.group(0), m.group(1))
                    buf = buf[m.end() :]
