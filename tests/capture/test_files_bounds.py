"""Capture files past the bounds of agent.capture.bounds are refused before they are parsed or
their arrays allocated: a CSV of more rows than MAX_CAPTURE_SAMPLES or with an overlong line,
an .npz whose .npy headers declare more than a capture may hold, JSON metadata nested deeper
than MAX_JSON_DEPTH. Memory is measured with tracemalloc (numpy reports its buffers to it)."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from agent.capture import bounds
from agent.capture.bounds import (
    MAX_CAPTURE_BYTES,
    MAX_CAPTURE_SAMPLES,
    MAX_JSON_DEPTH,
    bounded_json,
    json_depth,
)
from agent.capture.files import load_capture, read_csv, save_capture
from agent.capture.multi import (
    MultiCapture,
    is_multi_capture,
    load_multi_capture,
    save_multi_capture,
)
from agent.errors import CaptureError
from tests.fuzz.cases.capture import deep_meta_json, npz_declaring
from tests.support.capture_files import refused, sample_capture, write

pytestmark = pytest.mark.usefixtures("_in_tmp")

MB = 1024 * 1024


def peak_bytes(action: Callable[[], object]) -> tuple[int, BaseException | None]:
    """The most memory `action` held at once, and what it raised."""
    tracemalloc.start()
    try:
        action()
        raised = None
    except BaseException as exc:
        raised = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, raised


# ---------------------------------------------------------------------------------- CSV


def test_a_csv_past_the_bound_is_refused_reading_a_chunk_at_a_time() -> None:
    rows = MAX_CAPTURE_SAMPLES + 50
    Path("big.csv").write_bytes(b"time_s,motor_pos_rad\n" + b"0,1\n" * rows)  # 8 MB
    peak, raised = peak_bytes(lambda: read_csv("big.csv"))
    assert isinstance(raised, CaptureError)
    assert str(raised).startswith(
        f"big.csv:{MAX_CAPTURE_SAMPLES + 2}: more than {MAX_CAPTURE_SAMPLES:,} sample rows"
    )
    # Before the bound, the file was decoded and split whole: over 100 MB for these 8 MB.
    assert peak < 4 * MB, f"peak {peak / MB:.1f} MB"


def test_the_csv_bound_counts_rows_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounds, "MAX_CAPTURE_SAMPLES", 10)
    rows = [f"{k * 1e-3!r},{k * 0.5!r}" for k in range(11)]
    header = "time_s,motor_pos_rad\n"
    assert len(load_capture(write("ok.csv", header + "\n".join(rows[:10]) + "\n"))) == 10
    assert len(load_capture(write("ok2.csv", header + "\n".join(rows[:10])))) == 10
    assert refused(write("over.csv", header + "\n".join(rows) + "\n")).startswith(
        "over.csv:12: more than 10 sample rows"
    )
    assert refused(write("over2.csv", header + "\n".join(rows))).startswith("over2.csv:12: more")


def test_an_overlong_csv_line_is_refused_naming_it() -> None:
    text = "time_s,motor_pos_rad\n0,1\n1," + "9" * 5000 + "\n2,3\n"
    assert refused(write("long.csv", text)).startswith(
        "long.csv:3: line longer than 4,096 bytes: not a row of a capture"
    )
    Path("noend.csv").write_bytes(b"time_s,motor_pos_rad\n0,1\n" + b"7" * (3 * 2**18))
    assert refused("noend.csv").startswith("noend.csv:3: line longer than 4,096 bytes")


def test_a_csv_larger_than_a_capture_may_be_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounds, "MAX_CAPTURE_BYTES", 1000)
    text = "time_s,motor_pos_rad\n" + "".join(f"{k},{k}.25\n" for k in range(200))
    assert "passes 1,000 bytes here" in refused(write("fat.csv", text))


# ---------------------------------------------------------------------------------- npz


@pytest.mark.parametrize(
    ("shape", "descr", "message"),
    [
        ((500_000_000,), "<f8", "entry 'motor_pos_rad' declares 500,000,000 samples"),
        ((3, 10**9), "<f8", f"would take more than {MAX_CAPTURE_BYTES:,} bytes once loaded"),
        ((), "<U2000000", "entry 'motor_pos_rad' declares 8,000,000 bytes of text; at most"),
    ],
)
def test_a_small_npz_declaring_a_huge_array_is_refused_without_allocating(
    shape: tuple[int, ...], descr: str, message: str
) -> None:
    data = npz_declaring(shape, descr)
    assert len(data) < 1000
    Path("bomb.npz").write_bytes(data)
    peak, raised = peak_bytes(lambda: load_capture("bomb.npz"))
    assert isinstance(raised, CaptureError), raised
    assert str(raised).startswith("bomb.npz: ") and message in str(raised)
    assert peak < 1 * MB, f"peak {peak / MB:.1f} MB"


def test_a_compressed_npz_expanding_past_the_bound_is_refused_unread() -> None:
    samples = MAX_CAPTURE_SAMPLES + 1
    np.savez_compressed(
        "zeros.npz",
        time_s=np.zeros(samples),  # 16 MB of zeros in about 16 kB
        motor_pos_rad=np.zeros(samples),
        meta_json=np.array('{"format_version": 1, "meta": {}}'),
    )
    assert Path("zeros.npz").stat().st_size < 200_000
    peak, raised = peak_bytes(lambda: load_capture("zeros.npz"))
    assert isinstance(raised, CaptureError)
    assert f"declares {samples:,} samples" in str(raised)
    assert peak < 1 * MB, f"peak {peak / MB:.1f} MB"


def test_an_entry_holding_less_than_its_header_declares_is_refused() -> None:
    buf = io.BytesIO()
    np.save(buf, np.arange(100.0))
    with zipfile.ZipFile("short.npz", "w") as z:
        z.writestr("time_s.npy", buf.getvalue()[:-80])
    assert "corrupt or truncated .npz archive (entry 'time_s': its header declares 800 bytes" in (
        refused("short.npz")
    )


def test_a_single_npy_named_npz_is_refused_before_numpy_reads_its_header() -> None:
    from tests.fuzz.cases.capture import npy_declaring

    Path("one.npz").write_bytes(npy_declaring((10**10,)))
    peak, raised = peak_bytes(lambda: load_capture("one.npz"))
    assert str(raised) == "one.npz: not an .npz archive (a single .npy array?)"
    assert peak < 1 * MB


def test_the_written_captures_still_load() -> None:
    cap = sample_capture(n=300)
    save_capture(cap, "ok.npz")
    save_capture(cap, "ok.csv")
    assert len(load_capture("ok.npz")) == len(load_capture("ok.csv")) == 300


# ---------------------------------------------------------------------------------- JSON


def test_meta_json_nested_1000_deep_is_a_capture_error_not_a_recursion_error() -> None:
    np.savez(
        "deep.npz",
        time_s=np.arange(3.0),
        motor_pos_rad=np.zeros(3),
        meta_json=np.array(deep_meta_json(1000)),
    )
    assert refused("deep.npz") == (
        f"deep.npz (meta_json): JSON nested 1003 deep; metadata nests at most {MAX_JSON_DEPTH} deep"
    )


def test_the_depth_is_counted_without_recursion_and_strings_do_not_count() -> None:
    assert json_depth("[" * 100_000) == 100_000
    assert json_depth('{"a": "[[[[{{{{", "b": [1, [2]]}') == 3
    assert json_depth(r'["\"[[[", [[]]]') == 3
    assert bounded_json('{"a": "' + "[" * 40 + '"}', "m") == {"a": "[" * 40}
    with pytest.raises(CaptureError, match="m: invalid JSON"):
        bounded_json("{", "m")
    with pytest.raises(CaptureError, match="m: 1,000,001 characters of JSON"):
        bounded_json(" " * 1_000_001, "m")


def multi() -> MultiCapture:
    t = np.arange(5) * 1e-3
    return MultiCapture(t, ("a", "b"), {"link_pos_rad": np.zeros((5, 2))}, source="m")


def test_a_multi_capture_is_held_to_the_same_bounds() -> None:
    save_multi_capture(multi(), "ok.npz")
    assert is_multi_capture("ok.npz") and len(load_multi_capture("ok.npz")) == 5
    Path("bomb.npz").write_bytes(npz_declaring((500_000_000,)))
    assert not is_multi_capture("bomb.npz")
    with pytest.raises(CaptureError, match="declares 500,000,000 samples"):
        load_multi_capture("bomb.npz")
    with zipfile.ZipFile("ok.npz") as z:
        members = {n: z.read(n) for n in z.namelist()}
    header = io.BytesIO()
    np.save(
        header, np.array('{"format": "jha-multi-capture", "x": ' + "[" * 1000 + "]" * 1000 + "}")
    )
    members["header_json.npy"] = header.getvalue()
    with zipfile.ZipFile("deep.npz", "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    assert not is_multi_capture("deep.npz")
    with pytest.raises(CaptureError, match=r"deep.npz \(header_json\): JSON nested 1001 deep"):
        load_multi_capture("deep.npz")


# ---------------------------------------------------------------------------------- sidecar


def test_a_sidecar_of_nested_aliases_is_refused_before_it_is_expanded() -> None:
    # Nine aliases of nine aliases, 7 deep: 4.8 M values from 400 bytes (9 levels: 387 M).
    levels = ["a: &l0 [" + ", ".join(["x"] * 9) + "]"]
    for k in range(1, 7):
        levels.append(f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]")
    side = "extra:\n" + "".join(f"  {line}\n" for line in levels)
    Path("laughs.csv.meta.yaml").write_text(side)
    Path("laughs.csv").write_text("time_s,motor_pos_rad\n0,1\n1,2\n")
    peak, raised = peak_bytes(lambda: load_capture("laughs.csv"))
    assert str(raised).startswith(
        "laughs.csv.meta.yaml: the metadata expands to more than 10,000 values (aliases?)"
    )
    assert peak < 1 * MB, f"peak {peak / MB:.1f} MB"


def test_an_oversized_sidecar_is_refused() -> None:
    Path("fat.csv.meta.yaml").write_text("extra: {a: '" + "x" * 1_000_000 + "'}\n")
    Path("fat.csv").write_text("time_s,motor_pos_rad\n0,1\n1,2\n")
    assert refused("fat.csv").startswith("fat.csv.meta.yaml: more than 1,000,000 bytes")
