"""DNC drip feed with XON/XOFF software flow control (see agent.feedrate.streaming.grbl for GRBL).

No acknowledgements: the controller sends XOFF (0x13) when its buffer is high and XON (0x11)
once it has drained. The sender writes in small chunks at no more than the serial line's byte
rate and looks for XOFF before each chunk, so that at most one chunk follows an XOFF (a UART's
pacing; a pty transfers instantly).

A DNC controller answers no status query, so nothing here can tell whether the machine is ready
before the first byte: `jha feedrate stream` asks the operator to confirm it
(drivers/grbl/driver.py, docs/feedrate.md). On an `error:`, a stall (XOFF held too long) or a
refused line the stream stops and, when the controller has one, its feed-hold code (`hold_code`, a
real-time code the controller takes out of the byte stream, e.g. GRBL's '!') is sent, then, once
'?' shows standstill (or after `hold_timeout_s`), its reset code (`reset_code`, GRBL's 0x18), so
that nothing queued is left for a cycle start; many DNC controls have neither, and then the
error says so: the machine runs out what it has buffered.
After the last byte the stream listens `end_listen_s` (2 s) for a late error from the lines the
controller still holds, or, with `wait_idle`, asks '?' until the controller is Idle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agent.feedrate.streaming.grbl_protocol import GRBL_ERRORS, reply_code
from agent.feedrate.streaming.serial_channel import Channel
from agent.feedrate.streaming.session import (
    HOLD_ON,
    ProgressFn,
    Session,
    StreamControl,
    StreamError,
    StreamInterrupt,
    StreamResult,
)
from agent.feedrate.streaming.stop import hold_then_reset


@dataclass(frozen=True)
class DncOptions:
    chunk_bytes: int = 16  # bytes written between looks for XOFF
    line_rate_bytes_s: float | None = 11_520.0  # 115200 baud 8N1; None: unpaced
    compact: bool = True
    max_line_chars: int | None = None
    stall_timeout_s: float = 30.0  # XOFF held this long without a byte: stalled
    write_timeout_s: float = 5.0
    wait_idle: bool = False  # after the last byte, poll '?' until the controller is Idle
    # Without wait_idle: after the last byte, listen this long for a late complaint. The
    # controller parses what it buffered after the sender is done, so an error in the last
    # lines comes after them; a stream that returned at once would call that program done.
    end_listen_s: float = 2.0
    status_interval_s: float = 0.05
    progress_interval_s: float = 0.1
    hold_code: bytes | None = None  # the controller's real-time feed hold; None: it has none
    resume_code: bytes | None = None  # its cycle start after a hold; None: none
    # Its reset after a hold (GRBL with XON/XOFF: 0x18), so that nothing stays queued that a
    # cycle start would run; None: it takes none from the line.
    reset_code: bytes | None = None
    hold_timeout_s: float = 5.0  # hold to standstill (asked with '?') before the reset
    reset_timeout_s: float = 2.0  # listening for the controller's restart after it

    def __post_init__(self) -> None:
        for name in ("hold_code", "resume_code", "reset_code"):
            code = getattr(self, name)
            if code is not None and (not code or any(b in code for b in b"\x11\x13\n")):
                raise ValueError(
                    f"DncOptions.{name}: expected a non-empty code without XON, "
                    f"XOFF or newline, found {code!r}"
                )


class _Dnc(Session):
    protocol = "dnc"

    def __init__(
        self,
        channel: Channel,
        opt: DncOptions,
        progress: ProgressFn | None,
        reversals: Callable[[], int] | None,
        source: str | None,
        control: StreamControl | None,
    ) -> None:
        super().__init__(
            channel,
            progress,
            reversals,
            source,
            opt.progress_interval_s,
            control,
            opt.hold_code,
            opt.resume_code,
        )
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
            raise self.fail(
                f"{line} {GRBL_ERRORS.get(code, 'unknown error')} reported at or "
                "before this line (DNC has no per-line answers)",
                "error",
                code,
            )
        self.common(line)

    def send(self, data: bytes) -> None:
        opt, pace = self.opt, self.opt.line_rate_bytes_s
        for i in range(0, len(data), opt.chunk_bytes):
            chunk = data[i : i + opt.chunk_bytes]
            while True:  # listen until the line is free, the controller not paused, no hold
                self.take(0.0)
                now = time.monotonic()
                if self.held:
                    # Held on request: send nothing more (a control without a hold code then
                    # runs out its buffer and waits for data); silence is expected meanwhile.
                    self.quiet_since = now
                    self.take(0.05)
                    self.report(now)
                elif self.paused:
                    if now - self.quiet_since > opt.stall_timeout_s:
                        raise self.fail(
                            f"controller stalled: XOFF held {opt.stall_timeout_s:g} s"
                            " with no byte from it",
                            "stalled",
                        )
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

    def stop_note(self) -> str:
        """The controller's hold, and its reset where it has one; what was done, for the error."""
        opt = self.opt
        if opt.hold_code is None or opt.reset_code is None:
            return self.hold_note()
        return hold_then_reset(
            self,
            opt.hold_code,
            opt.reset_code,
            opt.hold_timeout_s,
            min(opt.status_interval_s, 0.05),
            opt.reset_timeout_s,
            confirms_reset=False,
        )

    def run(self, lines: Iterable[str]) -> StreamResult:
        opt = self.opt
        self.t0 = time.monotonic()
        self.attach()
        try:
            for line_no, text, data in self.lines(lines, opt.compact, opt.max_line_chars):
                self.last_sent = (line_no, text)
                self.sent += 1
                self.send(data)
                self.acked += 1
                self.report(time.monotonic())
            if opt.wait_idle:
                self.wait_idle(
                    opt.status_interval_s, opt.stall_timeout_s, opt.write_timeout_s, self.take_line
                )
            else:
                end = time.monotonic() + opt.end_listen_s
                while (left := end - time.monotonic()) > 0.0:
                    self.take(min(left, 0.05))
                    self.report(time.monotonic())
        except StreamError as exc:
            if exc.kind in HOLD_ON:
                raise exc.noting(self.stop_note()) from exc
            raise
        except (KeyboardInterrupt, SystemExit, StreamInterrupt) as exc:
            # Ctrl-C, SIGTERM, SIGHUP: the hold code where the control has one, then its reset
            # (without one, what it has buffered is cleared at the machine).
            raise self.interrupted(exc).noting(self.stop_note()) from None
        finally:
            self.detach()
        return self.result()


def stream_dnc(
    lines: Iterable[str],
    channel: Channel,
    options: DncOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    reversals_modulated: Callable[[], int] | None = None,
    source: str | None = None,
    control: StreamControl | None = None,
) -> StreamResult:
    """Drip-feed `lines` to a controller with XON/XOFF flow control."""
    return _Dnc(
        channel, options or DncOptions(), progress, reversals_modulated, source, control
    ).run(lines)
