"""The PNG decoder the browser test reads Chromium's screenshots with
(tests/support/report/chromium.py), against a PNG made here with each of the five row filters."""

from __future__ import annotations

import struct
import zlib

import numpy as np

from tests.support.report.chromium import decode_png


def test_png_decoder_on_every_filter() -> None:
    """The decoder against a PNG made here with each row filter."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    rows, prev = [], np.zeros(21, dtype=np.int64)
    for y, kind in enumerate((0, 1, 2, 3, 4)):
        cur = img[y].ravel().astype(np.int64)
        left = np.concatenate([np.zeros(3, np.int64), cur[:-3]])
        upleft = np.concatenate([np.zeros(3, np.int64), prev[:-3]])
        if kind == 0:
            pred = np.zeros(21, np.int64)
        elif kind == 1:
            pred = left
        elif kind == 2:
            pred = prev
        elif kind == 3:
            pred = (left + prev) // 2
        else:
            p = left + prev - upleft
            pa, pb, pc = abs(p - left), abs(p - prev), abs(p - upleft)
            pred = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, prev, upleft))
        rows.append(bytes([kind]) + ((cur - pred) % 256).astype(np.uint8).tobytes())
        prev = cur

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 7, 5, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + chunk(b"IEND", b"")
    )
    assert np.array_equal(decode_png(png), img)
