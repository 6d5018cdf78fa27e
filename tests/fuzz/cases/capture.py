"""Capture files' fuzz inputs (CSV with its YAML sidecar, .npz) and the property a loaded
capture holds; used by tests/fuzz/test_fuzz_capture.py and tests/fuzz/atheris/capture.py."""

from __future__ import annotations

import functools
import io
import json
import math
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from agent.capture.checks import COUNT_CHANNELS, MOTOR_CHANNELS
from agent.capture.encoder import counts_per_turn
from agent.capture.files import load_capture, save_capture, sidecar_path
from agent.capture.model import CHANNEL_UNITS, Capture, CaptureMeta
from agent.errors import CaptureError
from tests.fuzz.harness import Oracle

CELLS = (
    "",
    " ",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e999",
    "-1e999",
    "0x10",
    "1_0",
    "1,5",
    "1.5.1",
    "٣",
    "+1",
    "-0",
    "0",
    "1e-320",
    "524287",
    "524288",
    "-1",
    "1.0",
    "1.5",
    "\t2",
    "2 ",
    '"3"',
    "9" * 400,
    "true",
    "\x00",
)


HEADER_NAMES = (*CHANNEL_UNITS, "time_s", "Time_s", "time", '"time_s"', "", "x;y", "time_s\t")


SIDECAR_LINES = (
    "encoder_bits: 40",
    "encoder_bits: 11",
    "encoder_bits: 19.5",
    "encoder_bits: true",
    "gear_ratio: -1",
    "gear_ratio: .nan",
    "gear_ratio: 1e999",
    "sample_rate_hz: 0",
    "commanded_speed_rad_s: [1, 2]",
    "joint: 3",
    "joint: 2024-01-01",
    "started_at: 2024-13-45",
    "extra: 5",
    "extra: {a: .nan}",
    "extra: {a: 2024-01-01}",
    "bogus: 1",
    "- a",
    "{",
    "&a [*a]",
    # Aliases of aliases: 100,000 values from one line (refused past MAX_SIDECAR_NODES).
    "extra: {l: [&a [x,x,x,x,x,x,x,x,x,x], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], "
    "&c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], "
    "[*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]]}",
    "machine: !!binary aGk=",
    "extra: {k: !!set {a}}",
    "cycle: null",
    "\x00",
    "'",
)


_FLOAT_CHANNELS = [c for c in CHANNEL_UNITS if c not in COUNT_CHANNELS]


def make_capture(seed: int) -> Capture:
    """A small valid capture: 2..40 samples, a motor channel, sometimes encoder counts."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 41))
    steps = rng.uniform(1e-6, 1.0, n - 1) if seed % 3 else np.full(n - 1, 2e-3)
    time_s = float(rng.uniform(-1e3, 1e3)) + np.concatenate(([0.0], np.cumsum(steps)))
    bits = int(rng.choice([12, 19, 32]))
    pool = _FLOAT_CHANNELS + list(COUNT_CHANNELS)
    names = set(rng.choice(pool, size=int(rng.integers(0, 5)), replace=False).tolist())
    if not names & set(MOTOR_CHANNELS):
        names.add(MOTOR_CHANNELS[seed % len(MOTOR_CHANNELS)])
    channels: dict[str, np.ndarray] = {}
    for name in sorted(names):
        if name in COUNT_CHANNELS:
            channels[name] = rng.integers(0, counts_per_turn(bits), n)
        else:
            channels[name] = rng.normal(0.0, 10.0, n)
    meta = CaptureMeta(
        machine=("robot1", "", "m\u00e9")[seed % 3],
        joint="axis1",
        commanded_speed_rad_s=None if seed % 4 == 0 else float(rng.uniform(-700, 700)),
        gear_ratio=None if seed % 5 == 0 else float(rng.uniform(0.5, 200)),
        encoder_bits=bits,
        sample_rate_hz=500.0,
        extra={"seed": seed},
    )
    return Capture(time_s, channels, meta)


POOL_SIZE = 24  # real files written by save_capture once per session; cases mutate copies


@functools.cache
def saved_pool(suffix: str) -> tuple[tuple[bytes, bytes], ...]:
    """(file bytes, sidecar bytes or b"") of POOL_SIZE captures written by save_capture."""
    out = []
    with tempfile.TemporaryDirectory(prefix="jha-fuzz-capture-") as tmp:
        for seed in range(POOL_SIZE):
            path = Path(tmp) / f"c{seed}{suffix}"
            save_capture(make_capture(seed), path)
            side = sidecar_path(path)
            out.append((path.read_bytes(), side.read_bytes() if side.exists() else b""))
    return tuple(out)


def check_capture(oracle: Oracle, cap: Capture) -> None:
    t = cap.time_s
    oracle.check(t.ndim == 1 and t.size >= 2, f"time_s of shape {t.shape}")
    oracle.check(bool(np.all(np.isfinite(t))), "time_s not finite")
    oracle.check(bool(np.all(np.diff(t) > 0)), "time_s not strictly increasing")
    oracle.check(any(c in cap.channels for c in MOTOR_CHANNELS), "no motor channel")
    for name, v in cap.channels.items():
        oracle.check(name in CHANNEL_UNITS, f"unknown channel {name!r}")
        oracle.check(v.shape == t.shape, f"{name} of shape {v.shape}, time {t.shape}")
        oracle.check(bool(np.all(np.isfinite(v))), f"{name} not finite")
        if name in COUNT_CHANNELS:
            bits = cap.meta.encoder_bits
            oracle.check(bits is not None, f"{name} without encoder_bits")
            oracle.check(v.dtype.kind == "i", f"{name} of dtype {v.dtype}")
            oracle.check(
                bool(np.all((v >= 0) & (v < counts_per_turn(bits or 12)))), f"{name} out of range"
            )
    m = cap.meta
    for f in ("commanded_speed_rad_s", "gear_ratio", "sample_rate_hz"):
        x = getattr(m, f)
        oracle.check(x is None or (type(x) is float and math.isfinite(x)), f"meta {f} = {x!r}")
    for f in ("machine", "joint", "cycle", "started_at"):
        oracle.check(isinstance(getattr(m, f), str), f"meta {f} = {getattr(m, f)!r}")
    oracle.check(isinstance(m.extra, dict), f"meta extra = {m.extra!r}")
    json.dumps(m.to_dict(), allow_nan=False)  # what the report and the outbox will do with it


@st.composite
def csv_cases(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    """(CSV bytes, sidecar bytes or None): a saved capture with a few edits, or garbage."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=300)), draw(st.none() | st.binary(max_size=100))
    pool = saved_pool(".csv")
    csv0, side0 = pool[draw(st.integers(0, len(pool) - 1))]
    lines = csv0.decode().split("\n")
    side = side0.decode().split("\n")
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(("cell", "cell", "cell", "row", "header", "side", "side", "raw")))
        k = draw(st.integers(0, len(lines) - 1))
        if op == "cell":
            cells = lines[k].split(",")
            j = draw(st.integers(0, len(cells) - 1))
            cells[j] = draw(st.sampled_from(CELLS) | st.text(max_size=8))
            lines[k] = ",".join(cells)
        elif op == "row":
            what = draw(st.sampled_from(("del", "dup", "swap", "blank", "short", "long")))
            if what == "del":
                del lines[k]
            elif what == "dup":
                lines.insert(k, lines[k])
            elif what == "swap" and k + 1 < len(lines):
                lines[k], lines[k + 1] = lines[k + 1], lines[k]
            elif what == "blank":
                lines.insert(k, draw(st.sampled_from(("", " ", "\r", "\t"))))
            elif what == "short":
                lines[k] = lines[k].rsplit(",", 1)[0]
            else:
                lines[k] += ",1"
        elif op == "header":
            names = lines[0].split(",")
            j = draw(st.integers(0, len(names)))
            name = draw(st.sampled_from(HEADER_NAMES))
            names[j : j + draw(st.integers(0, 1))] = [name]
            lines[0] = ",".join(names)
        elif op == "side":
            i = draw(st.integers(0, len(side)))
            side[i : i + draw(st.integers(0, 1))] = [draw(st.sampled_from(SIDECAR_LINES))]
        else:
            data = "\n".join(lines).encode("utf-8", "surrogateescape")
            pos = draw(st.integers(0, len(data)))
            blob = draw(st.sampled_from((b"\r\n", b"\xff", b"\xef\xbb\xbf", b"\x00", b",")))
            lines = (data[:pos] + blob + data[pos:]).decode("utf-8", "surrogateescape").split("\n")
    csv = "\n".join(lines).encode("utf-8", "surrogateescape")
    sidecar = "\n".join(side).encode("utf-8", "surrogateescape")
    return csv, (None if draw(st.integers(0, 9)) == 0 else sidecar)


def csv_case(case: tuple[bytes, bytes | None], oracle: Oracle, tmp: Path) -> None:
    csv, sidecar = case
    path = tmp / "fuzz.csv"
    path.write_bytes(csv)
    side = sidecar_path(path)
    if sidecar is None:
        side.unlink(missing_ok=True)
    else:
        side.write_bytes(sidecar)
    cap = load_capture(path)
    check_capture(oracle, cap)
    oracle.check(cap.source == str(path), f"source {cap.source!r}")


def names_file(exc: BaseException, name: str) -> bool:
    return isinstance(exc, CaptureError) and name in exc.source


WEIRD_ARRAYS: tuple[Any, ...] = (
    np.array([]),
    np.array(1.0),
    np.zeros((2, 2)),
    np.array(["a", "b"]),
    np.array([1 + 2j, 3j]),
    np.array([False, True]),
    np.array([np.nan, 1.0]),
    np.array([0, 1j, 2]),
    np.array([1, 2], dtype=np.uint64),
    np.array([2**63 - 1, 0], dtype=np.int64),
    np.array([1.0, 0.5], dtype=np.float16),
    np.array([0, 1], dtype="datetime64[s]"),
    np.array([b"x", b"y"]),
)


META_JSON = (
    "",
    "{",
    "[]",
    "null",
    '{"format_version": 1}',
    '{"format_version": 2, "meta": {}}',
    '{"format_version": true, "meta": {}}',
    '{"format_version": 1, "meta": []}',
    '{"format_version": 1, "meta": {"encoder_bits": 99}}',
    '{"format_version": 1, "meta": {"gear_ratio": NaN}}',
    '{"format_version": 1, "meta": {"gear_ratio": 1e999}}',
    '{"format_version": 1, "meta": {"joint": {"a": 1}}}',
    '{"format_version": 1, "meta": {"extra": {"a": [1, {"b": null}]}}}',
    '{"format_version": 1, "meta": {"' + "x" * 100 + '": 1}}',
    # Past agent.capture.bounds.MAX_JSON_DEPTH: json.loads would recurse to a RecursionError.
    '{"format_version": 1, "meta": {"extra": {"a": ' + "[" * 1000 + "]" * 1000 + "}}}",
    '{"format_version": 1, "meta": {"extra": {"a": "' + "[" * 1000 + '"}}}',  # text, not depth
)


@st.composite
def npz_cases(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=300))
    pool = saved_pool(".npz")
    data0 = pool[draw(st.integers(0, len(pool) - 1))][0]
    if draw(st.booleans()):
        data = bytearray(data0)
        for _ in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(("flip", "cut", "insert")))
            pos = draw(st.integers(0, max(0, len(data) - 1)))
            if op == "flip" and data:
                data[pos] = draw(st.integers(0, 255))
            elif op == "cut":
                del data[pos:]
            else:
                data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        return bytes(data)
    with np.load(io.BytesIO(data0), allow_pickle=False) as z:
        entries: dict[str, Any] = {k: z[k] for k in z.files}
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(("replace", "drop", "add", "meta", "shorten")))
        name = draw(st.sampled_from([*sorted(entries), "meta_json", "time_s", "bogus"]))
        if op == "replace":
            entries[name] = draw(st.sampled_from(WEIRD_ARRAYS))
        elif op == "drop":
            entries.pop(name, None)
        elif op == "add":
            entries[draw(st.sampled_from((*CHANNEL_UNITS, "x", "time_s")))] = entries.get(
                name, np.zeros(3)
            )
        elif op == "meta":
            entries["meta_json"] = np.array(draw(st.sampled_from(META_JSON)))
        elif name in entries and entries[name].ndim == 1 and entries[name].size:
            entries[name] = entries[name][:-1]
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **entries)
    return buf.getvalue()


def npz_case(data: bytes, oracle: Oracle, tmp: Path) -> None:
    path = tmp / "fuzz.npz"
    path.write_bytes(data)
    check_capture(oracle, load_capture(path))


def _npz_bytes(**entries: Any) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **entries)
    return buf.getvalue()


_META = np.array('{"format_version": 1, "meta": {}}')


def npy_declaring(shape: tuple[int, ...], descr: str = "<f8", data: bytes = b"") -> bytes:
    """A .npy entry whose header declares `shape` but which holds only `data`."""
    buf = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)  # type: ignore[no-untyped-call]
    return buf.getvalue() + data


def npz_declaring(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    """A small archive (a few hundred bytes) whose motor_pos_rad entry declares `shape`: numpy
    would allocate all of it before finding the data missing."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, value in (("meta_json", _META), ("time_s", np.arange(3.0))):
            entry = io.BytesIO()
            np.save(entry, value, allow_pickle=False)
            z.writestr(f"{name}.npy", entry.getvalue())
        z.writestr("motor_pos_rad.npy", npy_declaring(shape, descr, b"\0" * 24))
    return buf.getvalue()


def deep_meta_json(depth: int) -> str:
    return '{"format_version": 1, "meta": {"extra": {"a": ' + "[" * depth + "]" * depth + "}}}"


# Found by this fuzzer (fixed in agent/capture/files.py): a complex time_s was read with its
# imaginary part dropped (numpy's ComplexWarning the only trace) and a Boolean one as 0 and 1.
# Reported by a controls engineer (fixed in agent/capture/bounds.py): an archive of a few hundred
# bytes declaring 4 GB of samples was allocated before it was refused, and a meta_json nested
# 1000 deep ended in a RecursionError.
NPZ_REGRESSIONS = (
    _npz_bytes(time_s=np.array([0, 1 + 1j, 2]), motor_speed_rad_s=np.zeros(3), meta_json=_META),
    _npz_bytes(time_s=np.array([False, True]), motor_speed_rad_s=np.zeros(2), meta_json=_META),
    npz_declaring((500_000_000,)),
    npz_declaring((3, 10**9)),
    npz_declaring((), descr="<U2000000"),
    _npz_bytes(
        time_s=np.arange(3.0), motor_pos_rad=np.zeros(3), meta_json=np.array(deep_meta_json(1000))
    ),
)
