"""Wire format of the serial encoder board: CRC, frames, messages, resynchronisation.

The golden byte strings below are written out by hand from the table in drivers/serial/frames.py
so the format cannot drift with the code that produces it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drivers.serial.frames import (
    AGENT_TO_BOARD,
    BOARD_TO_AGENT,
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
