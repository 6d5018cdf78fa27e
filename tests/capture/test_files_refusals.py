"""Capture files refused, each naming file, line and column: bad CSV, bad counts, bad .npz
archives, captures that could not be read back, and random or mutated input (fuzz)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.capture.files import read_csv, save_capture, write_npz
from agent.capture.model import Capture, CaptureMeta
from agent.errors import CaptureError
from tests.support.capture_files import refused, sample_capture, write

pytestmark = pytest.mark.usefixtures("_in_tmp")

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
    assert refused("missing.csv") == "missing.csv: no such file"
    assert refused("missing.npz") == "missing.npz: no such file"


def test_unknown_suffix_is_refused_for_load_and_save() -> None:
    assert refused("cap.txt").startswith("cap.txt: unknown capture format '.txt'; expected one")
    with pytest.raises(CaptureError, match="unknown capture format"):
        save_capture(sample_capture(n=5), "cap")
    assert not Path("cap").exists()


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
