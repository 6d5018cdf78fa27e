"""Looking at a page in headless Chromium with the standard library only: the DevTools protocol
over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated JSON, so no port is opened),
and a PNG decoder (zlib + the five row filters) for its screenshots."""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CHROMIUM = Path("/usr/bin/chromium")


# -- DevTools over a pipe ----------------------------------------------------------------------


@dataclass
class Browser:
    proc: subprocess.Popen[bytes]
    to_chrome: int
    from_chrome: int
    events: list[dict[str, Any]] = field(default_factory=list)
    _buf: bytes = b""
    _next: int = 0

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> int:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        return self._next

    def wait_for(
        self, match: Callable[[dict[str, Any]], bool], timeout_s: float = 15.0
    ) -> dict[str, Any]:
        """The first message that matches; every other event is kept in self.events."""
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if match(msg):
                    return msg
                if "method" in msg:
                    self.events.append(msg)
            ready, _, _ = select.select(
                [self.from_chrome], [], [], max(0.0, deadline - time.monotonic())
            )
            if not ready:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed the DevTools pipe")
            self._buf += chunk

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        ident = self.send(method, params, session)
        answer = self.wait_for(lambda m: m.get("id") == ident)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result


# -- PNG without Pillow ------------------------------------------------------------------------


def decode_png(data: bytes) -> np.ndarray:
    """8-bit RGB/RGBA PNG -> (height, width, channels) array; all five row filters."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8)
    stride = width * bpp
    assert raw.size == height * (stride + 1)
    rows = raw.reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        kind, line = rows[y, 0], rows[y, 1:]
        if kind == 0:
            cur = line.copy()
        elif kind == 1:  # Sub: a running sum per channel
            cur = (
                (np.cumsum(line.reshape(-1, bpp).astype(np.int64), axis=0) % 256)
                .astype(np.uint8)
                .ravel()
            )
        elif kind == 2:  # Up
            cur = line + prev
        else:  # Average and Paeth depend on the byte just decoded: byte by byte
            cur = np.zeros(stride, dtype=np.uint8)
            for x in range(stride):
                a = int(cur[x - bpp]) if x >= bpp else 0
                b, c = int(prev[x]), int(prev[x - bpp]) if x >= bpp else 0
                if kind == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[x] = (int(line[x]) + pred) % 256
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)
