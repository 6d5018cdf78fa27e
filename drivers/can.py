"""CAN driver: test cycles and encoder captures over frames described by a DBC file.

python-can carries the frames (SocketCAN in production; socketcand over TCP or udp_multicast
where no CAN hardware is at hand), cantools reads the DBC. The protocol, frame by frame, is in
docs/drivers/can.md: the agent sends ENABLE once, then CycleSetup + CycleLength + START_CYCLE per
cycle; the controller answers with periodic status frames (the acknowledgement is the cycle
counter it echoes) and one encoder frame per sample, whose counter makes every lost frame seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any, ClassVar

from agent.capture import Capture
from agent.errors import CycleAborted, DriverError
from drivers.base import (
    BacklashCycle,
    Capability,
    ControllerMode,
    ControllerStatus,
    Cycle,
    Driver,
    backlash_only,
    within,
)
from drivers.can_dbc import (
    MODES,
    REJECT_REASONS,
    CanProtocol,
    Command,
    CycleState,
    DbcError,
    StatusFrame,
    load_protocol,
    stream_bus_load,
)
from drivers.can_link import BusLink, CaptureRecorder, open_bus
from drivers.can_settings import CanSettings

log = logging.getLogger(__name__)

_POLL_S = 0.05  # longest sleep between checks while waiting on the controller
# During a cycle the agent sends a NOP this often: the controller's watchdog stops the motion
# when they cease (agent dead, link cut), since then no STOP can reach it.
HEARTBEAT_S = 0.1
_RECONNECT_FIRST_S = 0.5


class CanDriver(Driver):
    name: ClassVar[str] = "can"
    capabilities: ClassVar[Capability] = (
        Capability.CYCLES | Capability.MOTOR_ENCODER | Capability.LINK_ENCODER
    )
    settings_type: ClassVar[type[Any] | None] = CanSettings

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

    async def _open(self) -> None:
        proto = self._require_proto()
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
        changed = self._changed
        assert changed is not None

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
            await self._open()
        except DriverError as exc:
            raise DriverError(f"{self.controller}: CAN link down: {reason}; {exc}") from exc
        assert self._link is not None
        return self._link

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

    # --- motion -------------------------------------------------------------------------------
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

    async def stop_motion(self) -> None:
        # Synchronous on purpose: one small frame, and no await a cancellation could cut short.
        self._send_stop("stop_motion")

    def _check_cycle(self, cycle: BacklashCycle, proto: CanProtocol) -> int:
        """Refuse what the frames cannot carry, before anything moves; returns the joint index."""
        joint = next((j for j in self.joints if j.name == cycle.joint), None)
        if joint is None:
            raise DriverError(f"{self.controller}: no joint named {cycle.joint!r}")
        rate = cycle.sample_rate_hz
        where = f"{self.controller}/{cycle.joint}"
        if rate != math.floor(rate):
            raise DriverError(
                f"{where}: backlash_cycle.sample_rate_hz must be a whole number of Hz on CAN "
                f"(SampleRate is in Hz), found {rate:g}"
            )
        if cycle.encoder_bits != proto.position_bits:
            raise DriverError(
                f"{where}: the cycle wants {cycle.encoder_bits}-bit counts, "
                f"{proto.encoder.name} carries {proto.position_bits}"
            )
        load = stream_bus_load(proto.encoder, rate, self._settings.bitrate)
        if load > self._settings.max_bus_load:
            raise DriverError(
                f"{where}: {rate:g} encoder frames/s take {100 * load:.0f} % of a "
                f"{self._settings.bitrate / 1e6:g} Mbit/s bus before stuffing "
                f"(max_bus_load {100 * self._settings.max_bus_load:.0f} %)"
            )
        return int(joint.index)

    async def run_cycle(self, cycle: Cycle) -> Capture:
        cycle = backlash_only(self, cycle)
        proto = self._require_proto()
        joint_index = self._check_cycle(cycle, proto)
        link = await self._live_link()
        status = self._fresh_status(link)
        if status.mode in (ControllerMode.FAULT, ControllerMode.MANUAL):
            raise DriverError(f"{self.controller}: controller in {status.mode.value} mode")
        start_pos = link.snapshot()[2].get(joint_index)
        self._cycle_counter = self._cycle_counter % 255 + 1  # 1..255; 0 means "none yet"
        counter = self._cycle_counter
        samples = round(cycle.duration_s * cycle.sample_rate_hz) + 1  # as the simulated fake
        recorder = CaptureRecorder(
            proto,
            joint_index,
            samples,
            counter,
            rate_hz=cycle.sample_rate_hz,
            # A burst may be as long as a stall the driver tolerates; beyond, it is a flood.
            max_ahead_s=self._settings.stall_timeout_s,
            drop_duplicates=self._settings.duplicate_frames == "drop",
        )
        link.arm(recorder)
        self._in_cycle = True
        sent_start = False
        finished = False
        t_start = time.monotonic()
        try:
            link.send(
                "cycle_setup",
                {
                    "JointIndex": joint_index,
                    "SampleRate": int(cycle.sample_rate_hz),
                    "MotorSpeed": cycle.motor_speed_rad_s,
                    "CycleCounter": counter,
                },
            )
            link.send(
                "cycle_length",
                {"SampleCount": samples, "Settle": cycle.settle_s, "CycleCounter": counter},
            )
            sent_start = True
            link.send(
                "command",
                {
                    "Command": Command.START_CYCLE,
                    "CycleCounter": counter,
                    "JointIndex": joint_index,
                },
            )
            await self._await_ack(link, recorder, counter)
            await self._await_capture(link, recorder, counter, cycle)
            finished = True
            await self._await_done(link, counter)
        finally:
            link.disarm()
            try:
                answering = True
                if sent_start and not finished:
                    answering = await self._stop_and_confirm(link, counter)
                if sent_start and answering:
                    # The pose reported during the motion is history: the next interlock
                    # check must see where the joint stands now.
                    link.forget_position(joint_index)
                    await self._wait_for(
                        lambda: link.has_position(joint_index) or link.failure is not None,
                        self._settings.ack_timeout_s,
                    )
            finally:
                self._in_cycle = False
        streamed_s = (recorder.last_frame_at or 0.0) - (recorder.first_frame_at or 0.0)
        self.last_capture_stats = {
            "frames": recorder.received,
            "lost_frames": recorder.lost,
            "duplicate_frames_dropped": recorder.duplicates,
            "stream_s": streamed_s,
            "frames_per_s": (recorder.received - 1) / streamed_s if streamed_s > 0 else None,
            "cycle_wall_s": time.monotonic() - t_start,
        }
        s = self._settings
        return recorder.to_capture(
            cycle,
            self.controller,
            start_pos.position_rad if start_pos else None,
            {"driver": "can", "interface": s.interface, "channel": s.channel, "dbc": s.dbc},
        )

    async def _wait_for(self, ready: Any, timeout_s: float) -> bool:
        """Wait until ready() (checked on every wake from the reader thread) or the timeout."""
        changed = self._changed
        assert changed is not None
        deadline = time.monotonic() + timeout_s
        while not ready():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            changed.clear()
            if ready():
                return True
            with contextlib.suppress(TimeoutError):
                await within(changed.wait(), min(left, _POLL_S))
        return True

    async def _await_ack(self, link: BusLink, rec: CaptureRecorder, counter: int) -> None:
        def answered() -> bool:
            st = link.status
            return (
                rec.acked
                or link.failure is not None
                or (st is not None and st.cycle_counter == counter and st.cycle_state in _ENDED)
            )

        if not await self._wait_for(answered, self._settings.ack_timeout_s):
            raise DriverError(
                f"{self.controller}: cycle {counter} not acknowledged within "
                f"{self._settings.ack_timeout_s:g} s"
            )
        self._raise_if_ended(link, rec, counter)

    def _raise_if_ended(self, link: BusLink, rec: CaptureRecorder, counter: int) -> None:
        if rec.error is not None:
            raise DriverError(f"{self.controller}: capture failed: {rec.error}")
        if link.failure is not None:
            raise DriverError(f"{self.controller}: CAN link lost: {link.failure}")
        st = link.status
        if st is None or st.cycle_counter != counter:
            return
        if st.cycle_state == CycleState.REJECTED:
            reason = REJECT_REASONS.get(st.reject_reason, f"reason code {st.reject_reason}")
            raise DriverError(f"{self.controller}: controller rejected cycle {counter}: {reason}")
        if st.cycle_state == CycleState.ABORTED:
            raise CycleAborted(
                f"{self.controller}: controller aborted cycle {counter} after "
                f"{rec.received} samples"
            )

    async def _await_capture(
        self, link: BusLink, rec: CaptureRecorder, counter: int, cycle: BacklashCycle
    ) -> None:
        s = self._settings
        first_deadline = time.monotonic() + cycle.settle_s + s.prepare_timeout_s
        done_seen_at: float | None = None
        capturing_at: float | None = None
        beat_at = time.monotonic()
        while True:
            self._raise_if_ended(link, rec, counter)
            if rec.complete:
                return
            now = time.monotonic()
            if now - beat_at >= HEARTBEAT_S:
                beat_at = now
                beat = {"Command": Command.NOP, "CycleCounter": counter, "JointIndex": 0}
                link.send("command", beat)
            self._fresh_status(link)  # a silent controller is a lost one
            st = link.status
            if st is not None and st.mode in (ControllerMode.FAULT, ControllerMode.MANUAL):
                raise CycleAborted(f"{self.controller}: controller went to {st.mode.value} mode")
            if st is not None and st.cycle_counter == counter and st.cycle_state == CycleState.DONE:
                done_seen_at = done_seen_at or now
                if now - done_seen_at > s.stall_timeout_s:
                    raise DriverError(
                        f"{self.controller}: controller finished cycle {counter} but "
                        f"{rec.samples - rec.received} of {rec.samples} encoder frames are missing"
                    )
            ours = st is not None and st.cycle_counter == counter
            if ours and st is not None and st.cycle_state == CycleState.CAPTURING:
                capturing_at = capturing_at or now
            last = rec.last_frame_at
            if last is None and capturing_at is not None and now - capturing_at > s.stall_timeout_s:
                # The joint turns at speed now: waiting out prepare_timeout_s would let it.
                raise DriverError(
                    f"{self.controller}: the controller reports cycle {counter} capturing for "
                    f"{now - capturing_at:.2f} s, but no encoder frame came"
                )
            if last is None and now > first_deadline:
                raise DriverError(
                    f"{self.controller}: no encoder frame within "
                    f"{cycle.settle_s + s.prepare_timeout_s:g} s of the start"
                )
            if last is not None and now - last > s.stall_timeout_s:
                raise DriverError(
                    f"{self.controller}: encoder stream stalled for {now - last:.2f} s after "
                    f"sample {rec.received} of {rec.samples}"
                )
            await self._wait_for(lambda: rec.finished or link.failure is not None, _POLL_S)

    async def _stop_and_confirm(self, link: BusLink, counter: int) -> bool:
        """Send STOP, then wait (bounded) until the status shows the cycle over, so the next
        interlock check reads a stopped controller rather than a status from before the STOP.
        False when the controller did not confirm (silent, or the link is gone)."""
        try:
            self._send_stop(f"cycle {counter} did not finish")
        except DriverError as exc:
            log.error("event=can_stop_failed controller=%s error=%r", self.controller, str(exc))
            return False

        def over() -> bool:
            st = link.status
            return link.failure is not None or (
                st is not None
                and st.mode is not ControllerMode.TEST_CYCLE
                and (st.cycle_counter != counter or st.cycle_state not in _ACTIVE)
            )

        if not await self._wait_for(over, self._settings.ack_timeout_s):
            log.error(
                "event=can_stop_unconfirmed controller=%s cycle=%d: STOP sent, but the status "
                "still shows the cycle running",
                self.controller,
                counter,
            )
            return False
        return link.failure is None

    async def _await_done(self, link: BusLink, counter: int) -> None:
        """The last frame is in; the controller says DONE (motion over) a status period later."""

        def done() -> bool:
            st = link.status
            return link.failure is not None or (
                st is not None
                and st.cycle_counter == counter
                and st.cycle_state != CycleState.CAPTURING
            )

        if not await self._wait_for(done, self._settings.ack_timeout_s):
            log.warning(
                "event=can_cycle_not_done controller=%s cycle=%d: capture complete, but the "
                "controller has not reported the end of the cycle",
                self.controller,
                counter,
            )


_ENDED = (CycleState.ABORTED, CycleState.REJECTED)
_ACTIVE = (CycleState.PREPARING, CycleState.SETTLING, CycleState.CAPTURING)


def _shutdown_late_bus(future: asyncio.Future[Any]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    with contextlib.suppress(Exception):
        future.result().shutdown()
