"""Lost RTDE packages during motion: short runs bridged and counted, longer ones refused."""

from __future__ import annotations

import pytest

from drivers.ur_rtde.worker.stream import GapFiller, StreamError

HZ = 500.0


def _row(tick: int, q: float, mode: int = 7) -> tuple[object, ...]:
    """A package as the worker reads it: timestamp, six-joint vectors, then modes and bits."""
    vec = [q] * 6
    return (tick / HZ, vec, vec, vec, vec, vec, vec, [30.0] * 6, mode, 0, 2)


def test_a_run_of_two_is_bridged_on_the_straight_line_between_its_neighbours() -> None:
    gaps = GapFiller(HZ, max_run=2, max_total=10)
    filled = gaps.fill(_row(100, 1.0), _row(103, 1.3), 2)
    assert [round(r[0] * HZ) for r in filled] == [101, 102]
    assert [r[1][3] for r in filled] == pytest.approx([1.1, 1.2])
    assert gaps.total == 2 and gaps.filled_at_s == pytest.approx([101 / HZ, 102 / HZ])


def test_modes_and_bits_are_held_from_the_package_before_the_hole() -> None:
    filled = GapFiller(HZ, 2, 10).fill(_row(10, 0.0, mode=7), _row(12, 0.1, mode=5), 1)
    assert filled[0][8] == 7  # the later package's mode change is checked on that package


def test_a_longer_run_is_refused_with_its_size_and_time() -> None:
    with pytest.raises(StreamError, match=r"3 RTDE package\(s\) missed at t = 0\.208 s"):
        GapFiller(HZ, max_run=2, max_total=10).fill(_row(100, 0.0), _row(104, 0.4), 3)


def test_the_cycle_budget_is_refused_once_spent() -> None:
    gaps = GapFiller(HZ, max_run=2, max_total=3)
    gaps.fill(_row(0, 0.0), _row(3, 0.3), 2)
    gaps.fill(_row(10, 1.0), _row(12, 1.2), 1)
    with pytest.raises(StreamError, match="5 in this cycle"):
        gaps.fill(_row(20, 2.0), _row(23, 2.3), 2)
    assert gaps.total == 3


def test_zero_bridges_nothing() -> None:
    with pytest.raises(StreamError):
        GapFiller(HZ, max_run=0, max_total=0).fill(_row(0, 0.0), _row(2, 0.2), 1)
