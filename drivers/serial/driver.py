"""Encoder interface boards on a serial line (`driver: serial`, pyserial).

The board streams binary frames (drivers/serial/frames.py has the wire format): sample frames
with a counter, a timestamp, a status byte and the 19-bit (12..32) counts of several channels,
motor and link side of each joint; and it answers a small command channel (status, info, start,
stop) on the same line.

Assumption, stated in docs/drivers/serial.md: an encoder board does not move the machine. The
board is taken as part of a controller that accepts START (run the constant-speed test cycle on
one joint, then stream the capture window while the joint moves) and STOP (halt the motion now),
and reports the controller's mode, permission signal, alarm, override and joint positions in
its STATUS reply and in every sample frame's status byte.

Liveness: START carries the watchdog timeout and, while the cycle runs, the driver sends a
HEARTBEAT every heartbeat_interval_s from the event loop; a board that hears none for
watchdog_timeout_s stops the joint by itself (an agent killed or hung mid-cycle).

stop_motion (STOP, acknowledged) is here, with `_stop_nowait` for the paths that cannot wait.
The port handling is drivers/serial/link.py (`SerialLink`), shared on purpose: the GRBL driver
(drivers/grbl/driver.py) opens its port with it and gives it its own line protocol. Frames are
checked one by one as they arrive in drivers/serial/sink.py (repeated, out-of-order, flooding
samples stop the cycle at once); the capture is assembled in drivers/serial/capture.py; which
channel carries which joint is resolved with the settings (drivers/serial/settings.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from agent.capture.model import Capture
from agent.errors import CycleAborted, DriverError
from drivers.base import (
    BacklashCycle,
    Capability,
    ControllerStatus,
    Cycle,
    Driver,
    backlash_only,
)
from drivers.serial.capture import assemble_capture
from drivers.serial.frames import (
    BOARD_TO_AGENT,
    PROTOCOL_VERSION,
    ChannelSide,
    CycleDone,
    CycleResult,
    DecoderStats,
    Frame,
    FrameDecoder,
    FrameError,
    FrameType,
    InfoReply,
    Layout,
    StartAck,
    StartCommand,
    StartResult,
    StatusBits,
    StatusReply,
    StopAck,
    encode_query,
    length_rule,
    reply_tag,
)
from drivers.serial.link import SerialLink
from drivers.serial.settings import SerialSettings, resolve_channels
from drivers.serial.sink import CaptureSink, beyond, mode_of

__all__ = ["SerialEncoderDriver"]

log = logging.getLogger(__name__)


class SerialEncoderDriver(Driver):
    name: ClassVar[str] = "serial"
    capabilities: ClassVar[Capability] = (
        Capability.CYCLES | Capability.MOTOR_ENCODER | Capability.LINK_ENCODER
    )
    settings_type: ClassVar[type[Any] | None] = SerialSettings

    def __init__(self, controller: str, settings: Any, joints: tuple[Any, ...]) -> None:
        if not isinstance(settings, SerialSettings):
            raise DriverError(f"{controller}: driver serial needs its settings (at least port)")
        super().__init__(controller, settings, joints)
        self._settings: SerialSettings = settings
        self.layout = Layout(settings.channels, settings.count_bits)
        self.channels = resolve_channels(settings, joints, controller)
        self._link: SerialLink | None = None
        self._decoder = FrameDecoder(length_rule(self.layout, BOARD_TO_AGENT))
        self._pending: dict[int, tuple[FrameType, asyncio.Future[Frame]]] = {}
        self._sink: CaptureSink | None = None
        self._tag = 0
        self.info: InfoReply | None = None
        self.sample_frames = 0  # good SAMPLE frames received on this connection
        self.stray_frames = 0  # good frames nobody waited for (late replies, samples after STOP)
        self.stop_requests = 0
        self.heartbeats_sent = 0
        self.heartbeats_missed = 0  # beats the port could not take at once
        self.duplicates_dropped = 0  # identical frames dropped in the last cycle

    @property
    def stats(self) -> DecoderStats:
        return self._decoder.stats

    # --- connection -------------------------------------------------------------------------

    async def connect(self) -> None:
        await self.close()
        s = self._settings
        self._decoder = FrameDecoder(length_rule(self.layout, BOARD_TO_AGENT))
        link = SerialLink(s.port, s.baudrate, exclusive=s.exclusive)
        link.open(self._on_data, self._on_lost)
        self._link = link
        try:
            frame = await self._request(
                lambda tag: encode_query(FrameType.INFO_QUERY, tag), FrameType.INFO
            )
            self.info = _decode(InfoReply.decode, frame, self.controller)
            self._check_info(self.info)
        except BaseException:
            await self.close()
            raise

    def _check_info(self, info: InfoReply) -> None:
        where = f"{self.controller}: board on {self._settings.port}"
        if info.version != PROTOCOL_VERSION:
            raise DriverError(f"{where} speaks protocol {info.version}, not {PROTOCOL_VERSION}")
        if info.layout != self.layout:
            raise DriverError(
                f"{where} sends {info.layout.channels} channels of {info.layout.count_bits} bits, "
                f"settings say {self.layout.channels} of {self.layout.count_bits}"
            )
        wrong = []
        for joint in self.joints:
            motor, link = self.channels[joint.name]
            for ch, side in ((motor, ChannelSide.MOTOR), (link, ChannelSide.LINK)):
                if ch is not None and info.channel_map[ch] != (joint.index, side):
                    j, got = info.channel_map[ch]
                    wrong.append(
                        f"channel {ch} should be joint {joint.index} {side.name.lower()}, "
                        f"the board says joint {j} {got.name.lower()}"
                    )
        if wrong:
            raise DriverError(f"{where}: " + "; ".join(wrong))

    async def close(self) -> None:
        if self._sink is not None:  # closing under a running cycle: stop the joint first
            self._stop_nowait()
        link, self._link = self._link, None
        if link is not None:
            link.close()
        self._on_lost(DriverError(f"{self.controller}: connection closed"))

    def _require_link(self) -> SerialLink:
        link = self._link
        if link is None:
            raise DriverError(f"{self.controller}: not connected")
        if link.error is not None:
            raise DriverError(f"{self.controller}: {link.error}")
        return link

    # --- what arrives -----------------------------------------------------------------------

    def _on_data(self, data: bytes) -> None:
        for frame in self._decoder.feed(data):
            sink = self._sink
            if frame.type == FrameType.SAMPLE:
                self.sample_frames += 1
                if sink is not None and sink.done is None:
                    sink.add(frame.payload)
                else:
                    self.stray_frames += 1
                continue
            tag = reply_tag(frame)
            if frame.type == FrameType.CYCLE_DONE:
                if sink is not None and sink.tag == tag and sink.done is None:
                    try:
                        sink.finish(CycleDone.decode(frame.payload))
                    except FrameError as exc:
                        sink.fail(DriverError(f"{self.controller}: {exc}"))
                else:
                    self.stray_frames += 1
                continue
            waiting = self._pending.get(tag)
            if waiting is not None and waiting[0] == frame.type and not waiting[1].done():
                waiting[1].set_result(frame)
            else:
                self.stray_frames += 1

    def _on_lost(self, error: DriverError) -> None:
        for _, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        if self._sink is not None:
            self._sink.fail(error)

    # --- commands ---------------------------------------------------------------------------

    def _next_tag(self) -> int:
        for _ in range(256):
            self._tag = self._tag % 255 + 1
            if self._tag not in self._pending and (
                self._sink is None or self._sink.tag != self._tag
            ):
                return self._tag
        raise DriverError(f"{self.controller}: 255 requests outstanding")

    async def _request(
        self, make: Callable[[int], bytes], reply: FrameType, tag: int | None = None
    ) -> Frame:
        link = self._require_link()
        tag = self._next_tag() if tag is None else tag
        fut: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._pending[tag] = (reply, fut)
        timeout_s = self._settings.reply_timeout_s
        try:
            await link.write(make(tag), timeout_s)
            async with asyncio.timeout(timeout_s):
                return await fut
        except TimeoutError:
            raise DriverError(
                f"{self.controller}: no {reply.name} reply within {timeout_s:g} s (board silent "
                f"or answering garbage: {self.stats.garbage_bytes} garbage bytes so far)"
            ) from None
        finally:
            self._pending.pop(tag, None)
            if not fut.done():
                fut.cancel()

    async def read_status(self) -> ControllerStatus:
        frame = await self._request(
            lambda tag: encode_query(FrameType.STATUS_QUERY, tag), FrameType.STATUS
        )
        reply = _decode(StatusReply.decode, frame, self.controller)
        positions = {
            j.name: reply.joint_positions_urad[j.index - 1] * 1e-6
            for j in self.joints
            if j.index <= len(reply.joint_positions_urad)
        }
        return ControllerStatus(
            mode=mode_of(reply.status),
            permission=bool(reply.status & StatusBits.PERMISSION),
            joint_positions_rad=positions,
            alarms=(f"board alarm {reply.alarm}",) if reply.alarm else (),
            speed_override=reply.override_pct / 100.0,
            time_s=reply.clock_us * 1e-6,
        )

    async def stop_motion(self) -> None:
        """Send STOP and wait for its acknowledgement; DriverError if it cannot be confirmed."""
        self.stop_requests += 1
        if self._link is None:
            return  # never connected or closed: nothing of ours is moving
        frame = await self._request(
            lambda tag: encode_query(FrameType.STOP, tag), FrameType.STOP_ACK
        )
        _decode(StopAck.decode, frame, self.controller)

    def _stop_nowait(self) -> None:
        """STOP from a path that may not wait (cancellation): one write, no acknowledgement."""
        self.stop_requests += 1
        if self._link is not None:
            tag = self._next_tag()
            sent = self._link.write_nowait(encode_query(FrameType.STOP, tag))
            log.warning("event=serial_stop controller=%s sent=%s", self.controller, sent > 0)

    # --- the test cycle ---------------------------------------------------------------------

    async def run_cycle(self, cycle: Cycle) -> Capture:
        cycle = backlash_only(self, cycle)
        self._require_link()
        joint = next((j for j in self.joints if j.name == cycle.joint), None)
        if joint is None:
            raise DriverError(f"{self.controller}: no joint named {cycle.joint!r}")
        if self._sink is not None:
            raise DriverError(f"{self.controller}: a cycle is already running")
        s = self._settings
        tag = self._next_tag()
        sink = self._sink = CaptureSink(tag, cycle.sample_rate_hz, s.duplicate_frames)
        command = StartCommand(
            tag,
            cycle.joint_index,
            cycle.motor_speed_rad_s,
            cycle.settle_s,
            cycle.duration_s,
            cycle.sample_rate_hz,
            cycle.test_pose_rad,
            round(s.watchdog_timeout_s * 1000.0),
        )
        finished = False
        # The board arms its watchdog on START: the beats start with it and end with the cycle.
        beats = asyncio.create_task(self._heartbeat(tag), name=f"serial heartbeat {tag}")
        try:
            frame = await self._request(lambda _: command.encode(), FrameType.START_ACK, tag)
            ack = _decode(StartAck.decode, frame, self.controller)
            if ack.result is not StartResult.OK:
                finished = True  # refused: nothing moves
                raise DriverError(
                    f"{self.controller}/{cycle.joint}: board refused the cycle "
                    f"({ack.result.name.lower().replace('_', ' ')})"
                )
            await self._follow(sink, cycle, ack)
            finished = True
        finally:
            beats.cancel()
            self._sink = None
            if not finished:  # anything after START but the end of the cycle: stop now
                self._stop_nowait()
        if sink.done is None:  # _follow returns only once CYCLE_DONE is in
            raise DriverError(
                f"{self.controller}/{cycle.joint}: the cycle ended without CYCLE_DONE"
            )
        self.duplicates_dropped = sink.duplicates_dropped
        return assemble_capture(
            sink.payloads,
            sink.done,
            cycle,
            layout=self.layout,
            channels=self.channels[joint.name],
            settings=self._settings,
            machine=self.controller,
            link_stats=self.stats.to_dict(),
            duplicates_dropped=sink.duplicates_dropped,
        )

    async def _heartbeat(self, tag: int) -> None:
        """HEARTBEAT every heartbeat_interval_s while the cycle runs.

        Sent from the event loop on purpose: a loop that hangs stops the beats, and the board
        stops the joint, as it does when the process dies. Never waits on the port: a beat the
        port cannot take now is skipped, and the board's timeout allows for a few.
        """
        frame = encode_query(FrameType.HEARTBEAT, tag)
        while True:
            await asyncio.sleep(self._settings.heartbeat_interval_s)
            link = self._link
            if link is None:
                continue  # closed under the cycle: run_cycle ends it and cancels us
            if link.write_nowait(frame) < len(frame):
                self.heartbeats_missed += 1
            else:
                self.heartbeats_sent += 1

    async def _follow(self, sink: CaptureSink, cycle: BacklashCycle, ack: StartAck) -> None:
        s = self._settings
        first_wait_s = cycle.settle_s + s.start_timeout_s
        where = f"{self.controller}/{cycle.joint}"
        while True:
            sink.wake.clear()
            if sink.error is not None:
                raise DriverError(f"{where}: {sink.error}")
            if sink.bad is not None:
                raise DriverError(f"{where}: {sink.bad}; capture refused")
            if sink.abort is not None:
                raise CycleAborted(f"{where}: {sink.abort}")
            if sink.done is not None:
                break
            if len(sink.payloads) > ack.n_frames:
                raise DriverError(f"{where}: more frames than the {ack.n_frames} announced")
            if sink.payloads:
                outside = beyond(sink.payloads[-1], ack)
                if outside is not None:
                    raise DriverError(f"{where}: {outside}; capture refused")
            wait_s = s.stall_timeout_s if sink.payloads else first_wait_s
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # that meets a frame's arrival, and a cancelled cycle must end.
                async with asyncio.timeout(wait_s):
                    await sink.wake.wait()
            except TimeoutError:
                raise DriverError(
                    f"{where}: no frame for {wait_s:g} s (board stalled) after "
                    f"{len(sink.payloads)} of {ack.n_frames} frames"
                ) from None
        done = sink.done
        if done.result is not CycleResult.COMPLETE:
            raise CycleAborted(
                f"{where}: board ended the cycle: {done.result.name.lower().replace('_', ' ')}"
            )
        if done.first_counter != ack.first_counter:
            raise DriverError(f"{where}: CYCLE_DONE names another capture than START_ACK")


def _decode(decode: Callable[[bytes], Any], frame: Frame, controller: str) -> Any:
    try:
        return decode(frame.payload)
    except FrameError as exc:
        raise DriverError(f"{controller}: {exc}") from None
