"""Fuzz the capture readers: CSV (+ .meta.yaml sidecar) and .npz, as written by save_capture.

Near-valid inputs are real captures written by save_capture, then mutated (cells, rows, header,
sidecar lines, archive bytes, archive entries of the wrong type or shape); raw garbage is mixed
in. Property: load_capture returns a Capture holding every invariant a reader promises (finite,
strictly increasing time; channels of the same length, finite; counts whole and inside the
encoder's range; a motor channel), or raises CaptureError naming the file.
"""

from __future__ import annotations

from pathlib import Path

from agent.errors import CaptureError
from tests.fuzz.cases.capture import (
    NPZ_REGRESSIONS,
    csv_case,
    csv_cases,
    names_file,
    npz_case,
    npz_cases,
)
from tests.fuzz.harness import Oracle, fuzz


def test_fuzz_capture_csv(shm_path: Path) -> None:
    oracle = Oracle(
        "capture CSV + sidecar",
        expected=(CaptureError,),
        place=lambda e: names_file(e, "fuzz.csv"),
    )
    fuzz(oracle, csv_cases(), lambda case: csv_case(case, oracle, shm_path))


def test_fuzz_capture_npz(shm_path: Path) -> None:
    oracle = Oracle(
        "capture npz", expected=(CaptureError,), place=lambda e: names_file(e, "fuzz.npz")
    )
    fuzz(
        oracle,
        npz_cases(),
        lambda data: npz_case(data, oracle, shm_path),
        examples=NPZ_REGRESSIONS,
    )
    assert oracle.errors.get("CaptureError", 0) >= len(NPZ_REGRESSIONS)
