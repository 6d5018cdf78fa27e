"""Encoder unwrap: exact recovery of multi-turn motion from single-turn counts, 12 to 32 bits.

Recovered angles are compared in whole counts (integers), never as floats with a tolerance:
the unwrap is integer arithmetic and must be exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.capture.encoder import (
    MAX_BITS,
    MIN_BITS,
    angle_to_counts,
    counts_per_turn,
    unwrap_counts,
)

ALL_BITS = list(range(12, 33))


def ticks_of(angle_rad: np.ndarray, bits: int) -> np.ndarray:
    """Angle (as unwrap_counts makes it) back to whole counts; exact for |ticks| < 2**51."""
    cpt = counts_per_turn(bits)
    return np.rint(np.asarray(angle_rad) * (cpt / (2.0 * math.pi))).astype(np.int64)


def expected_ticks(truth_ticks: np.ndarray, bits: int) -> np.ndarray:
    """The unwrap's contract: continuous counts, with the first sample's turn taken as turn 0."""
    cpt = counts_per_turn(bits)
    return truth_ticks - (truth_ticks[0] // cpt) * cpt


def back_and_forth(bits: int, n_per_leg: int, seed: int) -> np.ndarray:
    """True counts: forward at the top speed, back at the top speed, then a random walk."""
    cpt = counts_per_turn(bits)
    top = cpt // 2 - 1  # just under half a turn per sample
    rng = np.random.default_rng(seed)
    steps = np.concatenate(
        [
            np.full(n_per_leg, top),
            np.full(2 * n_per_leg, -top),
            rng.integers(-top, top, n_per_leg, endpoint=True),
            np.full(n_per_leg, top),
        ]
    )
    start = int(rng.integers(-5 * cpt, 5 * cpt))  # any turn, any phase within it
    return start + np.concatenate([[0], np.cumsum(steps)])


@pytest.mark.parametrize("bits", ALL_BITS)
def test_unwrap_follows_wraps_both_ways_at_top_speed(bits: int) -> None:
    cpt = counts_per_turn(bits)
    truth = back_and_forth(bits, n_per_leg=200, seed=bits)
    counts = np.mod(truth, cpt)
    # The motion really wraps many times in both directions.
    turns = np.diff(truth // cpt)
    assert (turns > 0).sum() >= 90 and (turns < 0).sum() >= 90
    angle = unwrap_counts(counts, bits)
    np.testing.assert_array_equal(ticks_of(angle, bits), expected_ticks(truth, bits))
    # And the float angle is exactly tick * (2 pi / cpt): nothing accumulates along the way.
    step_rad = 2.0 * math.pi / cpt
    np.testing.assert_array_equal(angle, expected_ticks(truth, bits).astype(float) * step_rad)


@pytest.mark.parametrize("bits", ALL_BITS)
def test_unwrap_of_quantised_continuous_motion(bits: int) -> None:
    """Continuous angles through angle_to_counts, compared with their floor-quantised truth."""
    cpt = counts_per_turn(bits)
    step_rad = 2.0 * math.pi / cpt
    rng = np.random.default_rng(1000 + bits)
    top = (cpt // 2 - 1) * step_rad  # the largest step that stays under half a turn in counts
    n = 600
    speed = np.concatenate([np.full(n // 3, top), np.full(n // 3, -top), np.zeros(n // 3)])
    speed[2 * n // 3 :] = rng.uniform(-top, top, n // 3)
    theta = rng.uniform(-20.0, 20.0) + np.concatenate([[0.0], np.cumsum(speed)])
    truth = np.floor(theta / step_rad).astype(np.int64)
    # Rounding in the cumulative sum could push one quantised step to exactly half a turn,
    # which no unwrap can tell from -half; the generator must stay inside the contract.
    assert np.abs(np.diff(truth)).max() <= cpt // 2 - 1
    counts = angle_to_counts(theta, bits)
    np.testing.assert_array_equal(counts, np.mod(truth, cpt))
    recovered = ticks_of(unwrap_counts(counts, bits), bits)
    np.testing.assert_array_equal(recovered, expected_ticks(truth, bits))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_random_walk_recovers_cumulative_sum(data: st.DataObject) -> None:
    bits = data.draw(st.integers(MIN_BITS, MAX_BITS), label="bits")
    cpt = 1 << bits
    top = cpt // 2 - 1
    steps = data.draw(st.lists(st.integers(-top, top), min_size=1, max_size=300), label="steps")
    start = data.draw(st.integers(0, cpt - 1), label="start")
    truth = start + np.concatenate([[0], np.cumsum(np.array(steps, dtype=np.int64))])
    angle = unwrap_counts(np.mod(truth, cpt), bits)
    np.testing.assert_array_equal(ticks_of(angle, bits), truth)


def test_half_a_turn_is_ambiguous_and_read_as_backwards() -> None:
    # The documented limit: a step of exactly half a turn reads as -half, and half + 1 as
    # -(half - 1). This is why speeds must stay under half a turn per sample.
    bits = 12
    half = counts_per_turn(bits) // 2
    assert list(ticks_of(unwrap_counts([0, half], bits), bits)) == [0, -half]
    assert list(ticks_of(unwrap_counts([0, half + 1], bits), bits)) == [0, -(half - 1)]
    assert list(ticks_of(unwrap_counts([0, half - 1], bits), bits)) == [0, half - 1]


def test_default_19_bits_is_524288_counts_per_turn() -> None:
    assert counts_per_turn(19) == 524288
    # One full turn forward in four quarter steps returns to the same count, one turn on.
    q = 524288 // 4
    angle = unwrap_counts([0, q, 2 * q, 3 * q, 0], 19)
    assert angle[-1] == 2.0 * math.pi


def test_accepts_integer_and_whole_float_counts_alike() -> None:
    ints = np.array([5, 4000, 100, 4095], dtype=np.uint16)
    np.testing.assert_array_equal(unwrap_counts(ints, 12), unwrap_counts(ints.astype(float), 12))
    assert unwrap_counts(np.array([], dtype=np.int64), 12).shape == (0,)


@pytest.mark.parametrize(
    "counts",
    [[0, -1], [0, 4096], [0, 2.0**70], [0, 2**64 - 1]],
    ids=["negative", "one-turn", "huge-float", "huge-uint"],
)
def test_out_of_range_counts_are_refused(counts: list[float]) -> None:
    with pytest.raises(ValueError, match=r"0\.\.4095 for 12 bits"):
        unwrap_counts(np.array(counts), 12)


@pytest.mark.parametrize("counts", [[0, 0.5], [0, float("nan")], [0, float("inf")]])
def test_non_integer_counts_are_refused(counts: list[float]) -> None:
    with pytest.raises(ValueError, match="whole numbers"):
        unwrap_counts(counts, 19)


@pytest.mark.parametrize(
    "counts",
    [np.array(["1", "2"]), np.array([[1, 2], [3, 4]]), np.array([True, False])],
    ids=["strings", "2-D", "bools"],
)
def test_counts_of_the_wrong_kind_are_refused(counts: np.ndarray) -> None:
    with pytest.raises(ValueError):
        unwrap_counts(counts, 19)


@pytest.mark.parametrize("bits", [11, 33, 0, -19, True, 19.0, "19", None])
def test_bad_bit_width_is_refused(bits: object) -> None:
    with pytest.raises(ValueError, match="bit width"):
        unwrap_counts([0, 1], bits)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bit width"):
        angle_to_counts([0.0], bits)  # type: ignore[arg-type]


def test_numpy_integer_bit_width_is_accepted() -> None:
    assert counts_per_turn(np.int64(19)) == 524288  # type: ignore[arg-type]


@pytest.mark.parametrize("bits", ALL_BITS)
def test_angle_to_counts_round_trip(bits: int) -> None:
    cpt = counts_per_turn(bits)
    rng = np.random.default_rng(bits)
    # Counts -> unwrapped angle -> counts is the identity; multi-turn angles included.
    counts = np.sort(rng.integers(0, cpt, 20_000))
    np.testing.assert_array_equal(angle_to_counts(unwrap_counts(counts, bits), bits), counts)
    ticks = rng.integers(-(2**40), 2**40, 20_000)
    angles = ticks * (2.0 * math.pi / cpt)
    np.testing.assert_array_equal(angle_to_counts(angles, bits), np.mod(ticks, cpt))
    # An angle anywhere inside a tick quantises down to that tick (floor), negatives included.
    inside = (ticks + rng.uniform(0.01, 0.99, ticks.size)) * (2.0 * math.pi / cpt)
    np.testing.assert_array_equal(angle_to_counts(inside, bits), np.mod(ticks, cpt))


def test_angle_to_counts_refuses_what_it_cannot_quantise() -> None:
    with pytest.raises(ValueError, match="finite"):
        angle_to_counts([0.0, float("nan")], 19)
    with pytest.raises(ValueError, match="2\\*\\*52"):
        angle_to_counts([1e30], 19)
