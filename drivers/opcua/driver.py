"""OPC UA driver (asyncua client): interlock status, cycle trigger, chunked capture, stop.

How a capture travels. The controller fills its sample buffers one chunk at a time (arrays of
times and counts, then a sequence number) and the driver receives them through one OPC UA
subscription, created per cycle, with a data-change monitored item per buffer variable.

Why a subscription and not a method-polled ring buffer: the server pushes each chunk as soon
as the publishing interval allows, so there is no polling round trip per chunk and no race
between "read the index" and "read the slot" that a polled ring needs handshakes against; each
monitored item has a server-side FIFO (queue_size) so a slow client loses nothing until the
queue is full, and then loses the oldest values of every buffer alike, which the sequence
numbers expose (and the overflow bit says). It is also what plain PLC servers offer: arrays
plus a counter need no custom methods or structure types on the controller. The cost is one
notification per buffer per chunk, paired back into chunks by order (drivers/opcua/stream.py
receives, drivers/opcua/capture.py pairs and checks); the bench measures the result on loopback.

The same subscription carries the cycle status (done / aborted / fault end the wait) and the
controller state (leaving the stopped state aborts the cycle even before the interlock watcher
polls). Any surprise (lost or malformed chunk, stall, dropped connection) raises, and run_cycle
sends the stop in its exception path, including on cancellation.

Connections: connect() retries with exponential backoff for connect_timeout_s; afterwards a
supervisor task reconnects with backoff whenever the session is lost, for as long as the driver
is open. While disconnected, read_status and run_cycle raise DriverError at once.

stop_motion (the configured stop action, resent after a reconnect when it could not be
delivered) is here; the session is drivers/opcua/session.py, the liveness watchdog's counter
drivers/opcua/watchdog.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from asyncua import ua
from asyncua.common.node import Node

from agent.capture.model import Capture
from agent.errors import DriverError
from drivers.base import BacklashCycle, Capability, ControllerStatus, Cycle, Driver, backlash_only
from drivers.opcua.session import OpcUaSession, RejectedError, ResolvedAction
from drivers.opcua.settings import CycleParameter, OpcUaSettings
from drivers.opcua.status import RawValue, decode_status, status_roles
from drivers.opcua.stream import CaptureStream
from drivers.opcua.watchdog import WatchdogNodes, arm_watchdog, resolve_watchdog, write_beat

log = logging.getLogger(__name__)


def cycle_values(cycle: BacklashCycle) -> dict[CycleParameter, Any]:
    """Everything a trigger may pass to the controller, by parameter name."""
    return {
        "joint_index": cycle.joint_index,
        "joint_name": cycle.joint,
        "motor_speed_rad_s": cycle.motor_speed_rad_s,
        "motor_speed_rps": cycle.motor_speed_rad_s / (2.0 * math.pi),
        "settle_s": cycle.settle_s,
        "duration_s": cycle.duration_s,
        "sample_rate_hz": cycle.sample_rate_hz,
        "test_pose_rad": cycle.test_pose_rad,
        "encoder_bits": cycle.encoder_bits,
    }


@dataclass(frozen=True)
class _Link:
    """A live session and every node the driver resolved on it."""

    session: OpcUaSession
    status: tuple[tuple[str, Node], ...]
    trigger: ResolvedAction
    stop: ResolvedAction
    cycle_status: Node
    state: Node
    buffers: tuple[tuple[str, Node], ...]
    watchdog: WatchdogNodes | None


class OpcUaDriver(Driver):
    name: ClassVar[str] = "opcua"
    capabilities: ClassVar[Capability] = (
        Capability.CYCLES | Capability.MOTOR_ENCODER | Capability.LINK_ENCODER | Capability.CURRENT
    )
    settings_type: ClassVar[type[Any] | None] = OpcUaSettings

    def __init__(self, controller: str, settings: Any, joints: tuple[Any, ...]) -> None:
        if not isinstance(settings, OpcUaSettings):
            raise DriverError(f"{controller}: driver opcua needs its settings: section")
        super().__init__(controller, settings, joints)
        self._s: OpcUaSettings = settings
        self._link: _Link | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._closing = False
        self._down_reason = "not connected"
        self._cycle_active = False
        # A stop that could not be delivered (connection lost) is sent again on reconnect.
        self._stop_pending = False
        # Observability (logged, and read by tests): how the connection has fared.
        self.connect_attempts = 0
        self.reconnects = 0
        self.stop_motion_calls = 0
        self.heartbeats_sent = 0

    @property
    def control_period_s(self) -> float:
        return self._s.control_period_s

    @property
    def connected(self) -> bool:
        return self._link is not None and not self._link.session.lost.is_set()

    # --- connection ------------------------------------------------------------------------

    async def connect(self) -> None:
        if self._supervisor is not None:
            return
        self._closing = False
        loop = asyncio.get_running_loop()
        self._link = await self._open_with_backoff(loop.time() + self._s.connect_timeout_s)
        self._supervisor = asyncio.create_task(self._supervise(), name=f"opcua {self.controller}")

    async def _open(self) -> _Link:
        self.connect_attempts += 1
        session = await OpcUaSession.open(self._s)
        try:
            s = self._s
            b = s.buffers
            buffers = {
                "sequence": b.sequence,
                "time": b.time,
                "motor_counts": b.motor_counts,
                "link_counts": b.link_counts,
                "current": b.current,
            }
            link = _Link(
                session=session,
                status=tuple((r, session.node(t)) for r, t in status_roles(s.status).items()),
                trigger=await session.resolve_action(s.cycle.trigger, "cycle trigger"),
                stop=await session.resolve_action(s.cycle.stop, "stop"),
                cycle_status=session.node(s.cycle.status),
                state=session.node(s.status.state),
                buffers=tuple((r, session.node(t)) for r, t in buffers.items() if t is not None),
                watchdog=await self._watchdog_nodes(session),
            )
            # One read of every node proves the ids exist before the first cycle needs them.
            nodes = [n for _, n in (*link.status, *link.buffers)] + [link.cycle_status]
            values = await session.read(nodes, "read the configured nodes")
            for node, dv in zip(nodes, values, strict=True):
                code = dv.StatusCode
                if code is not None and code.value == ua.StatusCodes.BadNodeIdUnknown:
                    raise RejectedError(f"node {node.nodeid.to_string()} does not exist")
        except BaseException as exc:
            await session.close()
            if isinstance(exc, DriverError) or not isinstance(exc, Exception):
                raise
            # Whatever else asyncua raises must not end the reconnect loop: it is a failed
            # attempt like any other, with its cause kept in the log.
            log.exception("event=opcua_connect_error controller=%s", self.controller)
            raise DriverError(f"cannot set up the session: {type(exc).__name__}: {exc}") from None
        log.info(
            "event=opcua_connected controller=%s endpoint=%s security=%s/%s",
            self.controller,
            s.endpoint,
            s.security.policy,
            s.security.mode,
        )
        return link

    async def _watchdog_nodes(self, session: OpcUaSession) -> WatchdogNodes | None:
        w = self._s.watchdog
        if w is None:
            log.warning(
                "event=opcua_no_watchdog controller=%s why=settings.watchdog_not_set "
                "risk=the_controller_finishes_a_cycle_after_the_agent_dies",
                self.controller,
            )
            return None
        return await resolve_watchdog(session, w)

    async def _open_with_backoff(self, deadline: float | None) -> _Link:
        loop = asyncio.get_running_loop()
        delay = self._s.reconnect_initial_s
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._open()
            except DriverError as exc:
                self._down_reason = str(exc)
                if self._closing:
                    raise
                # At connect a rejection fails at once; once running, the server side may be
                # fixed while the agent waits, so the supervisor keeps trying (backed off).
                rejected = isinstance(exc, RejectedError) and deadline is not None
                if rejected:
                    raise RejectedError(f"{self.controller}: {exc}") from None
                if deadline is not None and loop.time() + delay > deadline:
                    raise DriverError(
                        f"{self.controller}: gave up after {attempt} attempt(s): {exc}"
                    ) from None
                log.warning(
                    "event=opcua_connect_failed controller=%s attempt=%d retry_in_s=%.2f error=%r",
                    self.controller,
                    attempt,
                    delay,
                    str(exc),
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2.0, self._s.reconnect_max_s)

    async def _supervise(self) -> None:
        """Reconnect with backoff whenever the session is lost, until close()."""
        while not self._closing:
            link = self._link
            if link is None:
                return
            await link.session.lost.wait()
            if self._closing:
                return
            self._down_reason = f"connection lost ({link.session.lost_reason}); reconnecting"
            self._link = None
            await link.session.close()
            try:
                self._link = await self._open_with_backoff(None)
            except DriverError:
                return  # only when closing
            self.reconnects += 1
            log.info(
                "event=opcua_reconnected controller=%s reconnects=%d",
                self.controller,
                self.reconnects,
            )
            if self._stop_pending and self._link is not None:
                # The controller may have kept moving while unreachable (a hang, not a crash).
                await self._stop_quietly(self._link)

    def _require_link(self) -> _Link:
        link = self._link
        if link is None or link.session.lost.is_set():
            reason = link.session.lost_reason if link is not None else self._down_reason
            raise DriverError(f"{self.controller}: not connected to {self._s.endpoint}: {reason}")
        return link

    async def close(self) -> None:
        self._closing = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(BaseException):
                await self._supervisor
            self._supervisor = None
        link, self._link = self._link, None
        if link is not None:
            if self._cycle_active:
                await self._stop_quietly(link)
            await link.session.close()
        self._down_reason = "closed"

    # --- status and stop -------------------------------------------------------------------

    async def read_status(self) -> ControllerStatus:
        link = self._require_link()
        values = await link.session.read(
            [n for _, n in link.status], f"read the status of {self.controller}"
        )
        raw = {role: _raw(node, dv) for (role, node), dv in zip(link.status, values, strict=True)}
        try:
            return decode_status(raw, self._s.status, self.joints)
        except DriverError as exc:
            raise DriverError(f"{self.controller}: {exc}") from None

    async def stop_motion(self) -> None:
        self.stop_motion_calls += 1
        try:
            link = self._require_link()
            await link.session.perform(link.stop, {}, f"the stop of {self.controller}")
        except DriverError:
            self._stop_pending = True
            raise
        self._stop_pending = False
        log.info("event=opcua_stop_sent controller=%s", self.controller)

    async def _stop_quietly(self, link: _Link) -> None:
        try:
            await link.session.perform(link.stop, {}, f"the stop of {self.controller}")
        except DriverError as exc:  # the caller's error says why; this one is logged loudly
            self._stop_pending = True
            log.error("event=opcua_stop_failed controller=%s error=%r", self.controller, str(exc))
        else:
            self._stop_pending = False
            log.info("event=opcua_stop_sent controller=%s", self.controller)

    # --- the cycle -------------------------------------------------------------------------

    async def run_cycle(self, cycle: Cycle) -> Capture:
        cycle = backlash_only(self, cycle)
        link = self._require_link()
        if not any(j.name == cycle.joint for j in self.joints):
            raise DriverError(f"{self.controller}: no joint named {cycle.joint!r}")
        stream = CaptureStream(
            link.session,
            self._s,
            link.buffers,
            link.cycle_status,
            link.state,
            machine=self.controller,
        )
        triggered = False
        self._cycle_active = True
        beats: asyncio.Task[None] | None = None
        try:
            await stream.open()
            await stream.snapshot(cycle)
            if link.watchdog is not None:
                beats = await self._start_heartbeat(link, link.watchdog, stream)
            triggered = True  # set before the call: a call that times out may still start motion
            await link.session.perform(
                link.trigger, cycle_values(cycle), f"the cycle trigger of {self.controller}"
            )
            capture = await stream.collect(cycle)
            triggered = False  # the controller reported the cycle done: nothing moves
            return capture
        finally:
            if triggered:
                await self._stop_quietly(link)
            if beats is not None:
                beats.cancel()
            self._cycle_active = False
            await stream.close()

    # --- the liveness watchdog -------------------------------------------------------------

    async def _start_heartbeat(
        self, link: _Link, nodes: WatchdogNodes, stream: CaptureStream
    ) -> asyncio.Task[None]:
        """Arm the controller's watchdog for the coming cycle and start incrementing it."""
        value = await arm_watchdog(link.session, nodes)
        self.heartbeats_sent += 1
        return asyncio.create_task(
            self._heartbeat(link.session, nodes, value, stream),
            name=f"opcua watchdog {self.controller}",
        )

    async def _heartbeat(
        self, session: OpcUaSession, nodes: WatchdogNodes, value: int, stream: CaptureStream
    ) -> None:
        """Increment the watchdog counter every interval_s until cancelled.

        Runs on the event loop on purpose: if the loop hangs, the counter stops and the
        controller stops the motion, as it does when the process dies. A failed write ends the
        cycle: the controller would stop the motion on its own shortly anyway.
        """
        try:
            while True:
                await asyncio.sleep(nodes.settings.interval_s)
                value = nodes.next_value(value)
                await write_beat(session, nodes, value)
                self.heartbeats_sent += 1
        except DriverError as exc:
            stream.fail(DriverError(f"watchdog write failed, the controller will stop: {exc}"))


def _raw(node: Node, dv: ua.DataValue) -> RawValue:
    code = dv.StatusCode if dv.StatusCode is not None else ua.StatusCode()
    value = dv.Value.Value if dv.Value is not None else None
    return RawValue(node.nodeid.to_string(), value, code.is_good(), code.name)
