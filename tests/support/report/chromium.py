"""Looking at a page in headless Chromium with the standard library only: the DevTools protocol
over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-separated JSON, so no port is opened),
and a PNG decoder (zlib + the five row filters) for its screenshots.

    with chromium(profile_dir) as b:
        shot = look_at(b, page, "() => document.title")   # screenshot, DOM value, problems
        save_screenshot("run-report", shot.png)           # var/screenshots/run-report.png
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import struct
import subprocess
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.paths import ROOT

CHROMIUM = Path("/usr/bin/chromium")
# Where the tests leave their screenshots for people to look at (var/ is git-ignored).
SCREENSHOTS = ROOT / "var" / "screenshots"


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


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[Browser]:
    """Headless Chromium with the DevTools protocol on fds 3 and 4, closed on the way out."""
    assert CHROMIUM.exists(), "chromium is a system dependency (scripts/system-deps.sh)"
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()

    def pipes_on_3_and_4() -> None:  # runs in the child, before exec
        a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)  # out of the way of 3 and 4 first
        os.dup2(a, 3)
        os.dup2(b, 4)

    proc = subprocess.Popen(
        [
            str(CHROMIUM),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "about:blank",
        ],
        preexec_fn=pipes_on_3_and_4,
        close_fds=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(to_chrome_r)
    os.close(from_chrome_w)
    b = Browser(proc, to_chrome_w, from_chrome_r)
    try:
        yield b
    finally:
        try:
            b.send("Browser.close")
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)
        os.close(to_chrome_w)
        os.close(from_chrome_r)


@dataclass(frozen=True)
class Look:
    """What a page showed: its screenshot, the value of a DOM expression, and every console
    message, uncaught exception or error/warning log entry (a failed load is one)."""

    png: bytes
    dom: Any
    problems: list[str]


def evaluate(b: Browser, session: str, expression: str) -> Any:
    answer = b.call(
        "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
    )
    assert "exceptionDetails" not in answer, answer
    return answer["result"]["value"]


def look_at(b: Browser, page: Path, expression: str, width: int = 1280, height: int = 3000) -> Look:
    """Load `page` from its file in a new tab of `width` x `height` px, screenshot it and
    evaluate `expression` in it."""
    target = b.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = b.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    seen = len(b.events)
    for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
        b.call(domain, session=sid)
    b.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        session=sid,
    )
    b.call("Page.navigate", {"url": page.as_uri()}, session=sid)
    b.wait_for(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == sid)
    shot = b.call("Page.captureScreenshot", {"format": "png"}, session=sid)["data"]
    dom = evaluate(b, sid, expression)
    b.call("Target.closeTarget", {"targetId": target})
    problems = [
        json.dumps(e["params"])[:300]
        for e in b.events[seen:]
        if e.get("sessionId") == sid
        and (
            e.get("method") in ("Runtime.exceptionThrown", "Runtime.consoleAPICalled")
            or (
                e.get("method") == "Log.entryAdded"
                and e["params"]["entry"]["level"] in ("error", "warning")
            )
        )
    ]
    return Look(base64.b64decode(shot), dom, problems)


def save_screenshot(name: str, png: bytes) -> Path:
    """var/screenshots/<name>.png, for people to look at after the run."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    path.write_bytes(png)
    return path


def assert_not_blank(png: bytes, shape: tuple[int, int]) -> np.ndarray:
    """The screenshot decodes to `shape` (height, width) and shows something: ink on a white
    page and some colour (badges, plot lines). Returns the RGB pixels."""
    img = decode_png(png)
    assert img.shape[:2] == shape
    rgb = img[..., :3].astype(np.float64)
    assert rgb.std() > 20.0  # a blank page has none
    not_white = (rgb < 235).any(axis=2)
    assert 0.01 < not_white.mean() < 0.6
    saturated = (rgb.max(axis=2) - rgb.min(axis=2)) > 80
    assert saturated.sum() > 500
    return rgb


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
