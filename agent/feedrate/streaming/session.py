"""What both G-code streaming protocols share: the error, the progress and result records, the
hold/resume control, and the session that reads and writes the channel
(agent.feedrate.streaming.grbl: GRBL character counting; agent.feedrate.streaming.dnc: DNC
drip feed).

A stream that stops for any reason raises StreamError naming the program line, the text sent
and why; a signal that ends it (StreamInterrupt, raised by the CLI's handlers, or Ctrl-C's
KeyboardInterrupt) becomes a StreamError of kind "interrupted" with exit code 128 + signal. A
feed hold is a real-time command: the controller takes it out of the byte stream at
once, wherever it lands, so it is written the moment it is asked for (from a signal handler too)
and never waits for the streaming loop's next turn.

Over 400 lines on purpose: the records, the signal interrupt and the Session they describe are
read together by both protocols (grbl.py, dnc.py); apart they would send the reader between
files.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

from agent.errors import EX_DATAERR, EX_IOERR, EX_TEMPFAIL, AgentError
from agent.feedrate.streaming.grbl_protocol import (
    GRBL_ALARMS,
    GRBL_BANNER_PREFIX,
    XOFF,
    XON,
    StatusReport,
    line_problem,
    parse_status,
    prepare_line,
    reply_code,
)
from agent.feedrate.streaming.serial_channel import Channel, ChannelLost, ChannelTimeout

FailureKind = Literal[
    "error",
    "input",
    "interrupted",
    "empty",
    "alarm",
    "disconnected",
    "stalled",
    "protocol",
    "reset",
    "rejected",
    "handshake",
    "not_ready",
]
# Failures after which the machine may still run out what it holds: a feed hold stops it
# (and on GRBL a soft reset then empties its buffers). Alarm and reset: the controller has
# halted itself and dropped its buffers; disconnected: nothing can be sent.
HOLD_ON: frozenset[str] = frozenset(
    {"error", "stalled", "protocol", "rejected", "input", "interrupted"}
)

# The real-time codes by the names the messages use.
CODE_NAMES: dict[bytes, str] = {
    b"!": "feed hold (!)",
    b"~": "cycle start (~)",
    b"\x18": "soft reset (0x18)",
    b"?": "status query (?)",
}


def code_name(code: bytes, what: str = "") -> str:
    """`code` as a reader names it: "feed hold (!)", or `what` with the bytes shown."""
    if code in CODE_NAMES:
        return CODE_NAMES[code]
    shown = " ".join(chr(b) if 0x20 < b < 0x7F else f"0x{b:02x}" for b in code)
    return f"{what} ({shown})" if what else shown


class StreamInterrupt(BaseException):
    """A signal ends the stream (raised by the CLI's handlers). A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum, self.name = signum, name


class StreamError(AgentError):
    """The stream stopped: `line_no` (source line, None before the first), its text, and why."""

    exit_code = EX_IOERR

    def __init__(
        self,
        line_no: int | None,
        text: str | None,
        reason: str,
        *,
        kind: FailureKind,
        code: int | None = None,
        sent: int = 0,
        acked: int = 0,
        source: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        if line_no is not None:
            where = f"{source}:{line_no}" if source else f"line {line_no}"
        elif sent == 0:
            where = "before the first line"
        else:
            where = source or "the stream"
        shown = f" ({text!r})" if text is not None else ""
        super().__init__(
            f"{where}{shown}: {reason} [stream stopped after {sent} lines sent, "
            f"{acked} acknowledged]"
        )
        self.line_no, self.text, self.reason, self.kind = line_no, text, reason, kind
        self.code, self.sent, self.acked, self.source = code, sent, acked, source
        if kind in ("error", "rejected", "input", "empty"):
            self.exit_code = EX_DATAERR
        elif kind == "not_ready":
            self.exit_code = EX_TEMPFAIL
        if exit_code is not None:
            self.exit_code = exit_code

    def noting(self, note: str) -> StreamError:
        """The same failure with `note` added to its reason (what was done about it)."""
        return StreamError(
            self.line_no,
            self.text,
            f"{self.reason}; {note}",
            kind=self.kind,
            code=self.code,
            sent=self.sent,
            acked=self.acked,
            source=self.source,
            exit_code=self.exit_code,
        )


# ------------------------------------------------------------------------------ records


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
    held: bool = False  # a feed hold asked through StreamControl is in force


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
    holds: int = 0  # feed holds asked through StreamControl and sent
    held_at_end: bool = False  # the stream ended while such a hold was still in force

    @property
    def lines_per_s(self) -> float:
        return self.lines_sent / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "lines_per_s": self.lines_per_s}


# ------------------------------------------------------------------------------ control


class StreamControl:
    """Feed hold and resume asked from outside the streaming loop (the CLI's SIGUSR1/SIGUSR2
    handlers, a test). A request goes to the controller at once when a stream is attached;
    one made before that is sent as soon as the stream attaches (before its first line). While
    a hold is in force no further line is sent and the stall timer is stopped: the machine
    stands because someone asked it to. `resume` releases only a hold asked here: a machine
    held by its own feed-hold button or door is released at the machine, never from afar."""

    def __init__(self) -> None:
        self.held = False
        self._target: Callable[[bool], None] | None = None

    def hold(self) -> None:
        self.held = True
        if self._target is not None:
            self._target(True)

    def resume(self) -> None:
        if not self.held:
            return
        self.held = False
        if self._target is not None:
            self._target(False)

    def attach(self, target: Callable[[bool], None]) -> None:
        self._target = target
        if self.held:
            target(True)

    def detach(self) -> None:
        self._target = None


# ------------------------------------------------------------------------------ session


class Session:
    """State and I/O shared by both protocols; raises StreamError with the line context.

    `hold_code` / `resume_code` are the controller's real-time feed hold and cycle start
    (GRBL: '!' and '~'); None where the controller takes none."""

    protocol = "grbl"

    def __init__(
        self,
        channel: Channel,
        progress: ProgressFn | None,
        reversals: Callable[[], int] | None,
        source: str | None,
        interval_s: float,
        control: StreamControl | None = None,
        hold_code: bytes | None = b"!",
        resume_code: bytes | None = b"~",
    ) -> None:
        self.channel, self.progress, self.reversals, self.source = (
            channel,
            progress,
            reversals,
            source,
        )
        self.interval_s = interval_s
        self.control = control
        self.hold_code, self.resume_code = hold_code, resume_code
        self.pending: deque[tuple[int, str, int]] = deque()
        self.in_flight = self.max_in_flight = 0
        self.sent = self.acked = self.skipped = self.bytes_sent = self.xoffs = self.holds = 0
        self.last_sent: tuple[int, str] | None = None
        self.status: StatusReport | None = None
        self.banner: str | None = None
        self.paused = False
        self.rx = bytearray()
        self.t0 = self.last_report = time.monotonic()

    # -- hold and resume

    @property
    def held(self) -> bool:
        return self.control is not None and self.control.held

    def send_realtime(self, code: bytes | None) -> bool:
        """Write a real-time code now, whatever else is in progress; False when there is none
        or it could not be written (the loop finds a lost port on its own)."""
        if not code:
            return False
        try:
            self.channel.write(code, 0.5)
        except (ChannelLost, ChannelTimeout, OSError):
            return False
        return True

    def on_control(self, hold: bool) -> None:
        if hold:
            self.holds += self.send_realtime(self.hold_code)
        else:
            self.send_realtime(self.resume_code)

    def attach(self) -> None:
        if self.control is not None:
            self.control.attach(self.on_control)

    def detach(self) -> None:
        if self.control is not None:
            self.control.detach()

    def hold_note(self) -> str:
        """Send the feed hold on the way out of a failed stream; what was done, for the error."""
        if self.sent == 0:
            return "nothing was sent, so nothing was held"
        if self.hold_code and self.send_realtime(self.hold_code):
            return f"{code_name(self.hold_code, 'feed hold')} sent"
        if not self.hold_code:
            return (
                "no feed hold sent: the controller's settings give no hold code "
                "(dnc_feed_hold), so it runs out what it has buffered; stop it at the machine"
            )
        return "the feed hold could not be written: stop the machine at the controller"

    # -- I/O

    def interrupted(self, exc: BaseException) -> StreamError:
        """The StreamError for a signal (StreamInterrupt, KeyboardInterrupt) or SystemExit."""
        if isinstance(exc, StreamInterrupt):
            signum, name = exc.signum, exc.name
        elif isinstance(exc, KeyboardInterrupt):
            signum, name = 2, "SIGINT (Ctrl-C)"
        else:
            code = exc.code if isinstance(exc, SystemExit) else None
            signum = code - 128 if isinstance(code, int) and code > 128 else 15
            name = f"signal {signum}"
        return StreamError(
            None,
            None,
            f"stream ended by {name}",
            kind="interrupted",
            sent=self.sent,
            acked=self.acked,
            source=self.source,
            exit_code=128 + signum,
        )

    def fail(
        self,
        reason: str,
        kind: FailureKind,
        code: int | None = None,
        line: tuple[int, str] | None = None,
    ) -> StreamError:
        at = line or (self.pending[0][:2] if self.pending else self.last_sent)
        return StreamError(
            at[0] if at else None,
            at[1] if at else None,
            reason,
            kind=kind,
            code=code,
            sent=self.sent,
            acked=self.acked,
            source=self.source,
        )

    def lines(
        self, lines: Iterable[str], compact: bool, max_chars: int | None
    ) -> Iterator[tuple[int, str, bytes]]:
        for line_no, text in enumerate(self.guarded(lines), 1):
            line = prepare_line(text, compact)
            if not line:
                self.skipped += 1
                continue
            problem = line_problem(line, max_chars)
            if problem is not None:
                raise self.fail(problem, "rejected", line=(line_no, line))
            yield line_no, line, (line + "\n").encode("ascii")

    def guarded(self, lines: Iterable[str]) -> Iterator[str]:
        """`lines`, with a failure of their source (a filter error found past the lookahead, an
        unreadable file) turned into a StreamError, so the machine is stopped like on any other
        failure."""
        it = iter(lines)
        while True:
            try:
                text = next(it)
            except StopIteration:
                return
            except (StreamError, KeyboardInterrupt, SystemExit, StreamInterrupt):
                raise
            except Exception as exc:
                raise StreamError(
                    getattr(exc, "line_no", None),
                    getattr(exc, "text", None),
                    f"program refused mid-stream (past the lookahead): {exc}",
                    kind="input",
                    sent=self.sent,
                    acked=self.acked,
                    source=getattr(exc, "source", None) or self.source,
                ) from exc
            yield text

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
            raise self.fail(
                f"{line} {GRBL_ALARMS.get(code or -1, 'unknown alarm')}: the "
                "controller halted (this line was the oldest unanswered) and needs "
                "a reset",
                "alarm",
                code,
            )
        elif line.startswith(GRBL_BANNER_PREFIX):
            raise self.fail(
                f"the controller reset mid-stream ({line!r}): buffered lines lost", "reset"
            )
        else:
            return False
        return True

    def progressed(self, before: StatusReport | None) -> bool:
        """Whether the last status report shows progress since `before`: the machine moved,
        or it is in a state that does not run (a hold at the machine, a door, Idle). A
        controller that keeps answering '?' in Run at one position is not progressing."""
        now = self.status
        if now is None or now is before:
            return False
        if now.state != "Run":
            return True
        return before is None or before.machine_mm != now.machine_mm

    def wait_idle(
        self, interval_s: float, stall_s: float, write_s: float, handle: Callable[[str], object]
    ) -> None:
        """Poll '?' until the controller reports Idle: the machine has run the program out.
        The stall timer counts progress (position change), not replies."""
        self.status, moved = None, time.monotonic()
        while self.status is None or self.status.state != "Idle":
            if not self.paused:
                self.write(b"?", write_s)
            before = self.status
            answers = self.read(interval_s)
            for line in answers:
                handle(line)
            now = time.monotonic()
            if self.held or self.progressed(before):
                moved = now  # held on request, or moving: not a stall
            elif now - moved > stall_s:
                state = self.status.state if self.status else "no status report"
                raise self.fail(
                    f"controller stalled: no progress for {stall_s:g} s while waiting for "
                    f"Idle ({state})",
                    "stalled",
                )
            self.report(now)

    def report(self, now: float, force: bool = False) -> None:
        if self.progress is None or (not force and now - self.last_report < self.interval_s):
            return
        self.last_report = now
        self.progress(
            StreamProgress(
                self.protocol,
                self.sent,
                self.acked,
                self.in_flight,
                now - self.t0,
                self.status,
                self.reversals() if self.reversals is not None else None,
                self.paused,
                self.held,
            )
        )

    def result(self, errors: Iterable[tuple[int, int]] = ()) -> StreamResult:
        now = time.monotonic()
        self.report(now, force=True)
        return StreamResult(
            self.protocol,
            self.sent,
            self.acked,
            self.skipped,
            self.bytes_sent,
            now - self.t0,
            self.max_in_flight,
            tuple(errors),
            self.status,
            self.banner,
            self.xoffs,
            self.holds,
            self.held,
        )
