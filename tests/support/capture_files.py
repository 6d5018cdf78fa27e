"""A sample capture, a bit-exact comparison and writing or refusing a capture file by name:
what tests/capture/test_files_*.py share."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from agent.capture.encoder import angle_to_counts
from agent.capture.files import load_capture
from agent.capture.model import Capture, CaptureMeta
from agent.errors import EX_DATAERR, EX_NOINPUT, CaptureError, InputMissing

BITS = 19
META = CaptureMeta(
    machine="robot-3",
    joint="j2",
    cycle="constant-speed",
    commanded_speed_rad_s=31.41592653589793,
    gear_ratio=101.0,
    encoder_bits=BITS,
    sample_rate_hz=1000.0,
    started_at="2025-03-01T10:00:00+00:00",
    extra={"operator": "ci", "ids": [1, 2]},
)
# Floats whose shortest text is long or unusual: they must come back bit for bit.
AWKWARD = [0.1, -0.0, 5e-324, 1.7976931348623157e308, -math.pi, 1e-300, 2.0**-1074 * 3, 1 / 3]


def sample_capture(n: int = 400, seed: int = 0, meta: CaptureMeta = META) -> Capture:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.uniform(0.9e-3, 1.1e-3, n))
    pos = 0.3 + np.cumsum(rng.uniform(-1.0, 3.0, n))  # many turns, both ways
    current = rng.normal(0.0, 2.0, n)
    current[: len(AWKWARD)] = AWKWARD[:n]
    return Capture(
        t,
        {
            "motor_counts": angle_to_counts(pos, BITS),
            "motor_pos_rad": pos,
            "motor_speed_rad_s": np.gradient(pos, t),
            "motor_speed_rps": np.gradient(pos, t) / (2.0 * math.pi),
            "link_pos_rad": pos / 101.0,
            "current_a": current,
        },
        meta,
        "test",
    )


def assert_same(a: Capture, b: Capture) -> None:
    assert a.meta == b.meta
    assert list(a.channels) == list(b.channels)
    assert a.time_s.tobytes() == b.time_s.tobytes()
    for name in a.channels:
        assert a.channels[name].dtype == b.channels[name].dtype, name
        assert a.channels[name].tobytes() == b.channels[name].tobytes(), name  # bit-exact


def write(name: str, text: str, meta: dict | None = None) -> str:
    Path(name).write_text(text, encoding="utf-8", newline="")
    if meta is not None:
        Path(name + ".meta.yaml").write_text(yaml.safe_dump(meta), encoding="utf-8")
    return name


def refused(path: str, meta: CaptureMeta | None = None) -> str:
    with pytest.raises(CaptureError) as info:
        load_capture(path, meta)
    # a file that is not there is no input (66); one that is there but wrong is bad data (65)
    expected = EX_NOINPUT if isinstance(info.value, InputMissing) else EX_DATAERR
    assert info.value.exit_code == expected
    assert not (isinstance(info.value, InputMissing) and Path(path).exists())
    return str(info.value)
