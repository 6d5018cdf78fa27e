"""Capture files: CSV (+ YAML sidecar) and .npz round trips, every refusal, atomic writes."""

from __future__ import annotations

import json
import math
import os
import stat
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.atomic import atomic_write_bytes, atomic_write_text, atomic_writer
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
from agent.errors import EX_DATAERR, CaptureError

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


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Relative paths, so error messages read exactly "cap.csv:57: ...".
    monkeypatch.chdir(tmp_path)


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
    assert info.value.exit_code == EX_DATAERR
    return str(info.value)


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


# ---------------------------------------------------------------------------------- CSV refusals

GOOD = "time_s,motor_counts,motor_speed_rad_s\n0.000,10,1.0\n0.001,20,1.5\n0.002,30,2.0\n"
BITS_META = {"encoder_bits": 19}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "c.csv: the file is empty"),
        ("\n  \n\n", "c.csv: the file is empty"),
        ("0.0,1.0\n0.1,2.0\n", "c.csv:1: no header row"),
        ("\n\nmotor_pos_rad,current_a\n1,2\n3,4\n", "c.csv:3: no time_s column"),
        ("time_s,speed\n0,1\n1,2\n", "c.csv:1: unknown column 'speed'; accepted columns: time_s,"),
        ("time_s;motor_pos_rad\n0;1\n", "c.csv:1: unknown column 'time_s;motor_pos_rad' (the sep"),
        ("time_s,,motor_pos_rad\n0,1,2\n", "c.csv:1: column 2 has no name"),
        ("time_s,current_a,current_a\n0,1,2\n1,2,3\n", "c.csv:1: column current_a appears twice"),
        ("time_s,motor_pos_rad\n0,1\n1,2,3\n", "c.csv:3: row has 3 fields, the header has 2"),
        ("time_s,motor_pos_rad\n0,1\n1\n", "c.csv:3: row has 1 fields, the header has 2"),
        ("time_s,motor_pos_rad\n0,1\n1,abc\n", "c.csv:3: column motor_pos_rad: 'abc' is not a num"),
        ("time_s,motor_pos_rad\n0,1\n1,\n", "c.csv:3: column motor_pos_rad: empty value"),
        ("time_s,motor_pos_rad\n0,1\n1,1_0\n", "c.csv:3: column motor_pos_rad: '1_0' is not a num"),
        ("time_s,motor_pos_rad\n0,1\nx1,2\n", "c.csv:3: column time_s: 'x1' is not a number"),
        (
            "time_s,motor_pos_rad\n0,1\n1,nan\n",
            "c.csv:3: column motor_pos_rad: 'nan' is not finite",
        ),
        ("time_s,motor_pos_rad\n0,1\n1,-inf\n", "c.csv:3: column motor_pos_rad: '-inf' is not fin"),
        ("time_s,motor_pos_rad\n0,1\n1,1e999\n", "c.csv:3: column motor_pos_rad: '1e999' is not f"),
        ("time_s,motor_pos_rad\n0,1\n", "c.csv: needs at least two samples, found 1"),
        ("time_s,motor_pos_rad\n", "c.csv: needs at least two samples, found 0"),
        ("time_s,current_a\n0,1\n1,2\n", "c.csv:1: no motor channel: need one of"),
        (
            "time_s,motor_pos_rad\n0.0,1\n0.002,1\n\n0.001,1\n",
            "c.csv:5: column time_s: time 0.001 s is not after the previous sample's 0.002 s "
            "(c.csv:3); time must increase strictly",
        ),
        ("time_s,motor_pos_rad\n0,1\n0,2\n", "c.csv:3: column time_s: time 0.0 s is not after"),
    ],
)
def test_bad_csv_is_refused_naming_file_line_and_column(text: str, message: str) -> None:
    assert refused(write("c.csv", text)).startswith(message)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("0.003,1.5,1.0", "c.csv:5: column motor_counts: 1.5 is not a whole number of counts"),
        (
            "0.003,-1,1.0",
            "c.csv:5: column motor_counts: -1.0 counts is outside 0..524287 for a 19-",
        ),
        ("0.003,524288,1.0", "c.csv:5: column motor_counts: 524288.0 counts is outside 0..524287"),
    ],
)
def test_bad_counts_are_refused(row: str, message: str) -> None:
    assert refused(write("c.csv", GOOD + row + "\n", BITS_META)).startswith(message)


def test_counts_without_bit_width_are_refused() -> None:
    assert refused(write("c.csv", GOOD)).startswith(
        "c.csv:1: motor_counts needs the encoder bit width"
    )
    text = "time_s,motor_pos_rad,link_counts\n0,1,2\n1,2,3\n"
    assert refused(write("l.csv", text)).startswith("l.csv:1: link_counts needs the encoder bit")


def test_the_issue_example_message_at_line_57() -> None:
    rows = [f"{k * 1e-3!r},{k},{k * 0.5!r}" for k in range(100)]
    rows[55] = "0.055,55,abc"  # line 57: header is line 1, row 0 is line 2
    text = "time_s,motor_counts,motor_speed_rad_s\n" + "\n".join(rows) + "\n"
    msg = refused(write("cap.csv", text, BITS_META))
    assert msg == "cap.csv:57: column motor_speed_rad_s: 'abc' is not a number"


def test_not_utf8_and_missing_file() -> None:
    Path("b.csv").write_bytes(b"time_s,motor_pos_rad\n0,1\n1,\xff\n")
    assert refused("b.csv").startswith("b.csv:3: not UTF-8 text")
    assert refused("missing.csv").startswith("missing.csv: cannot read")
    assert refused("missing.npz").startswith("missing.npz: cannot read")


def test_unknown_suffix_is_refused_for_load_and_save() -> None:
    assert refused("cap.txt").startswith("cap.txt: unknown capture format '.txt'; expected one")
    with pytest.raises(CaptureError, match="unknown capture format"):
        save_capture(sample_capture(n=5), "cap")
    assert not Path("cap").exists()


def test_large_csv_loads_in_well_under_a_second() -> None:
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
    best = math.inf
    for _ in range(2):  # best of two: the machine is shared
        start = time.perf_counter()
        back = read_csv("big.csv")
        best = min(best, time.perf_counter() - start)
    assert_same(back, cap)
    assert best < 1.0, f"100,000-row CSV took {best:.2f} s"


# ---------------------------------------------------------------------------------- writes refused


def test_a_capture_that_could_not_be_read_back_is_not_written() -> None:
    t = np.arange(5) * 1e-3
    no_bits = Capture(t, {"motor_counts": np.arange(5)})
    half = Capture(t, {"motor_counts": np.array([0, 1, 2.5, 3, 4])}, CaptureMeta(encoder_bits=12))
    no_motor = Capture(t, {"current_a": np.zeros(5)})
    odd_meta = Capture(t, {"motor_pos_rad": t}, CaptureMeta(extra={"f": object()}))
    for cap, match in [
        (no_bits, "needs the encoder bit width"),
        (half, "channel motor_counts sample 2: 2.5 is not a whole number"),
        (no_motor, "no motor channel"),
        (odd_meta, "field extra: object values cannot be stored"),
    ]:
        for path in ("w.csv", "w.npz"):
            with pytest.raises(CaptureError, match=match):
                save_capture(cap, path)
    assert sorted(os.listdir(".")) == []


# ---------------------------------------------------------------------------------- npz refusals


def npz_with(**entries: object) -> str:
    np.savez("x.npz", **entries)  # type: ignore[arg-type]
    return "x.npz"


META_JSON = np.array('{"format_version": 1, "meta": {"encoder_bits": 19}}')


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"time_s": np.arange(3.0), "motor_pos_rad": np.zeros(3)}, "no meta_json entry"),
        ({"meta_json": META_JSON, "motor_pos_rad": np.zeros(3)}, "no time_s entry"),
        (
            {"meta_json": META_JSON, "time_s": np.arange(3.0), "speed": np.zeros(3)},
            "unknown channel 'speed'",
        ),
        (
            {"meta_json": META_JSON, "time_s": np.arange(3.0), "motor_pos_rad": np.zeros((3, 2))},
            "channel motor_pos_rad has 6 samples, time_s has 3",
        ),
        (
            {"meta_json": META_JSON, "time_s": np.arange(3.0), "motor_pos_rad": np.zeros(4)},
            "channel motor_pos_rad has 4 samples, time_s has 3",
        ),
        (
            {
                "meta_json": META_JSON,
                "time_s": np.arange(3.0),
                "motor_pos_rad": np.array(list("abc")),
            },
            "must hold numbers",
        ),
        (
            {"meta_json": META_JSON, "time_s": np.arange(3.0), "motor_pos_rad": [0, np.nan, 1]},
            "channel motor_pos_rad sample 1 is not finite",
        ),
        (
            {"meta_json": META_JSON, "time_s": [0.0, 2.0, 1.0], "motor_pos_rad": np.zeros(3)},
            "not strictly increasing at sample 2",
        ),
        (
            {"meta_json": META_JSON, "time_s": np.arange(3.0), "motor_counts": [0, 1, 2**19]},
            "channel motor_counts sample 2: 524288 counts is outside 0..524287",
        ),
        (
            {"meta_json": np.array("{"), "time_s": np.arange(3.0), "motor_pos_rad": np.zeros(3)},
            "x.npz (meta_json): invalid JSON",
        ),
        (
            {"meta_json": np.array('{"format_version": 2, "meta": {}}'), "time_s": [0.0, 1.0]},
            "x.npz (meta_json): format_version 2 is not one this reader knows (1)",
        ),
        (
            {
                "meta_json": np.array('{"format_version": 1, "meta": {"colour": 1}}'),
                "time_s": [0, 1],
            },
            "x.npz (meta_json): unknown metadata field 'colour'",
        ),
        (
            {"meta_json": np.arange(2), "time_s": np.arange(3.0), "motor_pos_rad": np.zeros(3)},
            "meta_json must be a single string",
        ),
        (
            {"meta_json": META_JSON, "time_s": np.arange(3.0), "motor_pos_rad": np.array([{}] * 3)},
            "corrupt or truncated .npz archive",  # an object array would need pickle
        ),
    ],
)
def test_bad_npz_is_refused(entries: dict[str, object], message: str) -> None:
    msg = refused(npz_with(**entries))
    assert msg.startswith("x.npz"), msg
    assert message in msg


@pytest.mark.parametrize("cut", [0, 10, 100, 1000, -30])
def test_truncated_npz_is_refused(cut: int) -> None:
    write_npz(sample_capture(n=300), "good.npz")
    data = Path("good.npz").read_bytes()
    Path("t.npz").write_bytes(data[:cut])
    assert "corrupt or truncated .npz archive" in refused("t.npz")


def test_bit_flipped_npz_is_refused() -> None:
    save_capture(sample_capture(n=300), "good.npz")
    data = bytearray(Path("good.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside compressed data: zlib or the CRC check objects
    Path("f.npz").write_bytes(bytes(data))
    assert "corrupt or truncated" in refused("f.npz")


def test_npy_and_random_files_named_npz_are_refused() -> None:
    np.save("a.npy", np.arange(3.0))
    os.replace("a.npy", "a.npz")
    assert refused("a.npz") == "a.npz: not an .npz archive (a single .npy array?)"
    Path("r.npz").write_bytes(b"\x80\x04garbage that is not a zip")
    assert "corrupt or truncated" in refused("r.npz")


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


# ---------------------------------------------------------------------------------- atomicity


def test_atomic_writes_create_parents_and_replace() -> None:
    atomic_write_text("a/b/c.txt", "one\n")
    atomic_write_text("a/b/c.txt", "two\n")
    assert Path("a/b/c.txt").read_text() == "two\n"
    atomic_write_bytes("a/d.bin", b"\x00\x01")
    assert Path("a/d.bin").read_bytes() == b"\x00\x01"
    assert sorted(os.listdir("a/b")) == ["c.txt"]
    with pytest.raises(ValueError, match="mode"), atomic_writer("a/e.txt", "a"):
        pass


def test_a_write_that_raises_midway_leaves_the_old_file_and_no_temp() -> None:
    atomic_write_text("r.txt", "old\n")
    with pytest.raises(RuntimeError, match="disk on fire"), atomic_writer("r.txt") as f:
        f.write("new, half")
        raise RuntimeError("disk on fire")
    assert Path("r.txt").read_text() == "old\n"
    assert os.listdir(".") == ["r.txt"]


def test_failed_rename_leaves_the_old_file_and_no_temp(monkeypatch: pytest.MonkeyPatch) -> None:
    atomic_write_text("r.txt", "old\n")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m, pytest.raises(OSError, match="No space"):
        m.setattr(os, "replace", broken_replace)
        atomic_write_text("r.txt", "new\n")
    assert Path("r.txt").read_text() == "old\n"
    assert os.listdir(".") == ["r.txt"]


def test_capture_write_that_fails_midway_keeps_the_previous_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = sample_capture(n=50, seed=1)
    save_capture(old, "cap.npz")
    save_capture(old, "cap.csv")
    before = {p: Path(p).read_bytes() for p in os.listdir(".")}

    def savez_then_fail(file: object, *args: object, **kwargs: object) -> None:
        file.write(b"PK\x03\x04 partial archive")  # type: ignore[attr-defined]
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m, pytest.raises(OSError, match="Input/output"):
        m.setattr(np, "savez_compressed", savez_then_fail)
        save_capture(sample_capture(n=60, seed=2), "cap.npz")

    real_replace = os.replace

    def replace_once_then_fail(src: object, dst: object) -> None:
        if str(dst).endswith(".csv"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)  # type: ignore[arg-type]

    new = sample_capture(n=60, seed=2, meta=replace(META, machine="robot-4"))
    with monkeypatch.context() as m, pytest.raises(OSError, match="No space"):
        m.setattr(os, "replace", replace_once_then_fail)
        write_csv(new, "cap.csv")
    # The sidecar had been replaced before the CSV failed; it is put back, so the pair matches.
    assert Path("cap.csv.meta.yaml").read_bytes() == before["cap.csv.meta.yaml"]

    assert Path("cap.npz").read_bytes() == before["cap.npz"]
    assert Path("cap.csv").read_bytes() == before["cap.csv"]
    assert sorted(os.listdir(".")) == sorted(before)  # no temp files left behind
    assert_same(load_capture("cap.npz"), old)
    assert_same(load_capture("cap.csv"), old)


def test_failed_first_csv_write_leaves_no_sidecar(monkeypatch: pytest.MonkeyPatch) -> None:
    real_replace = os.replace

    def fail_csv(src: object, dst: object) -> None:
        if str(dst).endswith(".csv"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)  # type: ignore[arg-type]

    with monkeypatch.context() as m, pytest.raises(OSError):
        m.setattr(os, "replace", fail_csv)
        write_csv(sample_capture(n=10), "fresh.csv")
    assert os.listdir(".") == []


def test_new_files_follow_the_umask_and_replacements_keep_their_mode() -> None:
    atomic_write_text("p.txt", "x")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(os.stat("p.txt").st_mode) == 0o666 & ~umask
    os.chmod("p.txt", 0o640)
    atomic_write_text("p.txt", "y")
    assert stat.S_IMODE(os.stat("p.txt").st_mode) == 0o640


# ---------------------------------------------------------------------------------- fuzz

VALID = (
    "time_s,motor_counts,motor_pos_rad,current_a\n"
    "0.0,4000,0.1,1.5\n0.001,10,0.2,-2e-3\n0.002,95,0.3,0\n0.003,180,0.4,7\n"
)
PIECES = [",", "\n", "\r", " ", "-", ".", "e", "nan", "inf", "1e999", "x", "\x00", "\ufeff"]
PIECES += ["9", "_", '"', "time_s", "motor_counts", "4096", "-1", "0.5", "١", "\u2028", "\x0b"]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def only_capture_errors(path: Path) -> None:
    try:
        cap = read_csv(path)
    except CaptureError as e:
        assert str(e).startswith(str(path))
        return
    assert len(cap) >= 2 and np.all(np.diff(cap.time_s) > 0)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=400))
def test_random_bytes_raise_nothing_but_capture_errors(fuzz_dir: Path, data: bytes) -> None:
    path = fuzz_dir / "r.csv"
    path.write_bytes(data)
    only_capture_errors(path)


@settings(max_examples=200, deadline=None)
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, len(VALID)),
            st.sampled_from(["insert", "delete", "replace"]),
            st.sampled_from(PIECES),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_mutated_csv_raises_nothing_but_capture_errors(
    fuzz_dir: Path, edits: list[tuple[int, str, str]]
) -> None:
    text = VALID
    for pos, op, piece in edits:
        pos = min(pos, len(text))
        if op == "insert":
            text = text[:pos] + piece + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + len(piece) :]
        else:
            text = text[:pos] + piece + text[pos + len(piece) :]
    path = fuzz_dir / "m.csv"
    path.write_text(text, encoding="utf-8", newline="")
    (fuzz_dir / "m.csv.meta.yaml").write_text("encoder_bits: 12\n")
    only_capture_errors(path)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=200))
def test_random_sidecar_raises_nothing_but_capture_errors(fuzz_dir: Path, text: str) -> None:
    (fuzz_dir / "s.csv").write_text("time_s,motor_pos_rad\n0,1\n1,2\n")
    (fuzz_dir / "s.csv.meta.yaml").write_text(text, encoding="utf-8")
    try:
        read_csv(fuzz_dir / "s.csv")
    except CaptureError as e:
        assert str(e).startswith(str(fuzz_dir / "s.csv.meta.yaml"))
