"""The link half of the CAN driver: connect (ENABLE, first status round), reconnect with
backoff outside a cycle, fresh controller status, and sending STOP (owed and resent on
reconnect when the link is down).

drivers/can/driver.py builds the test cycle and `stop_motion` on top of it (CanDriver subclasses
CanConnection); the frames are docs/drivers/can.md's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from agent.errors import DriverError
from drivers.base import ControllerStatus, Driver, within
from drivers.can.dbc import MODES, CanProtocol, Command, DbcError, StatusFrame, load_protocol
from drivers.can.link import BusLink, open_bus
from drivers.can.settings import CanSettings

log = logging.getLogger(__name__)

POLL_S = 0.05  # longest sleep between checks while waiting on the controller
_RECONNECT_FIRST_S = 0.5


class CanConnection(Driver):
    """CanDriver without its test cycle and stop_motion: the connection, the status, STOP."""

    def __init__(self, controller: str, settings: Any, joints: tuple[Any, ...]) -> None:
        if not isinstance(settings, CanSettings):
            raise DriverError(
                f"{controller}: the can driver needs a settings section (at least `dbc:`)"
            )
        super().__init__(controller, settings, joints)
        self._settings: CanSettings = settings
        self._proto: CanProtocol | None = None
        self._link: BusLink | None = None
        self._changed: asyncio.Event | None = None
        self._cycle_counter = 0
        self._in_cycle = False
        self._next_reconnect = 0.0
        self._reconnect_wait_s = _RECONNECT_FIRST_S
        self._stop_owed = False  # a STOP that could not be delivered goes out on reconnect
        self.stop_commands_sent = 0
        self.last_capture_stats: dict[str, Any] = {}

    @property
    def control_period_s(self) -> float:
        return 0.02  # the status period of the example DBC's controller

    # --- connection ---------------------------------------------------------------------------
    async def connect(self) -> None:
        if self._proto is None:
            try:
                self._proto = load_protocol(self._settings.dbc, self._settings.messages)
            except DbcError as exc:
                raise DriverError(f"{self.controller}: {exc}") from exc
            self._check_joints(self._proto)
        await asyncio.to_thread(self._drop_link)  # a second connect replaces the link
        self._changed = asyncio.Event()
        await self._open()

    def _check_joints(self, proto: CanProtocol) -> None:
        for joint in self.joints:
            if joint.encoder_bits != proto.position_bits:
                raise DriverError(
                    f"{self.controller}: joint {joint.name} has encoder_bits "
                    f"{joint.encoder_bits}, but {proto.source} carries "
                    f"{proto.position_bits}-bit counts in {proto.encoder.name}"
                )

    async def _open(self) -> BusLink:
        proto = self._require_proto()
        changed = self._wake_event()
        s = self._settings
        label = f"{self.controller} ({s.interface} {s.channel})"
        if s.interface == "socketcand":
            await self._probe_tcp()
        loop = asyncio.get_running_loop()
        opening = loop.run_in_executor(None, open_bus, s, proto.receive_filters())
        try:
            bus = await within(asyncio.shield(opening), s.connect_timeout_s)
        except BaseException as exc:
            # The handshake thread cannot be interrupted: close the bus if it opens later.
            opening.add_done_callback(_shutdown_late_bus)
            if isinstance(exc, TimeoutError):
                raise DriverError(
                    f"{label}: no CAN interface after {s.connect_timeout_s:g} s"
                ) from None
            if isinstance(exc, Exception):
                raise DriverError(f"{label}: cannot open the CAN interface: {exc}") from exc
            raise

        def wake() -> None:
            loop.call_soon_threadsafe(changed.set)

        link = BusLink(bus, proto, wake, label)
        link.start()
        self._link = link
        try:
            link.send("command", {"Command": Command.ENABLE, "CycleCounter": 0, "JointIndex": 0})
            await self._wait_for(
                lambda: link.status is not None or link.failure is not None,
                s.connect_timeout_s,
            )
            if link.status is None:
                raise DriverError(
                    f"{label}: no status frame within {s.connect_timeout_s:g} s of ENABLE"
                    + (f" ({link.failure})" if link.failure else "")
                )
            # Joint positions come round robin, one per status period: wait for a full round
            # so the first interlock check sees every pose (a joint never reported stays
            # unknown, and the interlocks refuse to move it).
            indexes = {j.index for j in self.joints}
            await self._wait_for(
                lambda: indexes <= set(link.snapshot()[2]) or link.failure is not None,
                s.connect_timeout_s,
            )
        except BaseException:
            self._drop_link()
            raise
        self._reconnect_wait_s = _RECONNECT_FIRST_S
        log.info("event=can_connected link=%r", label)
        if self._stop_owed:
            self._send_stop("owed since the link was lost")
        return link

    async def _probe_tcp(self) -> None:
        """Fail fast on a refused socketcand port (python-can would retry it for 10 s)."""
        s = self._settings
        try:
            _, writer = await within(
                asyncio.open_connection(s.host, s.resolved_port), s.connect_timeout_s
            )
        except (OSError, TimeoutError) as exc:
            raise DriverError(
                f"{self.controller}: socketcand at {s.host}:{s.resolved_port} unreachable: "
                f"{str(exc) or 'timeout'}"
            ) from exc
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    def _drop_link(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.shutdown()

    async def close(self) -> None:
        await asyncio.to_thread(self._drop_link)

    def _wake_event(self) -> asyncio.Event:
        """Set by the reader thread on news; exists from the first connect on."""
        if self._changed is None:
            raise DriverError(f"{self.controller}: not connected")
        return self._changed

    def _require_proto(self) -> CanProtocol:
        if self._proto is None:
            raise DriverError(f"{self.controller}: not connected")
        return self._proto

    async def _live_link(self) -> BusLink:
        """The working link, reconnecting (with backoff, never during a cycle) if it broke."""
        link = self._link
        if link is not None and link.failure is None:
            return link
        reason = link.failure if link is not None else "not connected"
        if self._in_cycle or self._proto is None:
            raise DriverError(f"{self.controller}: CAN link down: {reason}")
        now = time.monotonic()
        if now < self._next_reconnect:
            raise DriverError(
                f"{self.controller}: CAN link down: {reason} "
                f"(next reconnect in {self._next_reconnect - now:.1f} s)"
            )
        await asyncio.to_thread(self._drop_link)
        self._next_reconnect = now + self._reconnect_wait_s
        self._reconnect_wait_s = min(2 * self._reconnect_wait_s, self._settings.reconnect_max_s)
        try:
            return await self._open()
        except DriverError as exc:
            raise DriverError(f"{self.controller}: CAN link down: {reason}; {exc}") from exc

    # --- status -------------------------------------------------------------------------------
    def _fresh_status(self, link: BusLink) -> StatusFrame:
        status, at, _ = link.snapshot()
        limit = self._settings.status_timeout_s
        if status is None or at is None:
            raise DriverError(f"{self.controller}: no status frame received")
        age = time.monotonic() - at
        if age > limit:
            raise DriverError(
                f"{self.controller}: last status frame is {age:.2f} s old "
                f"(status_timeout_s {limit:g})"
            )
        return status

    async def read_status(self) -> ControllerStatus:
        link = await self._live_link()
        status = self._fresh_status(link)
        _, _, positions = link.snapshot()
        now = time.monotonic()
        # Positions come round robin, one joint per status period: older than a few rounds is
        # a controller that stopped reporting that joint.
        max_age = max(1.0, 4 * self._settings.status_timeout_s)
        joint_positions = {
            j.name: positions[j.index].position_rad
            for j in self.joints
            if j.index in positions and now - positions[j.index].received_at <= max_age
        }
        alarms: tuple[str, ...] = ()
        if status.alarm_active:
            alarms = (f"alarm code {status.alarm_code}",)
        if status.mode_code not in MODES:
            alarms += (f"unknown controller mode code {status.mode_code}",)
        return ControllerStatus(
            mode=status.mode,
            permission=status.permission,
            joint_positions_rad=joint_positions,
            alarms=alarms,
            speed_override=status.speed_override,
            time_s=status.controller_time_s,
        )

    # --- STOP (CanDriver.stop_motion and the cycle's exception path send it) -----------------
    def _send_stop(self, reason: str) -> None:
        link = self._link
        self._stop_owed = True
        if link is None:
            raise DriverError(f"{self.controller}: not connected, STOP not sent ({reason})")
        link.send(
            "command",
            {"Command": Command.STOP, "CycleCounter": self._cycle_counter, "JointIndex": 0},
        )
        self._stop_owed = False
        self.stop_commands_sent += 1
        log.info("event=can_stop_sent controller=%s reason=%r", self.controller, reason)

    async def _wait_for(self, ready: Any, timeout_s: float) -> bool:
        """Wait until ready() (checked on every wake from the reader thread) or the timeout."""
        changed = self._wake_event()
        deadline = time.monotonic() + timeout_s
        while not ready():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            changed.clear()
            if ready():
                return True
            with contextlib.suppress(TimeoutError):
                await within(changed.wait(), min(left, POLL_S))
        return True


def _shutdown_late_bus(future: asyncio.Future[Any]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    with contextlib.suppress(Exception):
        future.result().shutdown()
