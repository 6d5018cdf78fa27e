"""One cycle's sample frames as they arrive, checked frame by frame (drivers/serial/driver.py).

The serial driver hands every SAMPLE payload of the running cycle to a CaptureSink. Each frame
is compared with the one accepted before it: a repeated counter, a counter going back, or a
board timestamp far from counter x period is named at once ("sample 1043 repeated", "sample 1044
after 1046 (out of order)"), so the driver stops the motion then rather than finding the damage
after the cycle. Lost frames (a counter jump) pass here; drivers/serial/capture.py counts them
against the settings at the end. Pure: no I/O, no event loop work beyond an asyncio.Event.
"""

from __future__ import annotations

import asyncio

from agent.errors import DriverError
from drivers.base import ControllerMode
from drivers.serial.frames import SAMPLE_HEADER, CycleDone, StartAck, StatusBits

__all__ = ["CaptureSink", "beyond", "mode_of"]

_LEAVES_TEST = StatusBits.FAULT | StatusBits.PRODUCTION | StatusBits.MANUAL
_COUNTER_MOD = 1 << 32  # sample counters and board timestamps are u32 and wrap
# Two consecutive frames' board timestamps may differ from the period by this fraction; a
# sustained rate error smaller than that is caught over the whole capture (_check_rate).
_STEP_TOLERANCE = 0.25


class CaptureSink:
    """Collects one cycle's sample frames as they arrive; run_cycle sleeps on `wake`.

    Each frame is checked against the one before it as it comes, so a repeated, out-of-order
    or too-early sample stops the motion at once instead of being found after the cycle.
    """

    def __init__(self, tag: int, sample_rate_hz: float, duplicates: str) -> None:
        self.tag = tag
        self.payloads: list[bytes] = []
        self.wake = asyncio.Event()
        self.done: CycleDone | None = None
        self.abort: str | None = None
        self.bad: str | None = None  # what was wrong with the stream: the capture is refused
        self.error: DriverError | None = None
        self.period_us = 1e6 / sample_rate_hz
        self.drop_identical = duplicates == "drop_identical"
        self.duplicates_dropped = 0
        self._last: tuple[int, int, bytes] | None = None  # counter, timestamp_us, payload

    def add(self, payload: bytes) -> None:
        status = StatusBits(payload[8])
        if status & _LEAVES_TEST and self.abort is None:
            self.abort = f"controller left the test cycle ({mode_of(status).value} mode)"
        if self.bad is None:
            counter, stamp_us, _ = SAMPLE_HEADER.unpack_from(payload)
            if self._out_of_place(counter, stamp_us, payload):
                self.wake.set()
                return
            self._last = (counter, stamp_us, payload)
            self.payloads.append(payload)
        self.wake.set()

    def _out_of_place(self, counter: int, stamp_us: int, payload: bytes) -> bool:
        """True when the frame must not join the capture (and self.bad says why, unless it was
        an identical copy dropped as the settings allow)."""
        if self._last is None:
            return False
        last, last_us, last_payload = self._last
        step = (counter - last) % _COUNTER_MOD
        if step == 0:
            if payload == last_payload and self.drop_identical:
                self.duplicates_dropped += 1
                return True
            same = "an identical copy" if payload == last_payload else "with other content"
            self.bad = f"sample {counter} repeated ({same})"
            return True
        if step >= _COUNTER_MOD // 2:
            self.bad = f"sample {counter} after {last} (out of order)"
            return True
        # The board clock between the two must match the counters: samples far closer together
        # than the period are a flood (a board sampling faster than asked, or a burst of made-up
        # frames); far apart with consecutive counters, a clock that stood still.
        span_us = (stamp_us - last_us) % _COUNTER_MOD
        expected_us = step * self.period_us
        if abs(span_us - expected_us) > _STEP_TOLERANCE * expected_us + 2.0:
            self.bad = (
                f"sample {counter} stamped {span_us} us after sample {last}, {expected_us:.0f} us "
                f"expected at the requested rate (board flooding or its clock jumped)"
            )
            return True
        return False

    def finish(self, done: CycleDone) -> None:
        self.done = done
        self.wake.set()

    def fail(self, error: DriverError) -> None:
        self.error = error
        self.wake.set()


def mode_of(status: StatusBits) -> ControllerMode:
    if status & StatusBits.FAULT:
        return ControllerMode.FAULT
    if status & StatusBits.MANUAL:
        return ControllerMode.MANUAL
    if status & StatusBits.PRODUCTION:
        return ControllerMode.PRODUCTION
    if status & StatusBits.MOVING:
        return ControllerMode.TEST_CYCLE
    return ControllerMode.STOPPED


def beyond(payload: bytes, ack: StartAck) -> str | None:
    """Why the newest frame lies outside the capture START_ACK announced, or None."""
    counter = SAMPLE_HEADER.unpack_from(payload)[0]
    index = (counter - ack.first_counter) % _COUNTER_MOD
    if index < ack.n_frames:
        return None
    return (
        f"sample {counter} is beyond the {ack.n_frames} frames announced from "
        f"{ack.first_counter} (board sending more samples than the cycle has)"
    )
