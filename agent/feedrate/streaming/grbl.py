"""Streaming G-code to a CNC controller over a serial line: GRBL character counting.

GRBL character counting (gnea/grbl doc/markdown/interface.md, doc/script/stream.py, serial.c).
GRBL 1.1 keeps the bytes it has received but not yet read into its line buffer in a 128-byte
receive ring (serial.c: RX_RING_BUFFER = RX_BUFFER_SIZE + 1 slots, so all 128 bytes are usable;
GRBL 0.9's ring held 127). The parser takes a line out of that ring, parses it, and for a motion
waits until the 15-block planner queue has room; only then does it answer `ok` (or `error:N`
for a bad line). The documented rule for the sender: the sum of the lengths, '\n' included, of
the lines sent and not yet acknowledged must never exceed the receive buffer size. So we keep
those lengths in a FIFO, send the next line only when sum + its length <= rx_buffer_bytes (128;
gnea's stream.py stops at sum >= 127, two bytes of extra margin), and pair each `ok` /
`error:N` with the oldest line, so every line sent is acknowledged exactly once. Real-time
commands ('?', '!', '~', 0x18) are taken out of the byte stream by GRBL's receive interrupt:
they never occupy the buffer and are never acknowledged, so they are sent at any time outside
the accounting; '?' is answered by a `<...>` status report. `ALARM:N` is fatal. With
max_lines_in_flight=1 the same code is the plain send-and-wait-for-`ok` protocol (gnea's
simple_stream.py), the baseline.

Before the first line the streamer asks '?' (after the handshake) and refuses unless the
controller reports Idle (`start_states`): an Alarm, an open door, a hold, a jog, a running
motion or check mode each stop it with StreamError kind "not_ready" naming the state.

DNC drip feed (XON/XOFF, no answers) is agent.feedrate.streaming.dnc; what both share (errors,
records, hold/resume control) is agent.feedrate.streaming.session.

The protocol's vocabulary (error and alarm codes, status reports, what a sendable line is) is
agent.feedrate.streaming.grbl_protocol; the byte channels (serial device, pty, pipe) are
agent.feedrate.streaming.serial_channel.

The program's first sendable line is read before the handshake: an empty or comment-only
program is refused (kind "empty") without a byte sent, and a refused first line never touches
the controller.

Any failure stops the stream cleanly: no further line is sent and StreamError says which line
and why. Where lines were sent (error:N, stall, protocol, refused line, a filter error found past
the lookahead, and the signals: Ctrl-C, SIGTERM, SIGHUP) the machine is left with nothing to
run: feed hold, standstill, soft reset (agent.feedrate.streaming.stop), since GRBL keeps its
planner and receive buffer through a hold and cycle start would run them. A StreamControl lets
another thread or a signal handler hold ('!') and resume ('~') the running stream.
Lost ports (EIO, end of file) end it the same way, without the stop (nothing can be sent).
A stall is no progress for stall_timeout_s while an answer is owed: no line acknowledged and
the machine not moving ('?' replies in Run at one position are not progress, nor Idle with
lines unanswered: GRBL has stopped reading them). A G4 dwell owed adds its time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from agent.feedrate.streaming.dnc import DncOptions, stream_dnc
from agent.feedrate.streaming.grbl_protocol import (
    GRBL_BANNER_PREFIX,
    GRBL_ERRORS,
    not_ready_reason,
    parse_status,
    reply_code,
)
from agent.feedrate.streaming.serial_channel import Channel, ChannelLost, open_serial
from agent.feedrate.streaming.session import (
    HOLD_ON,
    ProgressFn,
    Session,
    StreamControl,
    StreamError,
    StreamInterrupt,
    StreamResult,
)
from agent.feedrate.streaming.stop import stop_grbl


@dataclass(frozen=True)
class GrblOptions:
    rx_buffer_bytes: int = 128  # GRBL 1.1 RX_BUFFER_SIZE; 127 for GRBL 0.9
    max_line_chars: int = 79  # GRBL LINE_BUFFER_SIZE 80 with its terminator
    max_lines_in_flight: int | None = None  # 1: send one line, wait for its answer
    compact: bool = True  # drop comments and spaces (GRBL ignores both; they cost buffer)
    handshake: Literal["reset", "banner", "none"] = "reset"  # reset: send 0x18, await banner
    startup_timeout_s: float = 5.0
    # States in which the first line may go (the '?' after the handshake); None: do not ask,
    # for a scripted controller that speaks no status reports (tests), never for a machine.
    start_states: tuple[str, ...] | None = ("Idle",)
    status_timeout_s: float = 1.0  # the status report after that '?'
    status_interval_s: float | None = 0.2  # '?' polls; None: none
    stall_timeout_s: float = 10.0  # no progress (acknowledgement, motion) while one is owed
    write_timeout_s: float = 5.0
    stop_on_error: bool = True
    hold_on_abort: bool = True  # send '!' when stopping on an error, a stall or a signal
    reset_on_abort: bool = True  # then, once the machine stands, 0x18: nothing left to run
    hold_timeout_s: float = 5.0  # the longest wait for standstill after that '!'
    wait_idle: bool = False  # after the last answer, poll '?' until the machine is Idle
    progress_interval_s: float = 0.1

    def __post_init__(self) -> None:
        if self.max_line_chars + 1 > self.rx_buffer_bytes:
            raise ValueError(
                f"GrblOptions: a line of max_line_chars={self.max_line_chars} "
                f"must fit the {self.rx_buffer_bytes}-byte receive buffer"
            )
        if self.max_lines_in_flight is not None and self.max_lines_in_flight < 1:
            raise ValueError("GrblOptions.max_lines_in_flight: expected >= 1 or None")
        if self.start_states is not None and not self.start_states:
            raise ValueError("GrblOptions.start_states: expected at least one state, or None")


# ------------------------------------------------------------------------------ GRBL


class _Grbl(Session):
    def __init__(
        self,
        channel: Channel,
        opt: GrblOptions,
        progress: ProgressFn | None,
        reversals: Callable[[], int] | None,
        source: str | None,
        control: StreamControl | None,
    ) -> None:
        super().__init__(channel, progress, reversals, source, opt.progress_interval_s, control)
        self.opt = opt
        self.protocol = "send-response" if opt.max_lines_in_flight == 1 else "grbl"
        self.errors: list[tuple[int, int]] = []
        self.heard: list[str] = []  # the controller's messages before the first line

    def fits(self, nbytes: int) -> bool:
        limit = self.opt.max_lines_in_flight
        if limit is not None and len(self.pending) >= limit:
            return False
        return self.in_flight + nbytes <= self.opt.rx_buffer_bytes

    def send_batch(self, batch: bytearray) -> None:
        if batch:
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.bytes_sent += len(batch)
            self.write(bytes(batch), self.opt.write_timeout_s)

    def handshake(self) -> None:
        mode = self.opt.handshake
        if mode == "none":
            return
        if mode == "reset":
            self.channel.discard_input()
            self.write(b"\x18", self.opt.write_timeout_s)
        deadline = time.monotonic() + self.opt.startup_timeout_s
        while (left := deadline - time.monotonic()) > 0:
            for line in self.read(left):
                if self.banner is None and line.startswith(GRBL_BANNER_PREFIX):
                    self.banner = line
                elif line:  # ALARM:3 of a reset mid-motion, [MSG:'$H'|'$X' to unlock] after
                    self.heard.append(line)
            if self.banner is not None:
                return
        raise self.fail(
            f"no GRBL banner ({GRBL_BANNER_PREFIX!r}...) within "
            f"{self.opt.startup_timeout_s:g} s of {mode}",
            "handshake",
        )

    def check_ready(self) -> None:
        """Ask '?' and refuse unless the controller is in one of `start_states` (Idle)."""
        allowed, timeout_s = self.opt.start_states, self.opt.status_timeout_s
        if allowed is None:
            return
        self.write(b"?", self.opt.write_timeout_s)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            for line in self.read(left):
                if not line.startswith("<"):
                    if line:
                        self.heard.append(line)  # [MSG:'$H'|'$X' to unlock] names the cause
                    continue
                try:
                    report = parse_status(line)
                except ValueError:
                    continue  # garbled in transit: the deadline decides
                self.status = report
                if report.state in allowed:
                    return
                raise self.fail(not_ready_reason(report, self.heard), "not_ready")
        raise self.fail(
            f"no status report within {timeout_s:g} s of '?': cannot tell whether "
            "the machine is ready (is it a GRBL 1.1 controller?). Refusing to "
            "stream; nothing was sent",
            "not_ready",
        )

    def answer(self, line: str) -> None:
        if line == "ok" or line.startswith("error:"):
            if not self.pending:
                raise self.fail(
                    f"{line!r} with no line awaiting an answer (another sender on "
                    "the port, or a line the controller split)",
                    "protocol",
                )
            line_no, text, nbytes = self.pending.popleft()
            self.in_flight -= nbytes
            self.acked += 1
            if line != "ok":
                code = reply_code(line) or 0
                if self.opt.stop_on_error:
                    raise self.fail(
                        f"{line} {GRBL_ERRORS.get(code, 'unknown error')}",
                        "error",
                        code,
                        line=(line_no, text),
                    )
                self.errors.append((line_no, code))
        else:
            self.common(line)

    def stop_note(self) -> str:
        """Leave the controller with nothing to run; what was done, for the error message."""
        if not self.opt.hold_on_abort:
            return "no feed hold sent (hold_on_abort off)"
        if not self.opt.reset_on_abort:
            return self.hold_note()
        return stop_grbl(
            self,
            self.opt.hold_timeout_s,
            min(self.opt.status_interval_s or 0.05, 0.05),
            self.opt.startup_timeout_s,
        )

    def run(self, lines: Iterable[str]) -> StreamResult:
        try:
            source = self.lines(lines, self.opt.compact, self.opt.max_line_chars)
            first = next(source, None)  # before the handshake: a refused line touches nothing
            if first is None:
                raise self.fail(
                    "no G-code line to send (the program is empty or holds only comments "
                    "and blank lines); nothing was sent and the controller was not touched",
                    "empty",
                )
            self.handshake()
            self.check_ready()
            self.attach()  # a hold asked before this point goes out now, before any line
            self.t0 = time.monotonic()
            self.stream(first, source)
        except StreamError as exc:
            if exc.kind in HOLD_ON:
                raise exc.noting(self.stop_note()) from exc
            raise
        except (KeyboardInterrupt, SystemExit, StreamInterrupt) as exc:
            # Ctrl-C, SIGTERM, SIGHUP: the lines already in the controller's buffer and
            # planner must not run out, nor wait for a cycle start, with nobody streaming.
            raise self.interrupted(exc).noting(self.stop_note()) from None
        finally:
            self.detach()
        return self.result(self.errors)

    def stream(
        self, first: tuple[int, str, bytes], source: Iterator[tuple[int, str, bytes]]
    ) -> None:
        opt = self.opt
        nxt: tuple[int, str, bytes] | None = first
        poll = opt.status_interval_s
        next_poll = self.t0 + poll if poll else float("inf")
        quiet_since = self.t0  # the last progress while an answer is owed
        while True:
            batch = bytearray()
            # While a hold asked through the control is in force, nothing more is sent.
            while nxt is not None and not self.held and self.fits(len(nxt[2])):
                if not self.pending:
                    quiet_since = time.monotonic()  # an answer is owed from now on
                line_no, text, data = nxt
                self.pending.append((line_no, text, len(data)))
                self.in_flight += len(data)
                self.last_sent = (line_no, text)
                self.sent += 1
                batch += data
                try:
                    nxt = next(source, None)
                except StreamError:
                    self.send_batch(batch)  # the lines before a refused one still go
                    raise
            self.send_batch(batch)
            if nxt is None and not self.pending:
                break
            now = time.monotonic()
            if poll and now >= next_poll:
                self.write(b"?", opt.write_timeout_s)
                next_poll = now + poll
            # A dwell owed is quiet time the program asked for (GRBL reports Idle meanwhile).
            allowed_s = opt.stall_timeout_s + sum(_dwell_s(t) for _, t, _ in self.pending)
            wake = min(next_poll, quiet_since + allowed_s)
            answers = self.read(max(min(wake - now, 0.05) if self.held else wake - now, 0.0))
            now = time.monotonic()
            before, acked = self.status, self.acked
            for line in answers:
                self.answer(line)
            # Idle while lines wait for their answer is no progress: GRBL has stopped reading
            # them (a hold at the machine or a door is a person's pause, not a stall).
            idle = self.status is not None and self.status.state == "Idle"
            if self.held or self.acked != acked or (self.progressed(before) and not idle):
                quiet_since = now  # acknowledged, moving, held, or paused: no stall
            elif now - quiet_since >= allowed_s:
                seen = self.status
                where = (
                    f"; it reports {seen.state} at MPos {seen.machine_mm}"
                    if seen is not None
                    else ("" if poll else " (status polls off)")
                )
                if idle:
                    where += f" with {len(self.pending)} line(s) unanswered"
                raise self.fail(
                    f"controller stalled: no line acknowledged and no motion for "
                    f"{opt.stall_timeout_s:g} s{where}",
                    "stalled",
                )
            self.report(now)
        if opt.wait_idle:
            self.wait_idle(
                opt.status_interval_s or 0.05, opt.stall_timeout_s, opt.write_timeout_s, self.answer
            )


_G4 = re.compile(r"G0*4(?![0-9.])", re.IGNORECASE)
_P_WORD = re.compile(r"P([0-9]*\.?[0-9]+)", re.IGNORECASE)


def _dwell_s(line: str) -> float:
    """The dwell a G4 line asks for (GRBL's P is seconds); 0 for any other line."""
    if _G4.search(line) is None:
        return 0.0
    p = _P_WORD.search(line)
    return float(p.group(1)) if p is not None else 0.0


def stream_grbl(
    lines: Iterable[str],
    channel: Channel,
    options: GrblOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    reversals_modulated: Callable[[], int] | None = None,
    source: str | None = None,
    control: StreamControl | None = None,
) -> StreamResult:
    """Stream `lines` (source text, one per G-code line) to a GRBL controller on `channel`."""
    return _Grbl(
        channel, options or GrblOptions(), progress, reversals_modulated, source, control
    ).run(lines)


def stream_to_port(
    lines: Iterable[str],
    port: str,
    *,
    protocol: Literal["grbl", "dnc"] = "grbl",
    baudrate: int = 115_200,
    options: GrblOptions | DncOptions | None = None,
    progress: ProgressFn | None = None,
    reversals_modulated: Callable[[], int] | None = None,
    source: str | None = None,
    exclusive: bool = True,
    control: StreamControl | None = None,
) -> StreamResult:
    """Open `port` (device or pty path), stream with `protocol`, close the port whatever
    happens. `options` must match the protocol (GrblOptions or DncOptions). `exclusive` locks
    the port against other users while streaming; `control` holds and resumes it."""
    try:
        channel = open_serial(port, baudrate, exclusive=exclusive)
    except ChannelLost as exc:
        raise StreamError(None, None, str(exc), kind="disconnected") from exc
    kw: dict[str, Any] = {
        "progress": progress,
        "reversals_modulated": reversals_modulated,
        "source": source,
        "control": control,
    }
    try:
        if protocol == "grbl" and not isinstance(options, DncOptions):
            return stream_grbl(lines, channel, options, **kw)
        if protocol == "dnc" and not isinstance(options, GrblOptions):
            return stream_dnc(lines, channel, options, **kw)
        raise ValueError(f"stream_to_port: {type(options).__name__} for protocol {protocol!r}")
    finally:
        channel.close()
