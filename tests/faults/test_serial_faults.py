"""Sample faults of the serial encoder board: a stream that stalls, floods,
or sends samples out of order or twice.

Each scenario runs a guarded cycle against tests/peers/serial_board.py with the fault injected
at a known frame. The driver must name what was wrong and stop the motion (the board logs the
STOP while its joint still moves), or, where the settings allow a repair that is exact (an
identical copy of a frame dropped), return a capture equal to the peer's truth. Each scenario
counts the samples it accepted that are not the truth and records them in the summary; it
must be 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.capture.model import Capture
from agent.errors import CycleAborted
from tests.support.drivers.serial_board import (
    LATE_ATTEMPTS,
    Bench,
    connected,
    run,
    sim_capture,
)
from tests.support.summary import fault

# Twice real time: the fault lands at frame 100 or later of 401, 0.35 s into the cycle with
# 0.3 s of motion left, so the STOP (sent within milliseconds) finds the joint moving.
TIME_SCALE = 0.5


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    for p in b.peers:
        p.close()


def samples_not_in_truth(capture: Capture | None, truth: Capture) -> int:
    """Accepted samples that are not the peer's: differing counts or times, missing or extra."""
    if capture is None:
        return 0
    n = min(len(capture), len(truth))
    wrong = np.count_nonzero(
        (capture.channel("motor_counts")[:n] != truth.channel("motor_counts")[:n])
        | (capture.time_s[:n] != truth.time_s[:n])
    )
    return int(wrong) + abs(len(capture) - len(truth))


def guarded(b: Bench) -> tuple[Capture | None, str]:
    """One guarded cycle: its capture, or None and the abort message."""

    async def go() -> tuple[Capture | None, str]:
        d = await connected(b)
        try:
            return await b.guarded(d), ""
        except CycleAborted as exc:
            return None, str(exc)
        finally:
            await d.close()

    return run(go())


ABORTS = [
    (
        "stalled sample stream (link alive)",
        {"kind": "stall_samples", "at_frame": 100},
        "no frame for 0.5 s (board stalled) after 100 of 401 frames",
    ),
    (
        "flood (20 samples at 10x the rate)",
        {"kind": "flood", "at_frame": 150, "count": 20, "factor": 10},
        "sample 150 stamped 200 us after sample 149, 2000 us expected at the requested rate",
    ),
    (
        "out-of-order samples",
        {"kind": "reorder", "at_frame": 120},
        "sample 120 after 121 (out of order)",
    ),
    (
        "duplicate samples",
        {"kind": "duplicate", "at_frame": 130},
        "sample 130 repeated (an identical copy)",
    ),
    (
        "duplicate counter with other content",
        {"kind": "duplicate", "at_frame": 130, "identical": False},
        "sample 130 repeated (with other content)",
    ),
]


@pytest.mark.parametrize(("scenario", "inject", "message"), ABORTS, ids=[a[0] for a in ABORTS])
def test_sample_fault_aborts_names_the_sample_and_stops(
    bench: Bench, scenario: str, inject: dict[str, Any], message: str
) -> None:
    truth = sim_capture(bench.ctrl)
    for attempt in range(1, LATE_ATTEMPTS + 1):
        peer = bench.peer(time_scale=TIME_SCALE, faults=[inject])
        capture, reason = guarded(bench)
        lost = samples_not_in_truth(capture, truth)
        assert lost == 0 and capture is None  # judged on every attempt, late or not
        assert message in reason
        if not peer.stop_came_after_the_motion() or attempt == LATE_ATTEMPTS:
            break
        print(f"attempt {attempt}: the STOP reached the board after its last frame; again")
        peer.close()
    fault(f"serial: {scenario}", records_lost=lost)
    assert peer.stops_while_moving() >= 1, peer.events()  # the STOP reached it mid-motion
    done = [e for e in peer.events() if e["event"] == "cycle_done"]
    assert done and done[0]["result"] == "STOPPED" and done[0]["frames_sent"] < 401


def test_identical_duplicates_are_dropped_when_allowed(tmp_path: Path) -> None:
    b = Bench(tmp_path, "duplicate_frames: drop_identical")
    try:
        b.peer(
            faults=[
                {"kind": "duplicate", "at_frame": 30},
                {"kind": "duplicate", "at_frame": 31},
                {"kind": "duplicate", "at_frame": 250},
            ]
        )

        async def go() -> tuple[Capture, int]:
            d = await connected(b)
            try:
                cap = await b.guarded(d)
                assert cap.meta.extra["duplicate_frames_dropped"] == d.duplicates_dropped
                return cap, d.duplicates_dropped
            finally:
                await d.close()

        capture, dropped = run(go())
        # Not a repair for a copy with other content: that one is refused as before.
        b.peer(faults=[{"kind": "duplicate", "at_frame": 30, "identical": False}])
        other, reason = guarded(b)
    finally:
        for p in b.peers:
            p.close()
    truth = sim_capture(b.ctrl)
    lost = samples_not_in_truth(capture, truth) + samples_not_in_truth(other, truth)
    fault("serial: duplicate samples, identical copies dropped", records_lost=lost)
    assert lost == 0 and dropped == 3 and len(capture) == len(truth) == 401
    assert other is None and "sample 30 repeated (with other content)" in reason
