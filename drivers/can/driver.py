"""CAN driver: test cycles and encoder captures over frames described by a DBC file.

python-can carries the frames (SocketCAN in production; socketcand over TCP or udp_multicast
where no CAN hardware is at hand), cantools reads the DBC. The protocol, frame by frame, is in
docs/drivers/can.md: the agent sends ENABLE once, then CycleSetup + CycleLength + START_CYCLE per
cycle; the controller answers with periodic status frames (the acknowledgement is the cycle
counter it echoes) and one encoder frame per sample, whose counter makes every lost frame seen.

The connection, status and sending STOP are drivers/can/connection.py's (CanConnection); this
module runs the test cycle over it and holds `stop_motion`.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, ClassVar

from agent.capture.model import Capture
from agent.errors import CycleAborted, DriverError
from drivers.base import (
    BacklashCycle,
    Capability,
    ControllerMode,
    Cycle,
    backlash_only,
)
from drivers.can.connection import POLL_S, CanConnection
from drivers.can.dbc import (
    REJECT_REASONS,
    CanProtocol,
    Command,
    CycleState,
    stream_bus_load,
)
from drivers.can.link import BusLink
from drivers.can.recorder import CaptureRecorder
from drivers.can.settings import CanSettings

__all__ = ["HEARTBEAT_S", "CanDriver"]

log = logging.getLogger(__name__)

# During a cycle the agent sends a NOP this often: the controller's watchdog stops the motion
# when they cease (agent dead, link cut), since then no STOP can reach it.
HEARTBEAT_S = 0.1


class CanDriver(CanConnection):
    name: ClassVar[str] = "can"
    capabilities: ClassVar[Capability] = (
        Capability.CYCLES | Capability.MOTOR_ENCODER | Capability.LINK_ENCODER
    )
    settings_type: ClassVar[type[Any] | None] = CanSettings

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

    async def stop_motion(self) -> None:
        """STOP to the controller (CanConnection._send_stop); owed and resent on reconnect when
        the link is down. Synchronous on purpose: one small frame, and no await a cancellation
        could cut short."""
        self._send_stop("stop_motion")

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
            await self._wait_for(lambda: rec.finished or link.failure is not None, POLL_S)

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
