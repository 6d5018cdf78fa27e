"""One cycle's sample frames -> a Capture: counter checks, lost frames, counts to radians.

Pure (no I/O): drivers/serial/driver.py collects the SAMPLE payloads of a cycle and hands them here
with the board's CYCLE_DONE. The capture is the `frames_sent` consecutive counters from
`first_counter`; a missing counter is a lost frame. Lost frames refuse the capture, unless the
settings allow interpolation (then short interior runs are filled and lost frames at either end
shorten the capture). Raw counts become radians here, through agent.capture.encoder.unwrap_counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.capture.encoder import counts_per_turn, unwrap_counts
from agent.capture.model import Capture
from agent.errors import DriverError
from drivers.base import BacklashCycle
from drivers.serial.frames import CycleDone, FrameError, Layout, SampleBlock, decode_samples
from drivers.serial.settings import SerialSettings

__all__ = ["assemble_capture", "fill_gaps"]

Int64s = npt.NDArray[np.int64]


def assemble_capture(
    payloads: Sequence[bytes],
    done: CycleDone,
    cycle: BacklashCycle,
    *,
    layout: Layout,
    channels: tuple[int, int | None],
    settings: SerialSettings,
    machine: str,
    link_stats: Mapping[str, int],
    duplicates_dropped: int = 0,
) -> Capture:
    """The capture of one cycle; DriverError says what was lost or inconsistent."""
    where = f"{machine}/{cycle.joint}"
    try:
        block = decode_samples(payloads, layout)
    except FrameError as exc:
        raise DriverError(f"{where}: {exc}") from None
    index = (block.counter - done.first_counter) % (1 << 32)
    sent = done.frames_sent
    if len(index) and (np.any(np.diff(index) <= 0) or index[-1] >= sent):
        raise DriverError(f"{where}: frame counters out of order or beyond the {sent} sent")
    lost = sent - len(index)
    why = (
        f"{lost} of {sent} frames lost (on this link so far: bad CRC {link_stats['bad_crc']}, "
        f"bad header {link_stats['bad_header']}, garbage bytes {link_stats['garbage_bytes']})"
    )
    if lost and settings.lost_frames == "refuse":
        raise DriverError(f"{where}: {why}; capture refused (settings.lost_frames: refuse)")
    if lost > settings.max_interpolated_frames:
        raise DriverError(
            f"{where}: {why}; more than max_interpolated_frames "
            f"({settings.max_interpolated_frames})"
        )
    if len(index) < 2:
        raise DriverError(f"{where}: {len(index)} frames received, a capture needs two")
    _check_rate(block, index, cycle.sample_rate_hz, settings.rate_tolerance, where)

    motor_ch, link_ch = channels
    bits = cycle.encoder_bits
    cpt = counts_per_turn(bits)
    step = cycle.motor_speed_rad_s / cycle.sample_rate_hz * cpt / (2.0 * math.pi)
    gap = settings.max_gap_frames
    out: dict[str, npt.NDArray[np.float64]] = {}
    try:
        full, motor = fill_gaps(index, block.counts[:, motor_ch], step, cpt, gap)
        out["motor_counts"] = motor.astype(np.float64)
        out["motor_pos_rad"] = unwrap_counts(motor, bits)
        if link_ch is not None:
            _, link = fill_gaps(index, block.counts[:, link_ch], step / cycle.gear_ratio, cpt, gap)
            # An absolute link encoder: start in [-pi, pi), the joint's own range.
            turn = 2.0 * math.pi if link[0] >= cpt // 2 else 0.0
            out["link_counts"] = link.astype(np.float64)
            out["link_pos_rad"] = unwrap_counts(link, bits) - turn
    except ValueError as exc:  # a count beyond the joint's encoder bits, a gap too long
        raise DriverError(f"{where}: {exc}") from None
    extra: dict[str, Any] = {
        "driver": "serial",
        "port": settings.port,
        "frames_sent": sent,
        "lost_frames": lost,
        "interpolated_frames": int(full.size - index.size),
        "duplicate_frames_dropped": duplicates_dropped,
        "first_counter": done.first_counter,
        "first_timestamp_us": int(block.timestamp_us[0]),
        "link": dict(link_stats),
    }
    return Capture(
        time_s=full / cycle.sample_rate_hz,
        channels=out,
        meta=cycle.capture_meta(machine, extra, encoder_bits=bits),
        source=f"serial:{where}",
    )


def _check_rate(block: SampleBlock, index: Int64s, rate_hz: float, tol: float, where: str) -> None:
    """The board's clock must agree with the rate asked for: the time base is counter / rate."""
    span_us = int(block.timestamp_us[-1] - block.timestamp_us[0]) % (1 << 32)
    if span_us <= 0:
        raise DriverError(f"{where}: board timestamps do not advance")
    measured = float(index[-1] - index[0]) / (span_us * 1e-6)
    # Timestamps are whole microseconds: their rounding comes on top of the tolerance.
    slack = tol + 2.0 / span_us
    if abs(measured / rate_hz - 1.0) > slack:
        raise DriverError(
            f"{where}: board sampled at {measured:.3f} Hz by its clock, {rate_hz:g} Hz was asked"
        )


def fill_gaps(
    index: Int64s, counts: Int64s, step_counts: float, cpt: int, max_gap: int
) -> tuple[Int64s, Int64s]:
    """Fill missing sample indices by linear interpolation of single-turn counts.

    A gap's advance is taken modulo one turn around the advance the commanded speed predicts
    (`step_counts` per sample), so a gap over more than half a turn of motion is still followed.
    Returns (every index from the first to the last received, the counts at each).
    ValueError when a run of missing indices is longer than max_gap.
    """
    gaps = np.diff(index) - 1
    if not np.any(gaps):
        return index, counts
    if int(gaps.max()) > max_gap:
        k = int(np.argmax(gaps))
        raise ValueError(
            f"{int(gaps[k])} consecutive frames lost after frame {int(index[k])}, more than "
            f"max_gap_frames ({max_gap}) may be filled"
        )
    first = int(index[0])
    full = np.arange(first, int(index[-1]) + 1, dtype=np.int64)
    out = np.empty(full.size, dtype=np.int64)
    out[index - first] = counts
    half = cpt // 2
    for g in np.flatnonzero(gaps):
        a, b = int(index[g]), int(index[g + 1])
        ca, cb = int(counts[g]), int(counts[g + 1])
        predicted = round(step_counts * (b - a))
        advance = predicted + (cb - ca - predicted + half) % cpt - half
        for j in range(1, b - a):
            out[a + j - first] = (ca + round(advance * j / (b - a))) % cpt
    return full, out
