"""The size bounds of a capture, and the checks that hold a file to them before it is loaded.

A capture file is untrusted input: a few megabytes of CSV rows or of a compressed .npz can stand
for gigabytes once parsed. Each reader here looks first (a streaming count of the CSV's lines, the
.npy headers inside the zip, the JSON's nesting depth) and refuses with CaptureError naming the
file, before anything proportional to the claimed size is allocated. The config uses the same
bound on the cycles it asks for (agent.config.load, agent.config.identification).
"""

from __future__ import annotations

import json
import math
import re
import zipfile
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy_format

from agent.errors import CaptureError

# Samples per channel of one capture, at most. A test cycle has to fit a production stop of a
# few minutes; at the rates cycles use, 500 Hz (the demo's) to 10 kHz, 2 M samples is about
# 200 s at 10 kHz or more than an hour at 500 Hz, far beyond what the defaults ask for (a 4.8 s
# backlash cycle at 500 Hz is 2,401 samples; the 31 s identification at 1 kHz, 31,001).
# One float64 channel is then 16 MB; a backlash capture (a time base and a few channels, read
# and fitted with two or three working copies) stays within a few hundred MB on an edge PC with
# 2 GB of RAM.
MAX_CAPTURE_SAMPLES = 2_000_000

# Bytes one capture file may hold or expand to once loaded: 32 float64 columns at the bound
# above (a 7-axis identification with 3 channels per joint and its time base is 22). The same
# figure bounds a CSV file's size (9 columns at the bound need about 450 MB of text).
MAX_CAPTURE_BYTES = 32 * 8 * MAX_CAPTURE_SAMPLES

# meta_json / header_json: a few hundred bytes in practice. Deeper nesting would make
# json.loads recurse past Python's limit (a RecursionError, not an error about the file).
MAX_JSON_DEPTH = 32
MAX_JSON_CHARS = 1_000_000

# A CSV row of 9 columns of shortest-repr floats is under 250 bytes; a longer line is not a row.
MAX_CSV_LINE_BYTES = 4096

# Entries of an .npz: a single-joint capture has at most 10, a multi-joint one 11.
_MAX_NPZ_ENTRIES = 64
_CHUNK_BYTES = 1 << 18
_NEWLINE = 0x0A


def capture_samples(duration_s: float, sample_rate_hz: float) -> int:
    """Samples per channel a cycle of `duration_s` sampled at `sample_rate_hz` captures (both
    ends, as agent.models.joint's simulation takes them)."""
    return round(duration_s * sample_rate_hz) + 1


# ---------------------------------------------------------------------------------- CSV


def scan_csv(f: IO[bytes], source: str) -> int:
    """Read `f` to its end in chunks, holding none of it; refuse a file of more lines than a
    header and MAX_CAPTURE_SAMPLES rows (blank lines count), a line longer than
    MAX_CSV_LINE_BYTES or more than MAX_CAPTURE_BYTES in all. Returns the file's size."""
    max_lines = MAX_CAPTURE_SAMPLES + 1
    newlines = 0  # seen so far: the line being read is newlines + 1
    open_bytes = 0  # bytes of that line so far
    total = 0
    while chunk := f.read(_CHUNK_BYTES):
        total += len(chunk)
        ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == _NEWLINE)
        if ends.size:
            lengths = np.diff(ends, prepend=-1) - 1
            lengths[0] += open_bytes
            long = np.flatnonzero(lengths > MAX_CSV_LINE_BYTES)
            if long.size:
                _too_long(source, newlines + int(long[0]) + 1)
            open_bytes = len(chunk) - int(ends[-1]) - 1
        else:
            open_bytes += len(chunk)
        newlines += int(ends.size)
        if open_bytes > MAX_CSV_LINE_BYTES:
            _too_long(source, newlines + 1)
        if newlines > max_lines or (newlines == max_lines and open_bytes > 0):
            raise CaptureError(
                f"{source}:{max_lines + 1}",
                f"more than {MAX_CAPTURE_SAMPLES:,} sample rows: a capture holds at most "
                f"{MAX_CAPTURE_SAMPLES:,} samples per channel (a header and that many lines; "
                "split the capture or lower the sample rate)",
            )
        if total > MAX_CAPTURE_BYTES:
            raise CaptureError(
                f"{source}:{newlines + 1}",
                f"the file passes {MAX_CAPTURE_BYTES:,} bytes here, the most a capture file may "
                "hold",
            )
    return total


def _too_long(source: str, line: int) -> None:
    raise CaptureError(
        f"{source}:{line}",
        f"line longer than {MAX_CSV_LINE_BYTES:,} bytes: not a row of a capture "
        "(a time and at most 8 channels, comma-separated)",
    )


# ---------------------------------------------------------------------------------- npz

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # what numpy's load takes for an archive


def is_zip(head: bytes) -> bool:
    return head.startswith(_ZIP_MAGIC)


def check_npz_archive(f: IO[bytes], source: str) -> None:
    """Refuse an archive whose entries, as their .npy headers declare them, would exceed the
    bounds once loaded: more than MAX_CAPTURE_SAMPLES rows in an array, more than
    MAX_CAPTURE_BYTES in all, a string entry over MAX_JSON_CHARS, or an entry whose size does
    not match its header. Reads only the zip directory and each header; `f` is left at 0."""
    try:
        with zipfile.ZipFile(f) as archive:
            infos = archive.infolist()
            if len(infos) > _MAX_NPZ_ENTRIES:
                raise CaptureError(
                    source,
                    f"the archive has {len(infos):,} entries; a capture has at most "
                    f"{_MAX_NPZ_ENTRIES}",
                )
            total = 0
            raw: list[str] = []
            for info in infos:
                name = info.filename.removesuffix(".npy")
                declared = _declared_bytes(archive, info, name, source)
                if declared is None:
                    raw.append(name)
                    continue
                total += declared
                if total > MAX_CAPTURE_BYTES:
                    raise CaptureError(
                        source,
                        f"the archive's arrays would take more than {MAX_CAPTURE_BYTES:,} bytes "
                        f"once loaded (at entry {name!r}), the most a capture may",
                    )
            if raw:
                # numpy would hand such an entry out as raw bytes, read whole, not as an array
                # (found by tests/fuzz/atheris/capture.py).
                raise CaptureError(source, f"archive entry {sorted(raw)[0]!r} is not a .npy array")
    except CaptureError:
        raise
    except Exception as e:
        # zipfile, zlib, struct and numpy's header reader each raise their own types on a
        # damaged archive; all of them mean the same thing here.
        raise CaptureError(
            source, f"corrupt or truncated .npz archive ({type(e).__name__}: {e})"
        ) from None
    finally:
        f.seek(0)


def _declared_bytes(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, source: str
) -> int | None:
    """The bytes the entry's array takes once loaded, or None when it is not a .npy array."""
    with archive.open(info) as entry:
        if entry.read(len(npy_format.MAGIC_PREFIX)) != npy_format.MAGIC_PREFIX:
            return None
        version = entry.read(2)
        if version == b"\x01\x00":
            shape, _, dtype = npy_format.read_array_header_1_0(entry)
        elif version == b"\x02\x00":
            shape, _, dtype = npy_format.read_array_header_2_0(entry)
        else:
            raise CaptureError(
                source, f"archive entry {name!r}: .npy format version {version!r} is not read"
            )
        header_bytes = entry.tell()
    rows = shape[0] if shape else 1
    if rows > MAX_CAPTURE_SAMPLES:
        raise CaptureError(
            source,
            f"archive entry {name!r} declares {rows:,} samples (shape {shape}); a capture holds "
            f"at most {MAX_CAPTURE_SAMPLES:,} per channel",
        )
    if dtype.hasobject:
        return 0  # numpy refuses it at its header (no pickle), before reading any data
    declared = math.prod(shape) * dtype.itemsize
    if dtype.kind in "US" and declared > 4 * MAX_JSON_CHARS:
        raise CaptureError(
            source,
            f"archive entry {name!r} declares {declared:,} bytes of text; at most "
            f"{4 * MAX_JSON_CHARS:,}",
        )
    held = info.file_size - header_bytes
    if declared <= MAX_CAPTURE_BYTES and held != declared:
        raise CaptureError(
            source,
            f"corrupt or truncated .npz archive (entry {name!r}: its header declares "
            f"{declared:,} bytes of data, the entry holds {held:,})",
        )
    return declared


# ---------------------------------------------------------------------------------- JSON

# A string token (escapes included) or one bracket; strings are skipped whole, so a bracket
# inside one does not count. Linear: no nested quantifier can backtrack.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in `text`, counted without recursion."""
    depth = deepest = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def bounded_json(text: str, where: str) -> Any:
    """json.loads(text) once its size and nesting are within bounds; CaptureError otherwise."""
    if len(text) > MAX_JSON_CHARS:
        raise CaptureError(
            where, f"{len(text):,} characters of JSON; metadata takes at most {MAX_JSON_CHARS:,}"
        )
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise CaptureError(
            where, f"JSON nested {depth} deep; metadata nests at most {MAX_JSON_DEPTH} deep"
        )
    try:
        return json.loads(text)
    except ValueError as e:
        raise CaptureError(where, f"invalid JSON: {e}") from None
