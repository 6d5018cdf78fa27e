"""CNC controllers that take streamed G-code (`driver: grbl`): GRBL 1.1 or DNC drip feed.

The driver has one capability, TOOLPATH_STREAMING: the agent stands between the part program and
the controller and streams it (agent.feedrate.streaming.grbl, with the feedrate filter of Farouki
& Swett 2022 in front; `jha feedrate stream --config FILE --controller NAME`). It runs no test
cycles: a CNC's axes are not moved by the agent on its own account, so `run_cycle` refuses.

The Driver methods the daemon uses speak GRBL's real-time commands, which the controller takes
out of the byte stream at any time (they never occupy its receive buffer):
  read_status   '?' -> `<Idle|MPos:...|FS:...|Ov:100,100,100>`: Idle/Run/Hold/Jog/Alarm/Door/
                Check/Home/Sleep mapped to ControllerMode, the feed override from `Ov:`.
  stop_motion   '!' (feed hold: decelerate on the path, position kept), then, once the machine
                stands or hold_timeout_s has passed, Ctrl-X (soft reset: planner and buffers
                flushed). Reset while moving would lose position (ALARM:3), hence the wait.
`connect` opens the port for these; `stream` opens it itself and refuses while connected,
because the port is locked to one user.

Before the first line, a GRBL stream asks '?' and refuses unless the controller is Idle
(agent.feedrate.streaming.grbl). A DNC controller answers no status query: `stream` refuses
unless the operator has confirmed the machine ready (`confirmed_ready`, `--confirm-ready`;
DNC_CHECKLIST).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from agent.capture.model import Capture
from agent.errors import DriverError
from agent.feedrate.streaming.dnc import DncOptions
from agent.feedrate.streaming.grbl import GrblOptions, stream_to_port
from agent.feedrate.streaming.grbl_protocol import GRBL_ALARMS, StatusReport, parse_status
from agent.feedrate.streaming.session import ProgressFn, StreamControl, StreamError, StreamResult
from drivers.base import (
    Capability,
    ControllerMode,
    ControllerStatus,
    Cycle,
    Driver,
    within,
)
from drivers.grbl.settings import GrblSettings
from drivers.serial.link import SerialLink

__all__ = ["GRBL_MODES", "GrblDriver", "controller_status", "overrides_percent"]

FEED_HOLD, SOFT_RESET, STATUS_QUERY = b"!", b"\x18", b"?"

# What the operator confirms before a DNC stream: the checks a GRBL stream makes through '?',
# and the ones no status report can make. A DNC control usually runs what it receives as soon
# as it is in DNC (remote, tape) mode and cycle start has been pressed.
DNC_CHECKLIST = (
    "DNC drip feed: the controller answers no status query, so the agent cannot see whether "
    "the machine is ready. Check at the machine: no alarm; door closed and guards in place; "
    "nobody in the working area; the control in DNC (remote, tape) mode with this program's "
    "work offset and tools set; feed and rapid overrides where you want them; the axes clear "
    "of clamps and fixtures. Then run again with --confirm-ready (stream(confirmed_ready=True))"
)

# GRBL 1.1 machine states (interface.md, "Machine State"). Run and Hold belong to a program in
# progress: the machine is in production and must not be moved by anyone else. Door is the
# safety door open (someone may be reaching in), Jog and Home are a person driving the machine.
GRBL_MODES: Mapping[str, ControllerMode] = {
    "Idle": ControllerMode.STOPPED,
    "Run": ControllerMode.PRODUCTION,
    "Hold": ControllerMode.PRODUCTION,
    "Jog": ControllerMode.MANUAL,
    "Home": ControllerMode.MANUAL,
    "Alarm": ControllerMode.FAULT,
    "Door": ControllerMode.FAULT,
    "Check": ControllerMode.STOPPED,
    "Sleep": ControllerMode.STOPPED,
}


def overrides_percent(report: StatusReport) -> tuple[int, int, int] | None:
    """(feed, rapid, spindle) override in percent from `Ov:`, None when the report has none
    (GRBL sends `Ov:` only every few reports, so the caller keeps the last one)."""
    text = report.fields.get("Ov")
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"Ov: expected three integers (feed,rapid,spindle %), found {text!r}")
    feed, rapid, spindle = (int(p) for p in parts)
    return feed, rapid, spindle


def controller_status(
    report: StatusReport,
    *,
    feed_override_percent: int = 100,
    alarm: str | None = None,
    time_s: float = 0.0,
) -> ControllerStatus:
    """What the interlocks see in one GRBL status report.

    `alarm` is the last `ALARM:N` message heard: the `Alarm` state itself carries no code.
    A state GRBL does not document is taken as a fault: nothing may assume it is safe.
    """
    mode = GRBL_MODES.get(report.state)
    alarms: tuple[str, ...] = ()
    if mode is None:
        mode = ControllerMode.FAULT
        alarms = (f"unknown GRBL state {report.state!r}",)
    elif report.state == "Alarm":
        alarms = (alarm or "Alarm",)
    elif report.state == "Door":
        alarms = (f"Door:{report.substate}" if report.substate is not None else "Door",)
    return ControllerStatus(
        mode=mode,
        permission=False,  # GRBL has no "agent may move" input; this driver never moves anyway
        alarms=alarms,
        speed_override=feed_override_percent / 100.0,
        operator_present=True if report.state in ("Door", "Jog", "Home") else None,
        time_s=time_s,
    )


class _Replies:
    """Lines from the controller, split as they arrive; status reports wake their waiter."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiters: list[asyncio.Future[StatusReport]] = []
        self.alarm: str | None = None
        self.messages: list[str] = []  # the last few non-status lines, for error messages

    def feed(self, data: bytes) -> None:
        self.buffer += data
        *lines, rest = self.buffer.split(b"\n")
        self.buffer = bytearray(rest)
        for raw in lines:
            line = raw.decode("ascii", "replace").strip()
            if line.startswith("<"):
                self._status(line)
            elif line:
                if line.startswith("ALARM:"):
                    code = line.partition(":")[2]
                    why = GRBL_ALARMS.get(int(code)) if code.isdigit() else None
                    self.alarm = f"{line} {why}" if why else line
                self.messages = [*self.messages[-7:], line]

    def _status(self, line: str) -> None:
        try:
            report = parse_status(line)
        except ValueError:
            return  # a line garbled in transit; the next poll brings another
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(report)

    def fail(self, error: DriverError) -> None:
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if not w.done():
                w.set_exception(error)


class GrblDriver(Driver):
    name: ClassVar[str] = "grbl"
    capabilities: ClassVar[Capability] = Capability.TOOLPATH_STREAMING
    settings_type: ClassVar[type[Any] | None] = GrblSettings

    def __init__(self, controller: str, settings: Any, joints: tuple[Any, ...] = ()) -> None:
        if not isinstance(settings, GrblSettings):
            raise DriverError(f"{controller}: driver grbl needs its settings (port, machine)")
        super().__init__(controller, settings, joints)
        self._settings: GrblSettings = settings
        self._link: SerialLink | None = None
        self._replies = _Replies()
        self._feed_override = 100

    @property
    def connected(self) -> bool:
        return self._link is not None and self._link.is_open

    # --- Driver --------------------------------------------------------------------------

    async def connect(self) -> None:
        await self.close()
        s = self._settings
        link = SerialLink(s.port, s.baudrate, exclusive=s.exclusive)
        self._replies = _Replies()
        link.open(self._replies.feed, self._replies.fail)
        self._link = link

    async def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
            self._replies.fail(DriverError(f"{self.controller}: connection closed"))

    async def read_status(self) -> ControllerStatus:
        if not self.connected:
            return ControllerStatus(ControllerMode.DISCONNECTED, permission=False)
        report = await self._query()
        ov = overrides_percent(report)
        if ov is not None:
            self._feed_override = ov[0]
        return controller_status(
            report,
            feed_override_percent=self._feed_override,
            alarm=self._replies.alarm,
            time_s=time.monotonic(),
        )

    async def run_cycle(self, cycle: Cycle) -> Capture:
        raise DriverError(
            f"{self.controller}: driver grbl streams toolpaths and runs no test "
            f"cycles (asked for a {cycle.kind} cycle)"
        )

    async def stop_motion(self) -> None:
        """Feed hold, wait for standstill (Hold:0, Idle or Alarm), soft reset. Opens the port
        for the purpose when not connected; safe to repeat."""
        opened_here = not self.connected
        if opened_here:
            await self.connect()
        try:
            link = self._link
            if link is None:  # connect() above or before set it
                raise DriverError(f"{self.controller}: not connected, cannot stop")
            await link.write(FEED_HOLD, self._settings.write_timeout_s)
            with contextlib.suppress(TimeoutError, DriverError):
                await within(self._standstill(), self._settings.hold_timeout_s)
            await link.write(SOFT_RESET, self._settings.write_timeout_s)
        finally:
            if opened_here:
                await self.close()

    async def _standstill(self) -> None:
        while True:
            report = await self._query()
            if report.state in ("Idle", "Alarm") or (
                report.state == "Hold" and report.substate == 0
            ):
                return
            await asyncio.sleep(0.02)

    async def _query(self) -> StatusReport:
        link = self._link
        if link is None or not link.is_open:
            raise (
                link.error
                if link is not None and link.error
                else DriverError(f"{self.controller}: not connected")
            )
        waiter: asyncio.Future[StatusReport] = asyncio.get_running_loop().create_future()
        self._replies.waiters.append(waiter)
        await link.write(STATUS_QUERY, self._settings.write_timeout_s)
        try:
            return await within(asyncio.shield(waiter), self._settings.reply_timeout_s)
        except TimeoutError:
            raise DriverError(
                f"{self.controller}: no status report from {self._settings.port} within "
                f"{self._settings.reply_timeout_s:g} s of '?' (is it a GRBL controller?)"
            ) from None

    # --- streaming -----------------------------------------------------------------------

    def stream_options(self, max_line_chars: int | None = None) -> GrblOptions | DncOptions:
        """The streamer's options from the settings; `max_line_chars` is the dialect's limit,
        used when the settings give none."""
        s = self._settings
        limit = s.max_line_chars if s.max_line_chars is not None else max_line_chars
        if s.protocol == "dnc":
            return DncOptions(
                max_line_chars=limit,
                stall_timeout_s=s.stall_timeout_s,
                write_timeout_s=s.write_timeout_s,
                wait_idle=s.wait_idle,
                line_rate_bytes_s=s.baudrate / 10.0,
                hold_code=_code(s.dnc_feed_hold),
                resume_code=_code(s.dnc_resume),
                reset_code=_code(s.dnc_reset),
                hold_timeout_s=s.hold_timeout_s,
                reset_timeout_s=s.startup_timeout_s,
            )
        return GrblOptions(
            rx_buffer_bytes=s.rx_buffer_bytes,
            max_line_chars=min(limit if limit is not None else 79, s.rx_buffer_bytes - 1),
            handshake=s.handshake,
            startup_timeout_s=s.startup_timeout_s,
            status_timeout_s=s.reply_timeout_s,
            status_interval_s=s.status_interval_s,
            stall_timeout_s=s.stall_timeout_s,
            write_timeout_s=s.write_timeout_s,
            wait_idle=s.wait_idle,
        )

    def stream(
        self,
        lines: Iterable[str],
        *,
        max_line_chars: int | None = None,
        progress: ProgressFn | None = None,
        reversals_modulated: Callable[[], int] | None = None,
        source: str | None = None,
        control: StreamControl | None = None,
        confirmed_ready: bool = False,
    ) -> StreamResult:
        """Stream G-code lines to the controller (blocking; StreamError says where and why).
        `control` holds and resumes the running stream; `confirmed_ready` is the operator's
        word that a DNC machine is ready (a GRBL controller is asked instead)."""
        if self.connected:
            raise DriverError(
                f"{self.controller}: close the status connection before "
                f"streaming ({self._settings.port} takes one user)"
            )
        s = self._settings
        if s.protocol == "dnc" and not confirmed_ready:
            raise StreamError(None, None, f"{self.controller}: {DNC_CHECKLIST}", kind="not_ready")
        return stream_to_port(
            lines,
            s.port,
            protocol=s.protocol,
            baudrate=s.baudrate,
            options=self.stream_options(max_line_chars),
            progress=progress,
            reversals_modulated=reversals_modulated,
            source=source,
            exclusive=s.exclusive,
            control=control,
        )


def _code(text: str | None) -> bytes | None:
    return text.encode("ascii") if text is not None else None
