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


def decimated_log(
    n_records: int = 2400, gap_records: int = 0
) -> tuple[Capture, np.ndarray, np.ndarray]:
    """A 500 Hz controller's motion logged by a host at every 5th or 6th tick (and a few 1, 4,
    8), stamped with the host's clock in whole ms: (capture, each record's true tick, its true
    position) - the RTDE log of issue 30, point 4."""
    rng = np.random.default_rng(5)
    steps = rng.choice([5, 6], size=n_records - 1, p=[0.7, 0.3])
    odd = rng.choice(np.arange(50, n_records - 50), 12, replace=False)
    steps[odd] = rng.choice([1, 4, 8], size=odd.size)
    if gap_records:
        steps[n_records // 2] = 5 * (gap_records + 1)
    ticks = np.concatenate([[0], np.cumsum(steps)])
    true_s = 1.764e9 + 0.0123 + ticks * TICK_S  # UNIX time
    host_s = np.floor((true_s + rng.uniform(0.0, 0.3e-3, ticks.size)) * 1e3) / 1e3
    position = np.sin(2 * np.pi * 0.7 * ticks * TICK_S) + 0.1 * ticks * TICK_S
    cap = Capture(host_s, {"link_pos_rad": position}, CaptureMeta(), "rtde-log.csv")
    return cap, ticks, position


def test_a_log_of_every_fifth_or_sixth_tick_keeps_every_record_on_its_own_tick() -> None:
    """Taken as a jittery 10.6 ms tick, 3-4.6 % of such a log's distinct records were dropped as
    repeated and the rest moved by up to 0.7 tick (10 mrad). Recognised as decimated: the 2 ms
    tick is found, every record stays, on its own tick, and the report says so."""
    cap, ticks, position = decimated_log()
    out, report = resample_to_tick(cap)
    assert report.tick_s == pytest.approx(TICK_S, rel=1e-6)
    assert (report.decimation, report.quantum_s) == (5, 1e-3)
    assert report.repeated == 0 and report.samples_in == ticks.size
    assert report.samples_out == ticks[-1] + 1  # the controller's every tick, first to last
    assert report.filled == report.samples_out - ticks.size
    np.testing.assert_allclose(out.channels["link_pos_rad"][ticks], position, atol=1e-12)
    assert report.step_range_ticks == (1, 8)
    assert "every 5th tick of a 2 ms controller tick" in report.describe()
    assert "0 dropped" in report.describe()


def test_a_gap_in_a_decimated_log_is_counted_in_records() -> None:
    cap, _, _ = decimated_log()
    _, report = resample_to_tick(cap, max_gap_ticks=2)  # steps of 8 ticks: under 2 records
    assert report.largest_gap_ticks == 7
    gapped, _, _ = decimated_log(gap_records=4)
    with pytest.raises(CaptureError, match=r"a gap of 4 records \(steps of 5 ticks\)"):
        resample_to_tick(gapped, max_gap_ticks=3)
