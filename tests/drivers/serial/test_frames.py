"""Wire format of the serial encoder board: CRC, frames, resynchronisation, capture assembly.

The golden byte strings below are written out by hand from the table in drivers/serial/frames.py
so the format cannot drift with the code that produces it.
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
from drivers.serial.frames import (
    AGENT_TO_BOARD,
    BOARD_TO_AGENT,
    SAMPLE_HEADER,
    SYNC,
    ChannelSide,
    CycleDone,
    CycleResult,
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
    crc16_ccitt_false,
    crc16_fast,
    decode_samples,
    encode_frame,
    encode_query,
    encode_samples,
    length_rule,
)
from drivers.serial.settings import SerialSettings
from drivers.serial.sink import CaptureSink

LAYOUT = Layout(channels=2, count_bits=19)


def agent_decoder(layout: Layout = LAYOUT) -> FrameDecoder:
    return FrameDecoder(length_rule(layout, BOARD_TO_AGENT))


# --- CRC ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "crc"),
    [  # published CRC-16/CCITT-FALSE values (the CRC catalogue's check, and the classic table)
        (b"123456789", 0x29B1),
        (b"", 0xFFFF),
        (b"A", 0xB915),
        (b"A" * 256, 0xEA0B),
    ],
)
def test_crc16_ccitt_false_published_values(data: bytes, crc: int) -> None:
    assert crc16_ccitt_false(data) == crc
    assert crc16_fast(data) == crc


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.binary(max_size=300))
def test_crc16_table_and_fast_agree_and_residue_is_zero(data: bytes) -> None:
    crc = crc16_ccitt_false(data)
    assert crc16_fast(data) == crc
    assert crc16_ccitt_false(data + crc.to_bytes(2, "big")) == 0


# --- frames ---------------------------------------------------------------------------------------


def test_golden_status_query() -> None:
    assert encode_query(FrameType.STATUS_QUERY, 5) == bytes.fromhex("a55a 10 01 05 ec6b")


def test_golden_heartbeat_and_its_place_in_the_protocol() -> None:
    # Agent to board only, tag-only payload, never answered (protocol 2's liveness watchdog).
    assert encode_query(FrameType.HEARTBEAT, 5) == bytes.fromhex("a55a 14 01 05 30ab")
    assert FrameType.HEARTBEAT in AGENT_TO_BOARD and FrameType.HEARTBEAT not in BOARD_TO_AGENT
    assert agent_decoder().feed(encode_query(FrameType.HEARTBEAT, 5)) == []


def test_golden_sample_frame() -> None:
    frame = encode_samples(LAYOUT, [1], [2], [3], [[0x12345, 0x7FFFF]])[0]
    expected = bytes.fromhex(
        "a55a 01 0f"  # sync, SAMPLE, 15 payload bytes
        "01000000 02000000 03"  # counter 1, timestamp 2 us, status 3
        "452301 ffff07"  # 0x12345 and 0x7FFFF, three little-endian bytes each
        "7d61"  # CRC-16/CCITT-FALSE, big-endian
    )
    assert frame == expected
    assert agent_decoder().feed(frame)[0].payload == expected[4:-2]


@pytest.mark.parametrize("bits", [12, 16, 17, 19, 24, 25, 32])
def test_samples_round_trip_every_width(bits: int) -> None:
    layout = Layout(channels=5, count_bits=bits)
    rng = np.random.default_rng(bits)
    counts = rng.integers(0, 1 << bits, (40, 5))
    counter = (2**32 - 20) + np.arange(40)  # wraps past 2**32
    frames = encode_samples(layout, counter, counter * 3, StatusBits.MOVING, counts)
    decoded = agent_decoder(layout).feed(b"".join(frames))
    block = decode_samples([f.payload for f in decoded], layout)
    np.testing.assert_array_equal(block.counts, counts)
    np.testing.assert_array_equal(block.counter, counter % 2**32)
    np.testing.assert_array_equal(block.timestamp_us, (counter * 3) % 2**32)
    assert set(block.status.tolist()) == {int(StatusBits.MOVING)}


def test_decode_samples_rejects_count_beyond_bits() -> None:
    wide = encode_samples(Layout(2, 24), [7], [0], [0], [[5, 1 << 19]])[0]
    with pytest.raises(FrameError, match=r"sample frame 0 \(counter 7\): channel 1 .* 19 bits"):
        decode_samples([wide[4:-2]], Layout(2, 19))


def test_layout_limits() -> None:
    assert Layout(82, 19).sample_frame_bytes == 4 + 9 + 82 * 3 + 2
    with pytest.raises(ValueError, match=r"channels must be 1\.\.82"):
        Layout(83, 19)
    with pytest.raises(ValueError, match=r"count_bits must be 12\.\.32"):
        Layout(2, 33)


def test_messages_round_trip() -> None:
    layout = Layout(4, 19)
    messages = [
        StartCommand(9, 3, -628.3185307179586, 0.5, 4.8, 500.0, 0.25, 500),
        StartAck(9, StartResult.NOT_STOPPED, 2**32 - 1, 2401),
        StopAck(10, 1, 77),
        CycleDone(9, CycleResult.LEFT_STOPPED, 12, 2401),
        StatusReply(11, StatusBits.PERMISSION | StatusBits.MOVING, 80, 513, 123456, (-1, 0, 7)),
        InfoReply(
            12,
            1,
            layout,
            (
                (1, ChannelSide.MOTOR),
                (1, ChannelSide.LINK),
                (2, ChannelSide.MOTOR),
                (0, ChannelSide.UNUSED),
            ),
        ),
    ]
    both = frozenset(AGENT_TO_BOARD | BOARD_TO_AGENT)
    decoder = FrameDecoder(length_rule(layout, both))
    frames = decoder.feed(b"".join(m.encode() for m in messages))
    assert [type(m).decode(f.payload) for m, f in zip(messages, frames, strict=True)] == messages


def test_bad_enum_value_is_a_frame_error() -> None:
    payload = bytes([1, 9]) + bytes(8)  # START_ACK with result 9
    with pytest.raises(FrameError, match=r"START_ACK result: 9 is not one of"):
        StartAck.decode(payload)
    with pytest.raises(FrameError, match="STATUS announces 3 joints"):
        StatusReply.decode(bytes([1, 0, 100, 0, 0, 0, 0, 0, 0, 3]) + bytes(4))


# --- resynchronisation ----------------------------------------------------------------------------


def sample_frames(n: int, first: int = 0) -> list[bytes]:
    counts = np.arange(2 * n).reshape(n, 2) * 1000 % (1 << 19)
    counter = first + np.arange(n)
    return encode_samples(LAYOUT, counter, counter * 2000, 0, counts)


def test_frame_fed_one_byte_at_a_time() -> None:
    frames = sample_frames(3)
    dec = agent_decoder()
    got = [f for b in b"".join(frames) for f in dec.feed(bytes([b]))]
    assert [f.payload for f in got] == [f[4:-2] for f in frames]
    assert dec.stats.garbage_bytes == 0
    assert dec.pending_bytes == 0


def test_truncated_frame_then_good_frames() -> None:
    a, b, c = sample_frames(3)
    dec = agent_decoder()
    got = dec.feed(a[:10] + b + c)
    assert [f.payload for f in got] == [b[4:-2], c[4:-2]]
    assert dec.stats.garbage_bytes == 10
    assert dec.stats.bad_crc == 1


def test_bad_crc_frame_is_skipped_and_counted() -> None:
    a, b, c = sample_frames(3)
    broken = b[:-1] + bytes([b[-1] ^ 1])
    dec = agent_decoder()
    assert [f.payload for f in dec.feed(a + broken + c)] == [a[4:-2], c[4:-2]]
    assert dec.stats.bad_crc == 1
    assert dec.stats.garbage_bytes == len(b)


def test_fake_header_in_garbage_does_not_swallow_the_next_frame() -> None:
    (a,) = sample_frames(1)
    fake = SYNC + bytes([FrameType.SAMPLE, LAYOUT.sample_payload_bytes]) + b"\x00\x01"
    dec = agent_decoder()
    assert dec.feed(fake) == []  # waits: it could still be a frame
    assert [f.payload for f in dec.feed(a)] == [a[4:-2]]
    assert dec.stats.garbage_bytes == len(fake)


def test_wrong_direction_and_wrong_length_are_bad_headers() -> None:
    dec = agent_decoder()
    query = encode_query(FrameType.STATUS_QUERY, 1)  # the agent never receives queries
    wrong_len = encode_frame(FrameType.SAMPLE, bytes(LAYOUT.sample_payload_bytes + 1))
    assert dec.feed(query + wrong_len) == []
    assert dec.stats.bad_header == 2


def test_sync_split_across_reads() -> None:
    (a,) = sample_frames(1)
    dec = agent_decoder()
    assert dec.feed(b"\x00\x00" + a[:1]) == []
    assert dec.pending_bytes == 1  # the A5 is kept: it may start the sync word
    assert len(dec.feed(a[1:])) == 1
    assert dec.stats.garbage_bytes == 2


@st.composite
def garbage_piece(draw: st.DrawFn, frame: bytes) -> bytes:
    """Something that is not an intact frame: noise, a cut frame, a frame with one bit flipped."""
    kind = draw(st.sampled_from(["noise", "sync_noise", "truncated", "flipped"]))
    if kind == "noise":
        return draw(st.binary(min_size=1, max_size=40))
    if kind == "sync_noise":  # noise made of sync words and plausible headers
        parts = draw(
            st.lists(
                st.sampled_from([SYNC, SYNC[:1], bytes([1, LAYOUT.sample_payload_bytes]), b"\x00"]),
                min_size=1,
                max_size=8,
            )
        )
        return b"".join(parts)
    if kind == "truncated":
        return frame[: draw(st.integers(1, len(frame) - 1))]
    bit = draw(st.integers(0, 8 * len(frame) - 1))
    flipped = bytearray(frame)
    flipped[bit // 8] ^= 1 << (bit % 8)
    return bytes(flipped)


@st.composite
def interleaved_stream(draw: st.DrawFn) -> tuple[list[bytes], list[bool], bytes, list[int]]:
    n = draw(st.integers(1, 25))
    frames = sample_frames(n, first=draw(st.integers(0, 2**32 - 1)))
    intact: list[bool] = []
    pieces: list[bytes] = []
    for frame in frames:
        if draw(st.booleans()):  # garbage before the frame
            pieces.append(draw(garbage_piece(frame)))
        fate = draw(st.sampled_from(["intact", "intact", "intact", "corrupt", "dropped"]))
        intact.append(fate == "intact")
        if fate == "intact":
            pieces.append(frame)
        elif fate == "corrupt":
            pieces.append(draw(garbage_piece(frame)))
    stream = b"".join(pieces)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    return frames, intact, stream, cuts


@settings(max_examples=200, deadline=None, derandomize=True)
@given(interleaved_stream())
def test_property_every_intact_frame_once_and_the_rest_counted(
    case: tuple[list[bytes], list[bool], bytes, list[int]],
) -> None:
    frames, intact, stream, cuts = case
    dec = agent_decoder()
    got = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += dec.feed(stream[a:b])
    expected = [f[4:-2] for f, ok in zip(frames, intact, strict=True) if ok]
    assert [f.payload for f in got] == expected
    # Every byte is either in a good frame, counted as garbage, or held as a possible start.
    good_bytes = sum(len(f) for f, ok in zip(frames, intact, strict=True) if ok)
    assert dec.stats.garbage_bytes + dec.pending_bytes == len(stream) - good_bytes
    # The frame counter tells exactly how many frames were lost in between.
    if got:
        block = decode_samples([f.payload for f in got], LAYOUT)
        first = int(decode_samples([frames[0][4:-2]], LAYOUT).counter[0])
        index = (block.counter - first) % 2**32
        present = np.zeros(len(frames), dtype=bool)
        present[index] = True
        assert (~present).sum() == intact.count(False)


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
