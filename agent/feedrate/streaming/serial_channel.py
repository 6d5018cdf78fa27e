"""Byte channels for the G-code streamer: any OS byte stream with descriptors (serial device,
pty, pipe, socket), non-blocking, with timeouts on both directions.

agent.feedrate.streaming.grbl needs only the small `Channel` protocol, so tests can hand it a pipe
or a socketpair; `open_serial` opens a device or pty path through pyserial (raw 8N1).
"""

from __future__ import annotations

import os
import select
import termios
import time
from collections.abc import Callable
from typing import Protocol


class ChannelLost(Exception):
    """The port went away (EIO, end of file, closed)."""


class ChannelTimeout(Exception):
    """The other side took no data for the write timeout."""


class Channel(Protocol):
    name: str

    def write(self, data: bytes, timeout_s: float) -> None: ...
    def read(self, timeout_s: float) -> bytes: ...  # b"" when nothing came within timeout_s
    def discard_input(self) -> None: ...
    def close(self) -> None: ...


class FdChannel:
    """Any OS byte stream with descriptors (tty, pty, pipe, socket), non-blocking + select."""

    def __init__(
        self,
        fd: int,
        name: str,
        *,
        write_fd: int | None = None,
        closer: Callable[[], None] | None = None,
    ) -> None:
        self.name, self._rfd = name, fd
        self._wfd = fd if write_fd is None else write_fd
        self._closer = closer
        for f in {self._rfd, self._wfd}:
            os.set_blocking(f, False)

    def read(self, timeout_s: float) -> bytes:
        ready, _, _ = select.select([self._rfd], [], [], max(timeout_s, 0.0))
        if not ready:
            return b""
        try:
            data = os.read(self._rfd, 65536)
        except BlockingIOError:
            return b""
        except OSError as exc:
            raise ChannelLost(f"read failed: {exc}") from exc
        if not data:
            raise ChannelLost("end of stream (the other side closed the port)")
        return data

    def write(self, data: bytes, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._wfd, view) :]
                continue
            except BlockingIOError:
                pass
            except OSError as exc:
                raise ChannelLost(f"write failed: {exc}") from exc
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [self._wfd], [], left)[1]:
                raise ChannelTimeout(f"{self.name} took no data for {timeout_s:g} s")

    def discard_input(self) -> None:
        if os.isatty(self._rfd):
            termios.tcflush(self._rfd, termios.TCIFLUSH)
        while self.read(0.0):
            pass

    def close(self) -> None:
        if self._closer is not None:
            self._closer()
        else:
            for f in {self._rfd, self._wfd}:
                os.close(f)


def open_serial(port: str, baudrate: int = 115_200, *, exclusive: bool = True) -> FdChannel:
    """A serial device or pty path, configured by pyserial (raw 8N1), as a channel; ChannelLost
    when it cannot be opened."""
    import serial  # pyserial; imported here so that file channels do not need it

    try:
        ser = serial.Serial(port=port, baudrate=baudrate, timeout=0, exclusive=exclusive)
    except (serial.SerialException, OSError, ValueError) as exc:
        raise ChannelLost(f"cannot open serial port {port}: {exc}") from exc
    return FdChannel(ser.fileno(), port, closer=ser.close)
