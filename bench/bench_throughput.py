"""Speeds that were asserted in unit tests (where a loaded machine made them flaky): loading a
100,000-row capture CSV, and the robot regressor of a 31 s capture at 1 kHz. Each is printed with
a ratio to a baseline measured in the same run (numpy summing the same amount of data), so a
slow machine shows as a slow baseline, not as a regression.

Targets: the CSV in under 1 s, the regressor in under 0.8 s (best of three, idle 2-core machine).
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from agent.capture.encoder import angle_to_counts
from agent.capture.files import read_csv, write_csv
from agent.capture.model import Capture, CaptureMeta
from agent.models.robot.description import load_robot
from agent.models.robot.regressor import regressor

ROOT = Path(__file__).resolve().parents[1]


def _best(fn: Callable[[], object], runs: int) -> float:
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(quick: bool = False) -> None:
    runs = 2 if quick else 3
    n = 100_000
    rng = np.random.default_rng(1)
    pos = np.cumsum(rng.uniform(0.0, 0.5, n))
    cap = Capture(
        np.arange(n) * 1e-3,
        {
            "motor_counts": angle_to_counts(pos, 19),
            "motor_pos_rad": pos,
            "link_pos_rad": pos / 50,
            "current_a": rng.normal(size=n),
        },
        CaptureMeta(encoder_bits=19),
    )
    data = rng.normal(size=(31_000, 6 * 78))
    baseline = _best(lambda: [float(data.sum()) for _ in range(10)], runs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.csv"
        write_csv(cap, path)
        csv_s = _best(lambda: read_csv(path), runs)
    robot = load_robot(ROOT / "config" / "robots" / "ur5e.yaml")
    q = rng.uniform(-1, 1, (31_000, 6))
    reg_s = _best(lambda: regressor(robot, q, q, q, rotor=True, friction=True), runs)
    print(f"baseline (numpy sums of 31,000 x 468 x 10): {baseline * 1e3:.1f} ms")
    print(
        f"CSV 100,000 rows x 4 channels: {csv_s:.3f} s "
        f"({csv_s / baseline:.0f}x baseline; target < 1 s)"
    )
    print(
        f"regressor 31,000 samples, UR5e: {reg_s:.3f} s "
        f"({reg_s / baseline:.0f}x baseline; target < 0.8 s)"
    )
