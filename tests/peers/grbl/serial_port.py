"""The GRBL peer's serial port (GRBL's serial.c) on the master side of a pty: the receive ring
of --rx-buffer bytes, the line the parser assembles from it, XON/XOFF in drip-feed mode, and the
transmit buffer (firmware.py decides what the bytes mean).

The ring holds only what the parser has not read yet: more than --rx-buffer bytes unread is a
protocol violation, counted (rx_overflow_bytes), reported on stderr and the excess dropped as
GRBL drops it. With --dnc it sends XOFF (0x13) when the ring holds >= 96 bytes and XON (0x11)
once it holds < 64 (GRBL's ENABLE_XONXOFF watermarks); bytes arriving in reads that started
after an XOFF was sent are counted (max_bytes_after_xoff): what the sender failed to hold back.

A real GRBL's receive interrupt never waits; this process can (a loaded host deschedules it). A
read in drip-feed mode that brings more than the ring's room above the XOFF mark is counted in
late_reads: bytes that came while the peer was not reading, so no XOFF could have stopped them
(at 115200 baud the 160 bytes above the mark take 14 ms). An overflow in such a run is the
host's, not the sender's; tests judge the sender by max_bytes_after_xoff, or run again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import sys
import termios
import time
from typing import Any


class SerialPort:
    """Receive ring, line buffer and transmit buffer; its counters go into the peer's stats."""

    def __init__(self, master: int, rx_buffer: int, dnc: bool, stats: dict[str, Any]) -> None:
        self.master, self.rx_buffer, self.dnc, self.stats = master, rx_buffer, dnc, stats
        self.rx, self.linebuf, self.tx = bytearray(), bytearray(), bytearray()
        self.slave = -1  # the pty's other end, to see what the client has not read yet
        self.xoff = self.xoff_counting = False
        self.after_xoff = 0

    def count(self, data: bytes) -> None:
        """What one read brought, before the real-time commands are taken out."""
        self.stats["bytes_received"] += len(data)
        self.stats["max_read_bytes"] = max(self.stats["max_read_bytes"], len(data))
        if self.dnc and len(data) > self.rx_buffer - 96:
            self.stats["late_reads"] += 1
        if self.xoff_counting:
            self.after_xoff += len(data)
            self.stats["max_bytes_after_xoff"] = max(
                self.stats["max_bytes_after_xoff"], self.after_xoff
            )
        if self.xoff:
            self.xoff_counting = True

    def store(self, data: bytes) -> None:
        room = self.rx_buffer - len(self.rx)
        if len(data) > room:
            self.stats["rx_overflow_bytes"] += len(data) - room
            print(
                f"grbl peer: RX buffer overflow, {len(data) - room} bytes dropped at line "
                f"{self.stats['lines_received'] + 1}",
                file=sys.stderr,
                flush=True,
            )
            data = data[: max(room, 0)]
        self.rx += data
        self.stats["rx_max_bytes"] = max(self.stats["rx_max_bytes"], len(self.rx))
        if self.dnc and not self.xoff and len(self.rx) >= 96:
            self.xoff = True
            self.stats["xoff_sent"] += 1
            self.tx[:0] = b"\x13"
            self.flush()

    def take_line(self) -> bytes | None:
        ends = [i for i in (self.rx.find(b"\n"), self.rx.find(b"\r")) if i >= 0]
        if not ends:
            self.linebuf += self.rx
            self.rx.clear()
            line = None
        else:
            k = min(ends)
            line = bytes(self.linebuf + self.rx[:k])
            del self.rx[: k + 1]
            self.linebuf.clear()
        if self.xoff and len(self.rx) < 64:
            self.xoff = self.xoff_counting = False
            self.after_xoff = 0
            self.stats["xon_sent"] += 1
            self.tx += b"\x11"
        return line

    def clear(self) -> None:
        self.rx.clear()
        self.linebuf.clear()

    def empty(self) -> bool:
        return not self.rx and not self.linebuf

    @property
    def rx_free(self) -> int:
        return self.rx_buffer - len(self.rx)

    def send(self, line: str) -> None:
        self.tx += line.encode() + b"\r\n"

    def drained(self, timeout_s: float = 1.0) -> None:
        """Wait until the other side has read what was written (a UART sends its last bytes
        before the line drops; a pty's unread bytes would vanish with the master)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.flush()
            waiting = struct.unpack("i", fcntl.ioctl(self.slave, termios.FIONREAD, b"\0" * 4))[0]
            if not self.tx and not waiting:
                return
            time.sleep(0.005)

    def flush(self) -> None:
        if self.tx:
            with contextlib.suppress(BlockingIOError):
                del self.tx[: os.write(self.master, self.tx)]
