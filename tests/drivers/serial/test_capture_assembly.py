"""From the serial encoder board's sample frames to a capture: assembly (lost frames refused or
interpolated, counters and the board's clock checked, gaps filled with the speed) and the
frame-by-frame checks of a running capture (drivers/serial/sink.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.capture.encoder import angle_to_counts, counts_per_turn, unwrap_counts
from agent.errors import DriverError
from drivers.base import BacklashCycle
from drivers.serial.capture import assemble_capture, fill_gaps
from drivers.serial.frames import SAMPLE_HEADER, CycleDone, CycleResult, Layout, encode_samples
from drivers.serial.settings import SerialSettings
from drivers.serial.sink import CaptureSink

# Two channels (motor, link) of 19-bit counts, the layout tests/drivers/serial/test_frames.py uses.
LAYOUT = Layout(channels=2, count_bits=19)


# --- capture assembly -----------------------------------------------------------------------------

RATE_HZ = 500.0
SPEED_RAD_S = 2 * math.pi * 100.0
GEAR = 40.0


def cycle(bits: int = 19) -> BacklashCycle:
    return BacklashCycle(
        controller="board",
        joint="j1",
        joint_index=1,
        motor_speed_rad_s=SPEED_RAD_S,
        gear_ratio=GEAR,
        duration_s=0.2,
        settle_s=0.0,
        sample_rate_hz=RATE_HZ,
        encoder_bits=bits,
        test_pose_rad=0.0,
    )


def truth(n: int, bits: int = 19) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(n) / RATE_HZ
    motor = angle_to_counts(0.3 + SPEED_RAD_S * t, bits)
    link = angle_to_counts(-0.001 + SPEED_RAD_S / GEAR * t, bits)
    return motor, link


def payloads(n: int, keep: np.ndarray, first: int = 10) -> list[bytes]:
    motor, link = truth(n)
    counter = first + np.arange(n)
    stamps = np.rint(np.arange(n) / RATE_HZ * 1e6).astype(np.int64) + 99
    frames = encode_samples(LAYOUT, counter, stamps, 0, np.stack([motor, link], axis=1))
    return [f[4:-2] for f, k in zip(frames, keep, strict=True) if k]


def assemble(p: list[bytes], sent: int, **settings_kw: object):
    return assemble_capture(
        p,
        CycleDone(1, CycleResult.COMPLETE, 10, sent),
        cycle(),
        layout=LAYOUT,
        channels=(0, 1),
        settings=SerialSettings(port="/dev/null", **settings_kw),  # type: ignore[arg-type]
        machine="board",
        link_stats={"bad_crc": 1, "bad_header": 0, "garbage_bytes": 3},
    )


def test_assemble_complete_capture_is_exact() -> None:
    n = 101
    cap = assemble(payloads(n, np.ones(n, bool)), n)
    motor, _ = truth(n)
    np.testing.assert_array_equal(cap.channel("motor_counts"), motor)
    np.testing.assert_array_equal(cap.channel("motor_pos_rad"), unwrap_counts(motor, 19))
    np.testing.assert_array_equal(cap.time_s, np.arange(n) / RATE_HZ)
    # The link starts in [-pi, pi): -0.001 rad, not 2 pi - 0.001.
    assert cap.channel("link_pos_rad")[0] == pytest.approx(-0.001, abs=2 * math.pi / 2**19)
    assert cap.meta.extra["lost_frames"] == 0


def test_assemble_refuses_lost_frames_by_default() -> None:
    keep = np.ones(101, bool)
    keep[[5, 50, 51]] = False
    with pytest.raises(DriverError, match=r"3 of 101 frames lost .*bad CRC 1.*refused"):
        assemble(payloads(101, keep), 101)


def test_assemble_interpolates_when_allowed() -> None:
    keep = np.ones(101, bool)
    keep[[0, 5, 50, 51, 100]] = False  # the ends shorten the capture, the middle is filled
    cap = assemble(payloads(101, keep), 101, lost_frames="interpolate")
    motor, _ = truth(101)
    assert len(cap) == 99
    assert cap.time_s[0] == pytest.approx(1 / RATE_HZ)
    ticks = np.rint(cap.channel("motor_pos_rad") / (2 * math.pi / 2**19)).astype(np.int64)
    exact = np.rint(unwrap_counts(motor[1:100], 19) / (2 * math.pi / 2**19)).astype(np.int64)
    assert np.max(np.abs(ticks - exact - (ticks[0] - exact[0]))) <= 1
    assert cap.meta.extra["interpolated_frames"] == 3
    assert cap.meta.extra["lost_frames"] == 5


def test_assemble_interpolation_limits() -> None:
    keep = np.ones(101, bool)
    keep[10:13] = False
    with pytest.raises(DriverError, match="3 consecutive frames lost"):
        assemble(payloads(101, keep), 101, lost_frames="interpolate")
    keep = np.ones(101, bool)
    keep[10:80:2] = False
    with pytest.raises(DriverError, match="more than max_interpolated_frames"):
        assemble(payloads(101, keep), 101, lost_frames="interpolate")


def test_assemble_checks_counters_and_clock() -> None:
    p = payloads(20, np.ones(20, bool))
    with pytest.raises(DriverError, match="out of order"):
        assemble([p[1], p[0], *p[2:]], 20)
    with pytest.raises(DriverError, match="beyond the 19 sent"):
        assemble(p, 19)
    with pytest.raises(
        DriverError, match=r"board sampled at 500\.000 Hz by its clock, 250 Hz was asked"
    ):
        assemble_capture(
            p,
            CycleDone(1, CycleResult.COMPLETE, 10, 20),
            BacklashCycle(**{**cycle().__dict__, "sample_rate_hz": 250.0}),
            layout=LAYOUT,
            channels=(0, None),
            settings=SerialSettings(port="/dev/null"),
            machine="board",
            link_stats={"bad_crc": 0, "bad_header": 0, "garbage_bytes": 0},
        )


def test_fill_gaps_follows_more_than_half_a_turn_with_the_speed() -> None:
    bits = 12
    cpt = counts_per_turn(bits)
    step = 0.3 * cpt  # 0.3 turn per sample: a 2-sample gap spans 0.9 turn
    index = np.array([0, 1, 4, 5])
    angle = 2 * math.pi * 0.3 * np.arange(6)
    counts = angle_to_counts(angle, bits)
    full, filled = fill_gaps(index, counts[index], step, cpt, max_gap=2)
    np.testing.assert_array_equal(full, np.arange(6))
    assert np.all(np.abs(((filled - counts) + cpt // 2) % cpt - cpt // 2) <= 1)
    with pytest.raises(ValueError, match="2 consecutive frames lost after frame 1"):
        fill_gaps(index, counts[index], step, cpt, max_gap=1)


# --- the frame-by-frame checks of a running capture (drivers/serial/sink.py) ---------------------

SINK_RATE_HZ = 500.0
PERIOD_US = 2000


def _sink_frames(moves: list[tuple[int, int]], start: int) -> list[bytes]:
    """SAMPLE payloads whose counter and timestamp move by (counter step, time step in periods
    x 4) from one to the next; the counts follow the counter, so a repeated counter repeats
    the whole payload unless its time differs."""
    counter, stamp = start, 1_000_000
    rows = []
    for dc, dt4 in moves:
        counter = (counter + dc) % 2**32
        stamp = (stamp + dt4 * PERIOD_US // 4) % 2**32
        rows.append((counter, stamp))
    counters = [c for c, _ in rows]
    stamps = [t for _, t in rows]
    counts = [[c % 2**19, 0] for c in counters]
    return [f[4:-2] for f in encode_samples(LAYOUT, counters, stamps, 0, counts)]


@settings(max_examples=300, deadline=None)
@given(
    moves=st.lists(
        st.one_of(
            st.just((1, 4)),  # the next sample on time
            st.tuples(st.integers(-3, 3), st.integers(-2, 14)),  # anything nearby
        ),
        min_size=1,
        max_size=40,
    ),
    start=st.sampled_from([0, 1000, 2**32 - 5]),  # the counter wraps in some cases
    drop_identical=st.booleans(),
)
def test_sink_accepts_only_a_clean_stream_and_names_the_first_bad_sample(
    moves: list[tuple[int, int]], start: int, drop_identical: bool
) -> None:
    sink = CaptureSink(1, SINK_RATE_HZ, "drop_identical" if drop_identical else "refuse")
    payloads = _sink_frames(moves, start)
    bad_at = None
    for k, p in enumerate(payloads):
        sink.add(p)
        if sink.bad is not None and bad_at is None:
            bad_at = k
    accepted = [SAMPLE_HEADER.unpack_from(p)[:2] for p in sink.payloads]
    # Whatever was accepted is a clean stream: counters move forward, the board clock agrees.
    for (c0, t0), (c1, t1) in itertools.pairwise(accepted):
        step = (c1 - c0) % 2**32
        assert 1 <= step < 2**31
        span = (t1 - t0) % 2**32
        assert abs(span - step * PERIOD_US) <= 0.25 * step * PERIOD_US + 2.0
    if bad_at is None:
        # Nothing refused: every frame is in, but for identical copies dropped as allowed.
        assert len(sink.payloads) + sink.duplicates_dropped == len(payloads)
        assert drop_identical or sink.duplicates_dropped == 0
    else:
        # Refused at the first bad frame, which the message names; nothing after it joins.
        counter = SAMPLE_HEADER.unpack_from(payloads[bad_at])[0]
        assert sink.bad is not None and sink.bad.startswith(f"sample {counter} ")
        assert all(p in payloads[:bad_at] for p in sink.payloads)
        assert len(sink.payloads) + sink.duplicates_dropped == bad_at


def test_sink_messages_name_what_was_wrong() -> None:
    cases = [
        ([(1, 4), (1, 4), (0, 0)], "sample 1 repeated (an identical copy)"),
        ([(1, 4), (1, 4), (0, 4)], "sample 1 repeated (with other content)"),
        ([(1, 4), (2, 8), (-1, -4)], "sample 1 after 2 (out of order)"),
        ([(1, 4), (1, 1)], "sample 1 stamped 500 us after sample 0, 2000 us expected"),
        ([(1, 4), (1, 0)], "sample 1 stamped 0 us after sample 0"),
    ]
    for moves, message in cases:
        sink = CaptureSink(1, SINK_RATE_HZ, "refuse")
        for p in _sink_frames(moves, -1):  # counters from 0
            sink.add(p)
        assert sink.bad is not None and sink.bad.startswith(message), (moves, sink.bad)
