"""A serial port as an asyncio byte stream (pyserial): the port handling the serial drivers share.

The encoder-board driver (drivers/serial/driver.py) speaks its binary frames over it; the GRBL
driver (drivers/grbl/driver.py) opens its port the same way and passes its own line protocol as
`on_data`:

    link = SerialLink("/dev/ttyUSB1", 115_200)
    link.open(on_data=parser.feed, on_lost=handle_lost)   # inside a running event loop
    await link.write(b"G1 X10 F600\\n", timeout_s=1.0)
    link.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Callable

import serial

from agent.errors import DriverError

__all__ = ["SerialLink"]

_READ_CHUNK = 65536
_GONE = "the port closed (board unplugged or its side of the line gone)"


class SerialLink:
    """One serial port as an asyncio byte stream, for any protocol spoken over it.

    pyserial opens and configures the port (raw 8N1 at the baud rate, optional exclusive lock);
    the event loop then reads it: every chunk goes to `on_data`, and the end of the port (device
    unplugged, the pty's other side closed, a read error) to `on_lost`, once. Writes never block
    the loop: they wait for the port to drain, with a timeout. Posix device paths only (pty,
    /dev/tty*); a URL port (socket://, rfc2217://) has no descriptor to watch.
    """

    def __init__(self, port: str, baudrate: int, *, exclusive: bool = True) -> None:
        self.port = port
        self.baudrate = baudrate
        self.exclusive = exclusive
        self._serial: serial.Serial | None = None
        self._fd = -1
        self._on_data: Callable[[bytes], None] = lambda data: None
        self._on_lost: Callable[[DriverError], None] = lambda exc: None
        self.error: DriverError | None = None

    @property
    def is_open(self) -> bool:
        return self._serial is not None and self.error is None

    def open(
        self, on_data: Callable[[bytes], None], on_lost: Callable[[DriverError], None]
    ) -> None:
        try:
            ser = serial.Serial(
                port=self.port, baudrate=self.baudrate, timeout=0, exclusive=self.exclusive
            )
        except (serial.SerialException, OSError, ValueError) as exc:
            raise DriverError(f"cannot open serial port {self.port}: {exc}") from exc
        try:
            ser.reset_input_buffer()  # bytes from before we came are not ours
        except (serial.SerialException, OSError) as exc:
            ser.close()
            raise DriverError(f"cannot use serial port {self.port}: {exc}") from exc
        self._serial, self._fd, self.error = ser, ser.fileno(), None
        self._on_data, self._on_lost = on_data, on_lost
        os.set_blocking(self._fd, False)
        asyncio.get_running_loop().add_reader(self._fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lose(_why(exc, "read"))
            return
        if not data:  # the same, as some drivers report it
            self._lose(_GONE)
            return
        try:
            self._on_data(data)
        except Exception as exc:  # a protocol that cannot go on: say so, do not spin
            self._lose(f"the protocol failed on received data: {type(exc).__name__}: {exc}")

    def _lose(self, why: str) -> DriverError:
        if self.error is None:
            self.error = DriverError(f"serial port {self.port}: {why}")
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._fd)
            self._on_lost(self.error)
        return self.error

    def write_nowait(self, data: bytes) -> int:
        """Write what the port takes now, without waiting; the number of bytes written."""
        if not self.is_open:
            return 0
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            self._lose(_why(exc, "write"))
            return 0

    async def write(self, data: bytes, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        view = memoryview(data)
        while view:
            if self.error is not None:
                raise self.error
            if self._serial is None:
                raise DriverError(f"serial port {self.port} is not open")
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                pass
            except OSError as exc:
                raise self._lose(_why(exc, "write")) from exc
            if view:
                await self._writable(deadline - loop.time())

    async def _writable(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_writer(self._fd, wake)
        try:
            async with asyncio.timeout(max(timeout_s, 0.0)):
                await ready
        except TimeoutError:
            raise DriverError(
                f"serial port {self.port} took no data for the write timeout (nobody reading?)"
            ) from None
        finally:
            loop.remove_writer(self._fd)

    def close(self) -> None:
        if self._serial is None:
            return
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._fd)
        with contextlib.suppress(Exception):
            self._serial.close()
        self._serial, self._fd = None, -1


def _why(exc: OSError, what: str) -> str:
    # EIO: a pty whose other side closed, a USB adapter pulled out.
    return _GONE if exc.errno == errno.EIO else f"{what} failed: {exc}"
