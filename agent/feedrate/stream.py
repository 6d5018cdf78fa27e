"""Streaming G-code to a CNC controller over a serial line (issue 3, part 5).

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

DNC drip feed with XON/XOFF software flow control: no acknowledgements; the controller sends
XOFF (0x13) when its buffer is high and XON (0x11) once it has drained. The sender writes in
small chunks at no more than the serial line's byte rate and looks for XOFF before each chunk,
so that at most one chunk follows an XOFF (a UART's pacing; a pty transfers instantly).

The protocol's vocabulary (error and alarm codes, status reports, what a sendable line is) is
agent.feedrate.grbl_protocol; the byte channels (serial device, pty, pipe) are
agent.feedrate.serial_channel.

Any failure stops the stream cleanly: no further line is sent, a feed hold ('!') stops the
machine where that is safe and useful (error, stall), and StreamError says which line and why.
Lost ports (EIO, end of file) and stalls (no byte from the controller within stall_timeout_s
while it owes an answer; '?' polls keep a busy controller audibly alive) end it the same way.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

from agent.errors import EX_DATAERR, EX_IOERR, AgentError
from agent.feedrate.grbl_protocol import (
    GRBL_ALARMS,
    GRBL_BANNER_PREFIX,
    GRBL_ERRORS,
    XOFF,
    XON,
    StatusReport,
    line_problem,
    parse_status,
    prepare_line,
    reply_code,
)
from agent.feedrate.serial_channel import Channel, ChannelLost, ChannelTimeout, open_serial

FailureKind = Literal["error", "alarm", "disconnected", "stalled", "protocol", "reset",
                      "rejected", "handshake"]


class StreamError(AgentError):
    """The stream stopped: `line_no` (source line, None before the first), its text, and why."""

    exit_code = EX_IOERR

    def __init__(self, line_no: int | None, text: str | None, reason: str, *,
                 kind: FailureKind, code: int | None = None, sent: int = 0, acked: int = 0,
                 source: str | None = None) -> None:
        where = "before the first line" if line_no is None else (
            f"{source}:{line_no}" if source else f"line {line_no}")
        shown = f" ({text!r})" if text is not None else ""
        super().__init__(f"{where}{shown}: {reason} [stream stopped after {sent} lines sent, "
                         f"{acked} acknowledged]")
        self.line_no, self.text, self.reason, self.kind = line_no, text, reason, kind
        self.code, self.sent, self.acked = code, sent, acked
        if kind in ("error", "rejected"):
            self.exit_code = EX_DATAERR


# ------------------------------------------------------------------------------ progress

@dataclass(frozen=True)
class StreamProgress:
    protocol: str
    lines_sent: int
    lines_acked: int
    bytes_in_flight: int
    elapsed_s: float
    status: StatusReport | None
    reversals_modulated: int | None
    paused: bool = False  # DNC: the controller has sent XOFF


ProgressFn = Callable[[StreamProgress], None]


@dataclass(frozen=True)
class StreamResult:
    protocol: str
    lines_sent: int
    lines_acked: int  # DNC: lines fully written (there are no acknowledgements)
    lines_skipped: int  # blank or comment-only lines, not sent
    bytes_sent: int
    elapsed_s: float
    max_bytes_in_flight: int
    errors: tuple[tuple[int, int], ...]  # (line, GRBL error code) when stop_on_error=False
    status: StatusReport | None
    banner: str | None
    xoff_count: int = 0

    @property
    def lines_per_s(self) -> float:
        return self.lines_sent / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "lines_per_s": self.lines_per_s}


# ------------------------------------------------------------------------------ options


@dataclass(frozen=True)
class GrblOptions:
    rx_buffer_bytes: int = 128  # GRBL 1.1 RX_BUFFER_SIZE; 127 for GRBL 0.9
    max_line_chars: int = 79  # GRBL LINE_BUFFER_SIZE 80 with its terminator
    max_lines_in_flight: int | None = None  # 1: send one line, wait for its answer
    compact: bool = True  # drop comments and spaces (GRBL ignores both; they cost buffer)
    handshake: Literal["reset", "banner", "none"] = "reset"  # reset: send 0x18, await banner
    startup_timeout_s: float = 5.0
    status_interval_s: float | None = 0.2  # '?' polls; None: none
    stall_timeout_s: float = 10.0  # silence while an answer is owed
    write_timeout_s: float = 5.0
    stop_on_error: bool = True
    hold_on_abort: bool = True  # send '!' when stopping on an error or a stall
    wait_idle: bool = False  # after the last answer, poll '?' until the machine is Idle
    progress_interval_s: float = 0.1

    def __post_init__(self) -> None:
        if self.max_line_chars + 1 > self.rx_buffer_bytes:
            raise ValueError(f"GrblOptions: a line of max_line_chars={self.max_line_chars} "
                             f"must fit the {self.rx_buffer_bytes}-byte receive buffer")
        if self.max_lines_in_flight is not None and self.max_lines_in_flight < 1:
            raise ValueError("GrblOptions.max_lines_in_flight: expected >= 1 or None")


@dataclass(frozen=True)
class DncOptions:
    chunk_bytes: int = 16  # bytes written between looks for XOFF
    line_rate_bytes_s: float | None = 11_520.0  # 115200 baud 8N1; None: unpaced
    compact: bool = True
    max_line_chars: int | None = None
    stall_timeout_s: float = 30.0  # XOFF held this long without a byte: stalled
    write_timeout_s: float = 5.0
    wait_idle: bool = False  # after the last byte, poll '?' until the controller is Idle
    status_interval_s: float = 0.05
    progress_interval_s: float = 0.1



# ------------------------------------------------------------------------------ session


class _Session:
    """State and I/O shared by both protocols; raises StreamError with the line context."""

    protocol = "grbl"

    def __init__(self, channel: Channel, progress: ProgressFn | None,
                 reversals: Callable[[], int] | None, source: str | None,
                 interval_s: float) -> None:
        self.channel, self.progress, self.reversals, self.source = channel, progress, reversals, \
            source
        self.interval_s = interval_s
        self.pending: deque[tuple[int, str, int]] = deque()
        self.in_flight = self.max_in_flight = 0
        self.sent = self.acked = self.skipped = self.bytes_sent = self.xoffs = 0
        self.last_sent: tuple[int, str] | None = None
        self.status: StatusReport | None = None
        self.banner: str | None = None
        self.paused = False
        self.rx = bytearray()
        self.t0 = self.last_report = time.monotonic()

    def fail(self, reason: str, kind: FailureKind, code: int | None = None,
             line: tuple[int, str] | None = None) -> StreamError:
        at = line or (self.pending[0][:2] if self.pending else self.last_sent)
        return StreamError(at[0] if at else None, at[1] if at else None, reason, kind=kind,
                           code=code, sent=self.sent, acked=self.acked, source=self.source)

    def lines(self, lines: Iterable[str], compact: bool,
              max_chars: int | None) -> Iterator[tuple[int, str, bytes]]:
        for line_no, text in enumerate(lines, 1):
            line = prepare_line(text, compact)
            if not line:
                self.skipped += 1
                continue
            problem = line_problem(line, max_chars)
            if problem is not None:
                raise self.fail(problem, "rejected", line=(line_no, line))
            yield line_no, line, (line + "\n").encode("ascii")

    def write(self, data: bytes, timeout_s: float) -> None:
        try:
            self.channel.write(data, timeout_s)
        except ChannelLost as exc:
            raise self.fail(f"port {self.channel.name} vanished: {exc}", "disconnected") from exc
        except ChannelTimeout as exc:
            raise self.fail(f"controller stalled: {exc}", "stalled") from exc

    def read(self, timeout_s: float) -> list[str]:
        """Complete response lines received within timeout_s; XON/XOFF bytes set `paused`."""
        try:
            data = self.channel.read(timeout_s)
        except ChannelLost as exc:
            raise self.fail(f"port {self.channel.name} vanished: {exc}", "disconnected") from exc
        if not data:
            return []
        if XON in data or XOFF in data:
            for byte in data:
                if byte in (XON, XOFF):
                    self.paused = byte == XOFF
                    self.xoffs += byte == XOFF
            data = data.replace(bytes([XON]), b"").replace(bytes([XOFF]), b"")
        self.rx += data
        *done, rest = self.rx.split(b"\n")
        self.rx = bytearray(rest)
        out = [raw.decode("ascii", "replace").strip() for raw in done]
        return [s for s in out if s] or [""]  # [""]: bytes came, no complete line yet

    def common(self, line: str) -> bool:
        """Handle what both protocols treat alike; False when the line is not one of those."""
        if line.startswith("<"):
            with contextlib.suppress(ValueError):
                self.status = parse_status(line)
        elif line.startswith("ALARM:"):
            code = reply_code(line)
            raise self.fail(f"{line} {GRBL_ALARMS.get(code or -1, 'unknown alarm')}: the "
                            "controller halted (this line was the oldest unanswered) and needs "
                            "a reset", "alarm", code)
        elif line.startswith(GRBL_BANNER_PREFIX):
            raise self.fail(f"the controller reset mid-stream ({line!r}): buffered lines lost",
                            "reset")
        else:
            return False
        return True

    def wait_idle(self, interval_s: float, stall_s: float, write_s: float,
                  handle: Callable[[str], object]) -> None:
        """Poll '?' until the controller reports Idle: the machine has run the program out."""
        self.status, quiet = None, time.monotonic()
        while self.status is None or self.status.state != "Idle":
            if not self.paused:
                self.write(b"?", write_s)
            answers = self.read(interval_s)
            now = time.monotonic()
            if answers:
                quiet = now
                for line in answers:
                    handle(line)
            elif now - quiet > stall_s:
                raise self.fail(f"controller stalled: no status report for {stall_s:g} s while "
                                "waiting for Idle", "stalled")
            self.report(now)

    def report(self, now: float, force: bool = False) -> None:
        if self.progress is None or (not force and now - self.last_report < self.interval_s):
            return
        self.last_report = now
        self.progress(StreamProgress(
            self.protocol, self.sent, self.acked, self.in_flight, now - self.t0, self.status,
            self.reversals() if self.reversals is not None else None, self.paused))

    def result(self, errors: Iterable[tuple[int, int]] = ()) -> StreamResult:
        now = time.monotonic()
        self.report(now, force=True)
        return StreamResult(self.protocol, self.sent, self.acked, self.skipped, self.bytes_sent,
                            now - self.t0, self.max_in_flight, tuple(errors), self.status,
                            self.banner, self.xoffs)


# ------------------------------------------------------------------------------ GRBL


class _Grbl(_Session):
    def __init__(self, channel: Channel, opt: GrblOptions, progress: ProgressFn | None,
                 reversals: Callable[[], int] | None, source: str | None) -> None:
        super().__init__(channel, progress, reversals, source, opt.progress_interval_s)
        self.opt = opt
        self.protocol = "send-response" if opt.max_lines_in_flight == 1 else "grbl"
        self.errors: list[tuple[int, int]] = []

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
                if line.startswith(GRBL_BANNER_PREFIX):
                    self.banner = line
                    return
        raise self.fail(f"no GRBL banner ({GRBL_BANNER_PREFIX!r}...) within "
                        f"{self.opt.startup_timeout_s:g} s of {mode}", "handshake")

    def answer(self, line: str) -> None:
        if line == "ok" or line.startswith("error:"):
            if not self.pending:
                raise self.fail(f"{line!r} with no line awaiting an answer (another sender on "
                                "the port, or a line the controller split)", "protocol")
            line_no, text, nbytes = self.pending.popleft()
            self.in_flight -= nbytes
            self.acked += 1
            if line != "ok":
                code = reply_code(line) or 0
                if self.opt.stop_on_error:
                    raise self.fail(f"{line} {GRBL_ERRORS.get(code, 'unknown error')}",
                                    "error", code, line=(line_no, text))
                self.errors.append((line_no, code))
        else:
            self.common(line)

    def run(self, lines: Iterable[str]) -> StreamResult:
        opt = self.opt
        try:
            self.handshake()
            self.t0 = time.monotonic()
            source = self.lines(lines, opt.compact, opt.max_line_chars)
            nxt = next(source, None)
            poll = opt.status_interval_s
            next_poll = self.t0 + poll if poll else float("inf")
            quiet_since = self.t0
            while True:
                batch = bytearray()
                while nxt is not None and self.fits(len(nxt[2])):
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
                answers = self.read(min(next_poll, quiet_since + opt.stall_timeout_s) - now)
                now = time.monotonic()
                if answers:
                    quiet_since = now
                    for line in answers:
                        self.answer(line)
                elif now - quiet_since >= opt.stall_timeout_s:
                    raise self.fail(f"controller stalled: no answer for {opt.stall_timeout_s:g}"
                                    " s" + ("" if poll else " (status polls off)"), "stalled")
                self.report(now)
        except StreamError as exc:
            if opt.hold_on_abort and exc.kind in ("error", "stalled", "protocol", "rejected"):
                with contextlib.suppress(ChannelLost, ChannelTimeout, OSError):
                    self.channel.write(b"!", 0.5)
            raise
        except (KeyboardInterrupt, SystemExit):
            # Ctrl-C, or SIGTERM turned into SystemExit by the CLI: the lines already in the
            # controller's buffer and planner must not run out with nobody streaming.
            if opt.hold_on_abort:
                with contextlib.suppress(ChannelLost, ChannelTimeout, OSError):
                    self.channel.write(b"!", 0.5)
            raise
        if opt.wait_idle:
            self.wait_idle(opt.status_interval_s or 0.05, opt.stall_timeout_s,
                           opt.write_timeout_s, self.answer)
        return self.result(self.errors)


def stream_grbl(lines: Iterable[str], channel: Channel, options: GrblOptions | None = None, *,
                progress: ProgressFn | None = None,
                reversals_modulated: Callable[[], int] | None = None,
                source: str | None = None) -> StreamResult:
    """Stream `lines` (source text, one per G-code line) to a GRBL controller on `channel`."""
    return _Grbl(channel, options or GrblOptions(), progress, reversals_modulated,
                 source).run(lines)


# ------------------------------------------------------------------------------ DNC


class _Dnc(_Session):
    protocol = "dnc"

    def __init__(self, channel: Channel, opt: DncOptions, progress: ProgressFn | None,
                 reversals: Callable[[], int] | None, source: str | None) -> None:
        super().__init__(channel, progress, reversals, source, opt.progress_interval_s)
        self.opt = opt
        self.quiet_since = self.next_write = time.monotonic()

    def take(self, timeout_s: float) -> None:
        """Read for up to timeout_s; a DNC controller speaks only to complain (or report)."""
        lines = self.read(timeout_s)
        if lines:
            self.quiet_since = time.monotonic()
        for line in lines:
            self.take_line(line)

    def take_line(self, line: str) -> None:
        if line.startswith("error:"):
            code = reply_code(line) or 0
            raise self.fail(f"{line} {GRBL_ERRORS.get(code, 'unknown error')} reported at or "
                            "before this line (DNC has no per-line answers)", "error", code)
        self.common(line)

    def send(self, data: bytes) -> None:
        opt, pace = self.opt, self.opt.line_rate_bytes_s
        for i in range(0, len(data), opt.chunk_bytes):
            chunk = data[i:i + opt.chunk_bytes]
            while True:  # listen until the line is free and the controller not paused
                self.take(0.0)
                now = time.monotonic()
                if self.paused:
                    if now - self.quiet_since > opt.stall_timeout_s:
                        raise self.fail(f"controller stalled: XOFF held {opt.stall_timeout_s:g} s"
                                        " with no byte from it", "stalled")
                    self.take(0.05)
                    self.report(now)
                elif now < self.next_write:
                    self.take(self.next_write - now)
                else:
                    break
            self.quiet_since = now
            self.write(chunk, opt.write_timeout_s)
            self.bytes_sent += len(chunk)
            if pace:  # the wire's time for the chunk
                self.next_write = max(now, self.next_write) + len(chunk) / pace

    def run(self, lines: Iterable[str]) -> StreamResult:
        opt = self.opt
        self.t0 = time.monotonic()
        for line_no, text, data in self.lines(lines, opt.compact, opt.max_line_chars):
            self.last_sent = (line_no, text)
            self.sent += 1
            self.send(data)
            self.acked += 1
            self.report(time.monotonic())
        if opt.wait_idle:
            self.wait_idle(opt.status_interval_s, opt.stall_timeout_s, opt.write_timeout_s,
                           self.take_line)
        return self.result()


def stream_dnc(lines: Iterable[str], channel: Channel, options: DncOptions | None = None, *,
               progress: ProgressFn | None = None,
               reversals_modulated: Callable[[], int] | None = None,
               source: str | None = None) -> StreamResult:
    """Drip-feed `lines` to a controller with XON/XOFF flow control."""
    return _Dnc(channel, options or DncOptions(), progress, reversals_modulated,
                source).run(lines)


def stream_to_port(lines: Iterable[str], port: str, *, protocol: Literal["grbl", "dnc"] = "grbl",
                   baudrate: int = 115_200, options: GrblOptions | DncOptions | None = None,
                   progress: ProgressFn | None = None,
                   reversals_modulated: Callable[[], int] | None = None,
                   source: str | None = None, exclusive: bool = True) -> StreamResult:
    """Open `port` (device or pty path), stream with `protocol`, close the port whatever
    happens. `options` must match the protocol (GrblOptions or DncOptions). `exclusive` locks
    the port against other users while streaming."""
    try:
        channel = open_serial(port, baudrate, exclusive=exclusive)
    except ChannelLost as exc:
        raise StreamError(None, None, str(exc), kind="disconnected") from exc
    kw: dict[str, Any] = {"progress": progress, "reversals_modulated": reversals_modulated,
                          "source": source}
    try:
        if protocol == "grbl" and not isinstance(options, DncOptions):
            return stream_grbl(lines, channel, options, **kw)
        if protocol == "dnc" and not isinstance(options, GrblOptions):
            return stream_dnc(lines, channel, options, **kw)
        raise ValueError(f"stream_to_port: {type(options).__name__} for protocol {protocol!r}")
    finally:
        channel.close()
