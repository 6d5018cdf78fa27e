"""agent.capture.resample: a host's log (stamp jitter, repeated records, short gaps) put back on
the controller's tick, with counts of what was done; long gaps refused where they are."""

from __future__ import annotations

import numpy as np
import pytest

from agent.capture.model import Capture, CaptureMeta
from agent.capture.resample import is_uniform, resample_to_tick, uniform_capture
from agent.errors import CaptureError

TICK_S = 0.002


def host_log(
    n: int = 2000, jitter_ticks: float = 0.3, repeats: int = 7, gaps: tuple[int, ...] = (2, 3)
) -> tuple[Capture, np.ndarray, set[int], int]:
    """A controller's 500 Hz motion logged by a host: (capture, true positions on every tick,
    the ticks left out, the records repeated)."""
    rng = np.random.default_rng(3)
    ticks = np.arange(n)
    truth = np.sin(2 * np.pi * 1.5 * ticks * TICK_S) + 0.2 * ticks * TICK_S
    missing: set[int] = set()
    for g, at in zip(gaps, (500, 1400), strict=False):
        missing |= set(range(at, at + g))
    keep = np.array([k for k in ticks if k not in missing])
    stamps = keep * TICK_S + rng.uniform(-jitter_ticks, jitter_ticks, keep.size) * TICK_S
    values = truth[keep]
    # A record polled twice within its tick: the same values, a stamp a little later.
    again = rng.choice(np.arange(10, keep.size - 10), repeats, replace=False)
    stamps = np.insert(stamps, again + 1, stamps[again] + 0.05 * TICK_S)
    values = np.insert(values, again + 1, values[again])
    order = np.argsort(stamps, kind="stable")
    cap = Capture(stamps[order], {"motor_pos_rad": values[order]}, CaptureMeta(), "host.csv")
    return cap, truth, missing, repeats


def test_a_host_log_is_put_back_on_its_tick_and_says_what_was_done() -> None:
    cap, truth, missing, repeats = host_log()
    assert not is_uniform(cap.time_s)
    out, report = resample_to_tick(cap, tick_s=TICK_S)
    assert is_uniform(out.time_s) and len(out) == truth.size
    assert report.filled == len(missing) and report.repeated == repeats
    assert report.largest_gap_ticks == 3 and 0.25 < report.jitter_max_ticks < 0.4  # 0.3 drawn
    pos = out.channels["motor_pos_rad"]
    measured = np.array([k for k in range(truth.size) if k not in missing])
    assert np.array_equal(pos[measured], truth[measured])  # a record moved, not altered
    # filled ticks: linear interpolation of a smooth motion over at most 4 ticks
    filled = np.array(sorted(missing))
    assert np.max(np.abs(pos[filled] - truth[filled])) < 1e-3
    assert "3 ticks" in report.describe() and f"{repeats} repeated" in report.describe()


def test_the_tick_is_found_from_the_stamps() -> None:
    cap, truth, _, _ = host_log(jitter_ticks=0.1)
    out, report = resample_to_tick(cap)
    assert report.tick_s == pytest.approx(TICK_S, rel=0.02)
    assert len(out) == pytest.approx(truth.size, abs=2)


def test_a_gap_longer_than_the_limit_is_refused_where_it_is() -> None:
    cap, _, _, _ = host_log(gaps=(2, 40))
    with pytest.raises(
        CaptureError, match=r"host.csv: a gap of 40 ticks \(0.08 s\) after t = 2.79"
    ):
        resample_to_tick(cap, tick_s=TICK_S)
    out, report = resample_to_tick(cap, tick_s=TICK_S, max_gap_ticks=40)
    assert report.largest_gap_ticks == 40 and report.filled == 42 and len(out) == 2000


def test_counts_are_unwrapped_before_a_gap_is_filled() -> None:
    # A 19-bit count wraps inside a gap: interpolating counts would sweep back a whole turn.
    bits, cpt = 19, 2**19
    ticks = np.delete(np.arange(100), [50, 51])
    angle = 2 * np.pi * (0.9 + 0.004 * ticks)  # crosses one full turn near tick 25
    counts = np.round(angle / (2 * np.pi) * cpt).astype(np.int64) % cpt
    cap = Capture(ticks * TICK_S, {"motor_counts": counts}, CaptureMeta(encoder_bits=bits))
    out, report = resample_to_tick(cap, tick_s=TICK_S)
    assert report.filled == 2 and "motor_counts" not in out.channels
    step = np.diff(out.channels["motor_pos_rad"])
    assert np.allclose(step, 2 * np.pi * 0.004, atol=1e-4)


def test_a_uniform_capture_is_left_as_it_is() -> None:
    t = np.arange(100) * TICK_S
    cap = Capture(t, {"motor_pos_rad": np.sin(t)})
    same, report = uniform_capture(cap)
    assert same is cap and report is None
