"""Progress of a long command on the terminal: `[2/3 12.4 s] simulating the excitation...`.

Only when stderr is a terminal: a pipe, a file or the journal gets no carriage returns (the
daemon logs its own progress as events). Each step names what runs now and the time so far;
with a known share of the work done it adds an ETA.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Steps:
    def __init__(self, total: int, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self.k = 0
        self._width = 0

    def step(self, what: str, share_done: float | None = None) -> None:
        """Starting step k+1 of total (`share_done`: the fraction of the work done before it,
        for the ETA)."""
        self.k += 1
        elapsed = time.monotonic() - self.started
        eta = ""
        if share_done is not None and 0.0 < share_done < 1.0:
            eta = f", about {elapsed * (1.0 - share_done) / share_done:.0f} s left"
        self._show(f"[{self.k}/{self.total} {elapsed:.1f} s{eta}] {what}...")

    def done(self, what: str = "done") -> None:
        self._show(f"[{self.total}/{self.total} {time.monotonic() - self.started:.1f} s] {what}")
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _show(self, text: str) -> None:
        if not self.tty:
            return
        pad = " " * max(0, self._width - len(text))
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self._width = len(text)
