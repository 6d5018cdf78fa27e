"""Capture files: CSV with unit-carrying column names (+ a YAML metadata sidecar), and `.npz`.

CSV: a header row of channel names (`time_s` first on write), one row per sample, floats in
shortest round-trip form (`repr`), encoder counts as integers; the metadata goes to
`<file>.meta.yaml` beside it. Native: `.npz` with one array per channel plus `meta_json`, a JSON
string {"format_version": 1, "meta": {...}}; read without pickle.

Every problem with a file raises CaptureError naming the file, the line (CSV) and the column.
A file is held to agent.capture.bounds (samples per channel, bytes, JSON depth) before it is
parsed or its arrays are allocated.
What is written is checked by the same rules as what is read, so every saved capture loads back.
All writes are atomic (agent.atomic).
The metadata rules are agent.capture.metadata's, the sample rules agent.capture.checks'.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from pathlib import Path

import numpy as np
import yaml

from agent.atomic import atomic_write_bytes, atomic_write_text, atomic_writer
from agent.capture.bounds import bounded_json, check_npz_archive, is_zip, scan_csv
from agent.capture.checks import (
    COUNT_CHANNELS,
    at_line,
    at_sample,
    check_content,
)
from agent.capture.metadata import check_meta, merge_meta, meta_from_mapping, read_sidecar
from agent.capture.model import CHANNEL_UNITS, Array, Capture, CaptureMeta
from agent.errors import CaptureError, unreadable

StrPath = str | os.PathLike[str]

NPZ_FORMAT_VERSION = 1
SIDECAR_SUFFIX = ".meta.yaml"
ACCEPTED_COLUMNS = ("time_s", *CHANNEL_UNITS)


def sidecar_path(path: StrPath) -> Path:
    """Where the metadata of a CSV capture lives: `<path>.meta.yaml`."""
    return Path(os.fspath(path) + SIDECAR_SUFFIX)


# ---------------------------------------------------------------------------------- CSV


def write_csv(capture: Capture, path: StrPath, *, require_motor: bool = True) -> None:
    """Write `capture` as CSV (time_s first) and its metadata to the `.meta.yaml` sidecar
    (`require_motor=False`: a link-only capture, read back the same way)."""
    source = os.fspath(path)
    meta = check_meta(capture.meta, source)
    channels = check_content(
        source,
        capture.time_s,
        capture.channels,
        meta,
        at_sample(source),
        require_motor=require_motor,
    )
    names = ["time_s", *channels]
    columns: list[list[str]] = []
    for name in names:
        values = capture.time_s if name == "time_s" else channels[name]
        if name in COUNT_CHANNELS:
            columns.append(list(map(str, values.tolist())))
        else:
            # repr is the shortest text that reads back to the identical float.
            columns.append(list(map(repr, np.asarray(values, dtype=np.float64).tolist())))
    text = ",".join(names) + "\n" + "\n".join(map(",".join, zip(*columns, strict=True))) + "\n"
    sidecar = f"# metadata of {Path(source).name} (agent.capture.files)\n" + yaml.safe_dump(
        meta.to_dict(), sort_keys=False, allow_unicode=True
    )
    # Both texts are complete before either file is touched. Two renames cannot be one atomic
    # step, so if the second fails the first is undone: rows and metadata stay a pair.
    side = sidecar_path(path)
    old_side: bytes | None = None
    restorable = True
    try:
        old_side = side.read_bytes()
    except FileNotFoundError:
        pass
    except OSError:
        restorable = False
    atomic_write_text(side, sidecar)
    try:
        atomic_write_text(path, text)
    except BaseException:
        if restorable:
            with contextlib.suppress(OSError):
                if old_side is None:
                    side.unlink()
                else:
                    atomic_write_bytes(side, old_side)
        raise


def _column_name(field_text: str) -> str:
    name = field_text.strip()
    if len(name) >= 2 and name[0] == name[-1] == '"':
        name = name[1:-1].strip()  # some exporters quote every header field
    return name


def _is_number(text: str) -> bool:
    # As strict as numpy's loadtxt (the fast path): no "1_000", no non-ASCII digits.
    if "_" in text or not text.isascii():
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_header(names: list[str], src: str) -> None:
    if all(_is_number(n) for n in names):
        raise CaptureError(
            src,
            f"no header row: this line holds numbers; the first line must name the "
            f"columns ({', '.join(ACCEPTED_COLUMNS)})",
        )
    seen: dict[str, int] = {}
    for j, name in enumerate(names, start=1):
        if not name:
            raise CaptureError(src, f"column {j} has no name")
        if name not in ACCEPTED_COLUMNS:
            hint = " (the separator is a comma)" if ";" in name or "\t" in name else ""
            raise CaptureError(
                src,
                f"unknown column {name[:60]!r}{hint}; accepted columns: "
                f"{', '.join(ACCEPTED_COLUMNS)}",
            )
        if name in seen:
            raise CaptureError(src, f"column {name} appears twice (columns {seen[name]} and {j})")
        seen[name] = j
    if "time_s" not in seen:
        raise CaptureError(src, "no time_s column: every capture needs its time base in seconds")


def _parse_rows(source: str, body: list[str], line_nos: list[int], names: list[str]) -> Array:
    """The table, or CaptureError at the first bad row or field (the slow, exact pass)."""
    width = len(names)
    values: list[float] = []
    for row, line in enumerate(body):
        fields_text = line.split(",")
        if len(fields_text) != width:
            raise CaptureError(
                f"{source}:{line_nos[row]}",
                f"row has {len(fields_text)} fields, the header has {width}",
            )
        for name, text in zip(names, fields_text, strict=True):
            if not _is_number(text):
                text = text.strip()
                problem = "empty value" if not text else f"{text[:40]!r} is not a number"
                raise CaptureError(f"{source}:{line_nos[row]}", f"column {name}: {problem}")
            values.append(float(text))
    return np.array(values, dtype=np.float64).reshape(len(body), width)


def _fast_table(rows_text: str, shape: tuple[int, int]) -> Array | None:
    """numpy's C parser on the data rows, or None when it cannot vouch for the result."""
    if "\r" in rows_text:
        return None  # a bare CR is a line break to loadtxt but not to the line numbering
    try:
        table = np.loadtxt(
            io.StringIO(rows_text), delimiter=",", comments=None, dtype=np.float64, ndmin=2
        )
    except Exception:
        # Any complaint (bad number, ragged row, blank-looking line) goes to the exact pass,
        # which names the line; loadtxt's own exception types are not part of its contract.
        return None
    return table if table.shape == shape else None


def _read_bounded(path: StrPath, source: str) -> bytes:
    """The file's bytes, once a streaming pass has found it within the capture bounds."""
    try:
        with open(path, "rb") as f:
            size = scan_csv(f, source)
            f.seek(0)
            data = f.read(size + 1)
    except OSError as e:
        raise unreadable(source, e) from None
    if len(data) > size:
        raise CaptureError(source, "the file grew while it was read; read it once it is complete")
    return data


def read_csv(
    path: StrPath, meta: CaptureMeta | None = None, *, require_motor: bool = True
) -> Capture:
    """Read a CSV capture; metadata from the sidecar, then each field `meta` sets on top."""
    source = os.fspath(path)
    side = sidecar_path(path)
    base = read_sidecar(side) if side.is_file() else CaptureMeta()
    merged = check_meta(merge_meta(base, meta), source)
    data = _read_bounded(path, source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad_line = data.count(b"\n", 0, e.start) + 1
        raise CaptureError(f"{source}:{bad_line}", "not UTF-8 text") from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    if not text.strip():
        raise CaptureError(source, "the file is empty")
    lines = text.split("\n")
    head = next(i for i, line in enumerate(lines) if line.strip())
    header_src = f"{source}:{head + 1}"
    names = [_column_name(f) for f in lines[head].split(",")]
    _check_header(names, header_src)

    # Blank lines (a trailing one above all) are skipped; line_nos maps rows to file lines.
    line_nos = [i + 1 for i in range(head + 1, len(lines)) if lines[i].strip()]
    if len(line_nos) < 2:
        raise CaptureError(source, f"needs at least two samples, found {len(line_nos)}")
    table = _fast_table("\n".join(lines[head + 1 :]), (len(line_nos), len(names)))
    if table is None:
        body = [lines[n - 1] for n in line_nos]
        table = _parse_rows(source, body, line_nos, names)
    finite = np.isfinite(table)
    if not finite.all():
        row, col = (int(k) for k in np.argwhere(~finite)[0])
        value = lines[line_nos[row] - 1].split(",")[col].strip()
        raise CaptureError(
            f"{source}:{line_nos[row]}", f"column {names[col]}: {value[:40]!r} is not finite"
        )
    time_s = table[:, names.index("time_s")]
    channels = {name: table[:, j] for j, name in enumerate(names) if name != "time_s"}
    channels = check_content(
        header_src,
        time_s,
        channels,
        merged,
        at_line(source, line_nos),
        require_motor=require_motor,
    )
    return Capture(time_s, channels, merged, source)


# ---------------------------------------------------------------------------------- npz


def write_npz(capture: Capture, path: StrPath) -> None:
    """Write `capture` as `.npz`: one array per channel, `time_s`, and `meta_json`."""
    source = os.fspath(path)
    meta = check_meta(capture.meta, source)
    channels = check_content(source, capture.time_s, capture.channels, meta, at_sample(source))
    meta_json = json.dumps(
        {"format_version": NPZ_FORMAT_VERSION, "meta": meta.to_dict()},
        allow_nan=False,
        ensure_ascii=False,
    )
    arrays: dict[str, np.ndarray] = {"time_s": np.asarray(capture.time_s, dtype=np.float64)}
    for name, values in channels.items():
        arrays[name] = values if name in COUNT_CHANNELS else values.astype(np.float64)
    arrays["meta_json"] = np.array(meta_json)
    with atomic_writer(path, "wb") as f:
        np.savez_compressed(f, allow_pickle=False, **arrays)


def _npz_entries(path: StrPath, source: str) -> dict[str, np.ndarray]:
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, after the archive is read
    except OSError as e:
        raise unreadable(source, e) from None
    with fh:
        head = fh.read(len(np.lib.format.MAGIC_PREFIX))
        fh.seek(0)
        if head == np.lib.format.MAGIC_PREFIX:
            # Refused before numpy reads it: a .npy header may declare any size.
            raise CaptureError(source, "not an .npz archive (a single .npy array?)")
        if is_zip(head):
            check_npz_archive(fh, source)
        try:
            loaded = np.load(fh, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise CaptureError(source, "not an .npz archive (a single .npy array?)")
            with loaded:
                entries = {name: loaded[name] for name in loaded.files}
            # numpy hands out an entry without the .npy magic as raw bytes, not an array
            # (found by tests/fuzz/atheris/capture.py).
            raw = sorted(n for n, value in entries.items() if not isinstance(value, np.ndarray))
            if raw:
                raise CaptureError(source, f"archive entry {raw[0]!r} is not a .npy array")
            return entries
        except CaptureError:
            raise
        except Exception as e:
            # zipfile, zlib, struct and numpy's format reader each raise their own types on a
            # damaged archive; all of them mean the same thing here.
            raise CaptureError(
                source, f"corrupt or truncated .npz archive ({type(e).__name__}: {e})"
            ) from None


def _npz_meta(entry: np.ndarray, source: str) -> CaptureMeta:
    where = f"{source} (meta_json)"
    if entry.ndim != 0 or entry.dtype.kind != "U":
        raise CaptureError(source, "meta_json must be a single string")
    doc = bounded_json(str(entry[()]), where)
    if not isinstance(doc, dict) or "format_version" not in doc or "meta" not in doc:
        raise CaptureError(where, "expected an object with format_version and meta")
    version = doc["format_version"]
    if version != NPZ_FORMAT_VERSION or isinstance(version, bool):
        raise CaptureError(
            where, f"format_version {version!r} is not one this reader knows ({NPZ_FORMAT_VERSION})"
        )
    return meta_from_mapping(doc["meta"], where)


def read_npz(
    path: StrPath, meta: CaptureMeta | None = None, *, require_motor: bool = True
) -> Capture:
    """Read an `.npz` capture written by write_npz; each field `meta` sets overrides the file's."""
    source = os.fspath(path)
    entries = _npz_entries(path, source)
    for required in ("meta_json", "time_s"):
        if required not in entries:
            raise CaptureError(source, f"the archive has no {required} entry")
    merged = check_meta(merge_meta(_npz_meta(entries.pop("meta_json"), source), meta), source)
    time_s = entries.pop("time_s")
    if time_s.dtype.kind not in "iuf":
        # Capture would cast it: a complex time base loses its imaginary part, Booleans become
        # 0 and 1, both without a word (found by tests/fuzz/test_fuzz_capture.py).
        raise CaptureError(source, f"time_s must hold real numbers, not {time_s.dtype} values")
    # Capture checks names, shapes, number types and finiteness; the rest is checked after.
    first = Capture(time_s, entries, merged, source)
    channels = check_content(
        source,
        first.time_s,
        first.channels,
        merged,
        at_sample(source),
        require_motor=require_motor,
    )
    for name, values in channels.items():
        if name not in COUNT_CHANNELS:
            channels[name] = values.astype(np.float64)
    return Capture(first.time_s, channels, merged, source)


# ---------------------------------------------------------------------------------- dispatch

_FORMATS = (".csv", ".npz")


def _suffix(path: StrPath) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in _FORMATS:
        raise CaptureError(
            os.fspath(path),
            f"unknown capture format {suffix or '(no suffix)'!r}; expected one of "
            f"{', '.join(_FORMATS)}",
        )
    return suffix


def load_capture(
    path: StrPath, meta: CaptureMeta | None = None, *, require_motor: bool = True
) -> Capture:
    """Read a `.csv` or `.npz` capture; fields `meta` sets override the file's metadata.
    `require_motor=False` accepts a capture without a motor channel (link position and torque:
    what a rigid identification needs)."""
    suffix = _suffix(path)
    _check_regular(path)
    if suffix == ".csv":
        return read_csv(path, meta, require_motor=require_motor)
    return read_npz(path, meta, require_motor=require_motor)


def _check_regular(path: StrPath) -> None:
    """A FIFO named like a capture would block its reader forever (the CLI, or the daemon's
    recovery of captures/): only a regular file is opened."""
    source = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise unreadable(source, exc) from None
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else (
            "a device or socket")  # fmt: skip
        raise CaptureError(source, f"expected a capture file, found {kind}")


def save_capture(capture: Capture, path: StrPath) -> None:
    """Write `capture` as `.csv` (+ sidecar) or `.npz`, atomically, by the path's suffix."""
    if _suffix(path) == ".csv":
        write_csv(capture, path)
    else:
        write_npz(capture, path)
