"""Capture files: CSV (+ YAML sidecar) and .npz round trips bit for bit, metadata from sidecars
and flags, a large CSV's load time, positions unwrapped from counts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.capture.checks import capture_with_positions
from agent.capture.encoder import angle_to_counts, unwrap_counts
from agent.capture.files import (
    load_capture,
    read_csv,
    read_npz,
    save_capture,
    sidecar_path,
    write_csv,
    write_npz,
)
from agent.capture.model import Capture, CaptureMeta
from agent.errors import CaptureError
from tests.support.capture_files import (
    AWKWARD,
    BITS,
    META,
    assert_same,
    refused,
    sample_capture,
    write,
)

pytestmark = pytest.mark.usefixtures("_in_tmp")

# ---------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_round_trip_is_bit_exact(suffix: str) -> None:
    cap = sample_capture()
    save_capture(cap, "cap" + suffix)
    back = load_capture("cap" + suffix)
    assert_same(back, cap)
    assert back.source == "cap" + suffix
    assert back.channels["motor_counts"].dtype == np.int64


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=2, max_size=40),
    bits=st.integers(12, 32),
)
def test_any_finite_floats_and_counts_round_trip(values: list[float], bits: int) -> None:
    n = len(values)
    counts = np.random.default_rng(n).integers(0, 1 << bits, n)
    cap = Capture(
        np.arange(n) * 1e-3,
        {"current_a": np.array(values), "motor_counts": counts},
        CaptureMeta(encoder_bits=bits),
    )
    for path in ("h.csv", "h.npz"):
        save_capture(cap, path)
        back = load_capture(path)
        assert back.channels["current_a"].tobytes() == cap.channels["current_a"].tobytes()
        assert back.channels["motor_counts"].tolist() == counts.tolist()


def test_csv_layout_and_sidecar() -> None:
    cap = sample_capture(n=20)
    write_csv(cap, "cap.csv")
    lines = Path("cap.csv").read_text().splitlines()
    assert lines[0] == (
        "time_s,motor_counts,motor_pos_rad,motor_speed_rad_s,motor_speed_rps,link_pos_rad,current_a"
    )
    assert len(lines) == 21
    first = lines[1].split(",")
    assert first[1] == str(int(cap.channels["motor_counts"][0]))  # counts as integers
    assert first[6] == repr(AWKWARD[0])  # shortest round-trip text
    side = yaml.safe_load(Path("cap.csv.meta.yaml").read_text())
    assert side["encoder_bits"] == 19 and side["gear_ratio"] == 101.0
    assert side["extra"] == {"operator": "ci", "ids": [1, 2]}
    assert sidecar_path("dir/cap.csv") == Path("dir/cap.csv.meta.yaml")


def test_npz_is_plain_arrays_with_versioned_json_meta_and_no_pickle() -> None:
    write_npz(sample_capture(n=20), "cap.npz")
    with np.load("cap.npz", allow_pickle=False) as z:
        assert set(z.files) == {
            "time_s",
            "motor_counts",
            "motor_pos_rad",
            "motor_speed_rad_s",
            "motor_speed_rps",
            "link_pos_rad",
            "current_a",
            "meta_json",
        }
        doc = json.loads(str(z["meta_json"][()]))
    assert doc["format_version"] == 1
    assert doc["meta"]["encoder_bits"] == 19


def test_hand_written_csv_with_crlf_bom_quotes_blank_lines_and_spaces() -> None:
    text = '\ufeff"time_s", motor_pos_rad ,current_a\r\n0.0,1.0,2\r\n\r\n0.5, 1.5 ,2.5\r\n\n'
    cap = read_csv(write("h.csv", text))
    assert cap.time_s.tolist() == [0.0, 0.5]
    assert cap.channels["motor_pos_rad"].tolist() == [1.0, 1.5]
    assert cap.meta == CaptureMeta()


# ---------------------------------------------------------------------------------- metadata


def test_meta_from_flags_when_there_is_no_sidecar() -> None:
    path = write("c.csv", "time_s,motor_counts\n0,5\n0.001,6\n")
    assert "needs the encoder bit width" in refused(path)
    cap = read_csv(path, CaptureMeta(encoder_bits=12, gear_ratio=50.0))
    assert cap.meta.encoder_bits == 12 and cap.meta.gear_ratio == 50.0


def test_meta_flags_override_the_sidecar_field_by_field() -> None:
    path = write(
        "c.csv",
        "time_s,motor_counts\n0,5\n0.001,6\n",
        {"machine": "m", "encoder_bits": 19, "gear_ratio": 80, "extra": {"a": 1, "b": 2}},
    )
    cap = read_csv(path, CaptureMeta(gear_ratio=100.0, commanded_speed_rad_s=3.0, extra={"b": 3}))
    assert cap.meta.machine == "m"  # not given: kept
    assert cap.meta.encoder_bits == 19  # not given: kept
    assert cap.meta.gear_ratio == 100.0  # given: overrides
    assert cap.meta.commanded_speed_rad_s == 3.0
    assert cap.meta.extra == {"a": 1, "b": 3}
    assert isinstance(read_csv(path).meta.gear_ratio, float)  # YAML 80 read as a number


def test_npz_meta_can_be_overridden_too() -> None:
    save_capture(sample_capture(n=10), "c.npz")
    assert read_npz("c.npz", CaptureMeta(gear_ratio=7.0)).meta.gear_ratio == 7.0
    assert read_npz("c.npz").meta == META


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [
        ("machine: m\ncolour: red\n", "c.csv.meta.yaml:2: unknown metadata field 'colour'"),
        ("encoder_bits: 11\n", "c.csv.meta.yaml:1: field encoder_bits: expected an integer 12..32"),
        ("joint: j\nencoder_bits: 19.0\n", "c.csv.meta.yaml:2: field encoder_bits"),
        ("gear_ratio: -3\n", "c.csv.meta.yaml:1: field gear_ratio: must be positive"),
        ("gear_ratio: .nan\n", "c.csv.meta.yaml:1: field gear_ratio: expected a finite number"),
        ("sample_rate_hz: fast\n", "c.csv.meta.yaml:1: field sample_rate_hz: expected a number"),
        ("machine: [1, 2]\n", "c.csv.meta.yaml:1: field machine: expected a string"),
        ("extra: 5\n", "c.csv.meta.yaml:1: field extra: expected a mapping"),
        ("machine: m\n  bad: [\n", "c.csv.meta.yaml:2: invalid YAML"),
        ("- 1\n- 2\n", "c.csv.meta.yaml: metadata must be a mapping"),
        ("started_at: 2024-13-45\n", "c.csv.meta.yaml: invalid YAML"),
    ],
)
def test_bad_sidecar_is_refused_naming_its_line(sidecar: str, message: str) -> None:
    write("c.csv", "time_s,motor_pos_rad\n0,1\n1,2\n")
    Path("c.csv.meta.yaml").write_text(sidecar)
    assert refused("c.csv").startswith(message)


def test_bad_override_is_refused() -> None:
    path = write("c.csv", "time_s,motor_pos_rad\n0,1\n1,2\n")
    assert refused(path, CaptureMeta(encoder_bits=40)).startswith(
        "c.csv: field encoder_bits: expected an integer 12..32, got 40"
    )


def test_yaml_types_are_normalised() -> None:
    path = write("c.csv", "time_s,motor_pos_rad\n0,1\n1,2\n")
    Path("c.csv.meta.yaml").write_text("joint: 3\nstarted_at: 2025-03-01 10:00:00\n")
    meta = read_csv(path).meta
    assert meta.joint == "3"
    assert meta.started_at == "2025-03-01T10:00:00"


def test_a_large_csv_round_trips() -> None:
    n = 100_000
    rng = np.random.default_rng(1)
    t = np.arange(n) * 1e-3
    pos = np.cumsum(rng.uniform(0.0, 0.5, n))
    cap = Capture(
        t,
        {
            "motor_counts": angle_to_counts(pos, BITS),
            "motor_pos_rad": pos,
            "link_pos_rad": pos / 50,
            "current_a": rng.normal(size=n),
        },
        CaptureMeta(encoder_bits=BITS),
    )
    write_csv(cap, "big.csv")
    # Its speed (under 1 s) is measured by `make bench` (bench/bench_throughput.py).
    assert_same(read_csv("big.csv"), cap)


# ---------------------------------------------------------------------------------- positions


def test_capture_with_positions_unwraps_counts_and_keeps_them() -> None:
    t = np.arange(200) * 1e-3
    motor = 0.2 + 300.0 * t  # 60 rad: nearly ten turns
    link = -0.1 - 3.0 * t
    cap = Capture(
        t,
        {"motor_counts": angle_to_counts(motor, 12), "link_counts": angle_to_counts(link, 12)},
        CaptureMeta(encoder_bits=12),
    )
    out = capture_with_positions(cap)
    assert set(out.channels) == {"motor_counts", "link_counts", "motor_pos_rad", "link_pos_rad"}
    np.testing.assert_array_equal(
        out.channels["motor_pos_rad"], unwrap_counts(cap.channels["motor_counts"], 12)
    )
    tick = 2.0 * math.pi / 4096
    # Unwrapped from the first sample's turn: the link starts just below zero, in turn -1.
    assert np.all(np.abs(out.channels["motor_pos_rad"] - motor) <= tick)
    assert np.all(np.abs(out.channels["link_pos_rad"] - (link + 2.0 * math.pi)) <= tick)
    assert out.meta == cap.meta and out.source == cap.source


def test_capture_with_positions_leaves_existing_positions_and_needs_bits() -> None:
    t = np.arange(3) * 1e-3
    cap = Capture(t, {"motor_counts": [0, 1, 2], "motor_pos_rad": [9.0, 9.0, 9.0]})
    assert capture_with_positions(cap) is cap
    with pytest.raises(CaptureError, match="without the encoder bit width"):
        capture_with_positions(Capture(t, {"motor_counts": [0, 1, 2]}))
