"""One cycle's encoder frames on the `can` driver, checked frame by frame as they arrive.

The reader thread of drivers/can/link.py hands every encoder frame of the running cycle to a
CaptureRecorder: the counter must be the next one (a lost, repeated or reordered frame fails
the capture at once, so the driver stops the motion then rather than after the cycle), the
stream must keep the cycle's pace, and the counts go straight into arrays. Pure: no I/O, no
threads of its own; BusLink calls it under its lock.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.capture.encoder import unwrap_counts
from agent.capture.model import Capture
from drivers.base import BacklashCycle
from drivers.can.dbc import ACCEPTED_STATES, CanProtocol, StatusFrame, decode_numbers


class CaptureRecorder:
    """The encoder frames of one cycle, checked frame by frame (called on the reader thread).

    Every frame must carry the next counter. The one exception, with `drop_duplicates`, is an
    exact copy of the frame just taken (CAN double reception: a receiver may take a frame its
    sender then sends again after an error in the last bit of its end of frame); the copy adds
    nothing and is dropped. The stream must also keep the cycle's pace: frames may come late
    and then in a burst, but sample k arriving more than `max_ahead_s` earlier than the pace of
    the frames before it (k / rate after them) is a controller streaming faster than the rate
    asked for, whose samples would be stamped with the wrong times.
    """

    def __init__(
        self,
        proto: CanProtocol,
        joint_index: int,
        samples: int,
        cycle_counter: int,
        *,
        rate_hz: float | None = None,
        max_ahead_s: float = math.inf,
        drop_duplicates: bool = True,
    ) -> None:
        self.proto = proto
        self.joint_index = joint_index
        self.samples = samples
        self.cycle_counter = cycle_counter
        self.modulus = proto.counter_modulus
        self.rate_hz = rate_hz
        self.max_ahead_s = max_ahead_s
        self.drop_duplicates = drop_duplicates
        self.duplicates = 0
        self._last_data: bytes | None = None
        self._latest_s = -math.inf  # latest arrival so far, less the sample's time
        self.motor_counts: npt.NDArray[np.int64] = np.zeros(samples, dtype=np.int64)
        self.link_counts: npt.NDArray[np.int64] = np.zeros(samples, dtype=np.int64)
        self.received = 0
        self.lost = 0
        self.acked = False
        self.ignored_before_ack = 0
        self.error: str | None = None
        self.first_frame_at: float | None = None
        self.last_frame_at: float | None = None

    @property
    def complete(self) -> bool:
        return self.error is None and self.received == self.samples

    @property
    def finished(self) -> bool:
        return self.error is not None or self.received == self.samples

    def on_status(self, status: StatusFrame) -> None:
        if status.cycle_counter == self.cycle_counter and status.cycle_state in ACCEPTED_STATES:
            self.acked = True

    def fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason

    def on_frame(self, data: bytes, now: float) -> bool:
        """Take one encoder frame; True when the capture just finished (complete or failed)."""
        if self.finished:
            return False
        if not self.acked:
            # Frames before our cycle was acknowledged belong to an earlier one still in flight.
            self.ignored_before_ack += 1
            return False
        want = int(self.proto.encoder.length)
        if len(data) != want:
            self.fail(
                f"malformed encoder frame after sample {self.received}: {len(data)} data bytes, "
                f"the DBC's {self.proto.encoder.name} has {want}"
            )
            return True
        v = decode_numbers(self.proto.encoder, data, scaling=False)
        if int(v["JointIndex"]) != self.joint_index:
            self.fail(
                f"encoder frame for joint index {int(v['JointIndex'])} at sample {self.received}, "
                f"expected joint index {self.joint_index}"
            )
            return True
        counter = int(v["Counter"])
        expected = self.received % self.modulus
        gap = (counter - expected) % self.modulus
        if gap:
            previous = (expected - 1) % self.modulus
            if data == self._last_data:
                if self.drop_duplicates:
                    self.duplicates += 1
                    return False
                self.fail(
                    f"encoder frame {previous} received twice at sample {self.received} "
                    "(duplicate frame; settings.duplicate_frames is abort)"
                )
            elif gap < self.modulus // 2:
                self.lost += gap
                self.fail(
                    f"{gap} encoder frame(s) lost: counter jumped from {previous} to {counter} "
                    f"at sample {self.received} (lost, or arriving out of order)"
                )
            else:
                self.fail(
                    f"encoder frame counter went back from {previous} to {counter} at sample "
                    f"{self.received} (a reordered or repeated frame)"
                )
            return True
        k = self.received
        # Lateness of this frame against the pace of the cycle; it can fall behind the latest
        # lateness by the transport's jitter, not by more.
        late_s = now - k / self.rate_hz if self.rate_hz else now
        if self._latest_s - late_s > self.max_ahead_s:
            self.fail(
                f"encoder frames arrive faster than the cycle's {self.rate_hz or 0:g} Hz: "
                f"sample {k} came {self._latest_s - late_s:.2f} s ahead of the stream's pace "
                "(flood)"
            )
            return True
        self._latest_s = max(self._latest_s, late_s)
        self._last_data = data
        self.motor_counts[k] = int(v["MotorCounts"])
        self.link_counts[k] = int(v["LinkCounts"])
        self.received = k + 1
        if self.first_frame_at is None:
            self.first_frame_at = now
        self.last_frame_at = now
        return self.received == self.samples

    def to_capture(
        self,
        cycle: BacklashCycle,
        machine: str,
        start_pos_rad: float | None,
        extra: dict[str, Any],
    ) -> Capture:
        """The complete capture, counts made radians (time: sample index / rate)."""
        bits = cycle.encoder_bits
        link_pos = unwrap_counts(self.link_counts, bits)
        if start_pos_rad is not None:
            # Single-turn link counts: put the first sample in the turn the joint stood in.
            turn = round((start_pos_rad - link_pos[0]) / (2.0 * math.pi))
            link_pos = link_pos + turn * 2.0 * math.pi
        return Capture(
            time_s=np.arange(self.samples, dtype=np.float64) / cycle.sample_rate_hz,
            channels={
                "motor_counts": self.motor_counts.astype(np.float64),
                "motor_pos_rad": unwrap_counts(self.motor_counts, bits),
                "link_counts": self.link_counts.astype(np.float64),
                "link_pos_rad": link_pos,
            },
            meta=cycle.capture_meta(
                machine,
                {
                    **extra,
                    "frames": self.received,
                    "lost_frames": self.lost,
                    "duplicate_frames_dropped": self.duplicates,
                },
                encoder_bits=bits,
            ),
            source=f"can:{machine}/{cycle.joint}",
        )
