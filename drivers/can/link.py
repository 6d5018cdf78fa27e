"""One open python-can bus of the `can` driver: a reader thread, the latest status, the capture.

python-can's receive calls block, so one thread per bus reads every frame, decodes it with the
DBC and keeps what the asyncio side asks for: the last status frame, the joint positions, and
the encoder frames of the capture in progress, handed to the armed CaptureRecorder
(drivers/can/recorder.py), which checks them as they come. The thread wakes the event loop only
for what matters (a status frame, the capture finishing or failing, the link breaking), not for
each of 8,000 frames a second.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import can

from agent.errors import DriverError
from drivers.can.dbc import CanProtocol, StatusFrame, decode_numbers, decode_status, encode
from drivers.can.recorder import CaptureRecorder
from drivers.can.settings import CanSettings

log = logging.getLogger(__name__)

_RECV_TIMEOUT_S = 0.05
# This many receive errors within _ERROR_WINDOW_S and the transport is taken as broken: python-can's
# socketcand client keeps an element it cannot parse in its buffer and fails every later read
# on it, in between handing out again the frames it had parsed before it (duplicates).
_MAX_ERRORS = 3
_ERROR_WINDOW_S = 1.0
_CONTROLLER_CLOCK_WRAP_S = 65.536


class _IncompleteReadFilter(logging.Filter):
    """python-can's socketcand client warns each time a TCP read ends inside a frame, which at
    thousands of frames a second is most reads; it is not an error, so it is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "incomplete message" not in record.getMessage()


_SOCKETCAND_LOG = logging.getLogger("can.interfaces.socketcand.socketcand")
if not any(isinstance(f, _IncompleteReadFilter) for f in _SOCKETCAND_LOG.filters):
    _SOCKETCAND_LOG.addFilter(_IncompleteReadFilter())


def bus_kwargs(settings: CanSettings, filters: list[dict[str, Any]]) -> dict[str, Any]:
    """Arguments of can.Bus for the configured interface."""
    kwargs: dict[str, Any] = {
        "interface": settings.interface,
        "channel": settings.channel,
        "can_filters": filters,
    }
    if settings.interface == "socketcand":
        kwargs.update(host=settings.host, port=settings.resolved_port, tcp_tune=True)
    elif settings.interface == "udp_multicast":
        kwargs.update(port=settings.resolved_port, fd=False)
    return kwargs


def open_bus(settings: CanSettings, filters: list[dict[str, Any]]) -> can.BusABC:
    return can.Bus(**bus_kwargs(settings, filters))


@dataclass
class PositionReading:
    position_rad: float
    received_at: float


class BusLink:
    """A started reader thread over an open bus; `wake` is called (from the thread) on news."""

    def __init__(
        self, bus: can.BusABC, proto: CanProtocol, wake: Callable[[], None], label: str
    ) -> None:
        self.bus = bus
        self.proto = proto
        self.label = label
        self._wake = wake
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closing = threading.Event()
        self.status: StatusFrame | None = None
        self.status_at: float | None = None
        self.positions: dict[int, PositionReading] = {}
        self.failure: str | None = None
        self.capture: CaptureRecorder | None = None
        self.frames_received = 0
        self.receive_errors = 0
        self._clock_raw: float | None = None
        self._clock_turns = 0
        self._thread = threading.Thread(target=self._run, name=f"can-rx {label}", daemon=True)
        # python-can's socketcand client returns None forever once the server has gone; the
        # socket itself (a private attribute, hence the getattr) tells a closed connection.
        self._tcp: socket.socket | None = getattr(bus, "_SocketCanDaemonBus__socket", None)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        self._closing.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        try:
            self.bus.shutdown()
        except Exception as exc:  # closing a broken transport may itself fail; nothing to save
            log.debug("event=can_shutdown_error error=%r", str(exc))

    # --- sending (any thread) ---------------------------------------------------------------
    def send(self, role: str, values: dict[str, Any]) -> None:
        message = getattr(self.proto, role)
        try:
            data = encode(message, values)
        except Exception as exc:  # cantools: value out of the DBC's range, unknown signal
            raise DriverError(
                f"{self.label}: cannot encode {message.name} {values}: {exc}"
            ) from exc
        frame = can.Message(
            arbitration_id=message.frame_id,
            is_extended_id=bool(message.is_extended_frame),
            data=data,
        )
        if self.failure is not None:
            raise DriverError(f"{self.label}: cannot send {message.name}: {self.failure}")
        try:
            with self._send_lock:
                self.bus.send(frame, timeout=0.5)
        except (can.CanError, OSError) as exc:
            self._fail(f"send failed: {exc}")
            raise DriverError(f"{self.label}: cannot send {message.name}: {exc}") from exc

    # --- what the asyncio side reads --------------------------------------------------------
    def snapshot(self) -> tuple[StatusFrame | None, float | None, dict[int, PositionReading]]:
        with self._lock:
            return self.status, self.status_at, dict(self.positions)

    def forget_position(self, joint_index: int) -> None:
        with self._lock:
            self.positions.pop(joint_index, None)

    def has_position(self, joint_index: int) -> bool:
        with self._lock:
            return joint_index in self.positions

    def arm(self, recorder: CaptureRecorder) -> None:
        with self._lock:
            self.capture = recorder

    def disarm(self) -> None:
        with self._lock:
            self.capture = None

    # --- the reader thread ------------------------------------------------------------------
    def _fail(self, reason: str) -> None:
        with self._lock:
            if self.failure is None:
                self.failure = reason
                log.warning("event=can_link_failed link=%r reason=%r", self.label, reason)
            if self.capture is not None:
                self.capture.fail(f"CAN link lost: {reason}")
        self._notify()

    def _notify(self) -> None:
        # RuntimeError: the event loop has closed, nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._wake()

    def _peer_closed(self) -> bool:
        if self._tcp is None:
            return False
        try:
            return self._tcp.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _run(self) -> None:
        error_times: list[float] = []
        while not self._closing.is_set():
            try:
                msg = self.bus.recv(timeout=_RECV_TIMEOUT_S)
            except Exception as exc:  # python-can raises CanError; some transports raw OSError
                if self._closing.is_set():
                    return
                if isinstance(exc.__cause__, OSError) or isinstance(exc, OSError):
                    self._fail(f"connection lost: {_first_line(exc.__cause__ or exc)}")
                    return
                now = time.monotonic()
                error_times = [t for t in error_times if now - t < _ERROR_WINDOW_S] + [now]
                self.receive_errors += 1
                with self._lock:
                    if self.capture is not None:
                        self.capture.fail(f"bus receive error: {_first_line(exc)}")
                self._notify()
                if len(error_times) >= _MAX_ERRORS:
                    self._fail(
                        f"{len(error_times)} receive errors within {_ERROR_WINDOW_S:g} s, "
                        f"last: {_first_line(exc)}"
                    )
                    return
                continue
            if msg is None:
                if self._peer_closed():
                    self._fail("connection closed by the peer")
                    return
                continue
            if msg.is_error_frame or msg.is_remote_frame:
                continue
            self.frames_received += 1
            self._dispatch(msg)

    def _dispatch(self, msg: can.Message) -> None:
        now = time.monotonic()
        fid = msg.arbitration_id
        proto = self.proto
        if fid == proto.encoder.frame_id:
            with self._lock:
                capture = self.capture
                finished = capture is not None and capture.on_frame(bytes(msg.data), now)
            if finished:
                self._notify()
            return
        try:
            if fid == proto.status.frame_id:
                status = decode_status(proto, bytes(msg.data))
                status = self._unwrap_clock(status)
                with self._lock:
                    self.status, self.status_at = status, now
                    if self.capture is not None:
                        self.capture.on_status(status)
                self._notify()
            elif fid == proto.joint_position.frame_id:
                v = decode_numbers(proto.joint_position, bytes(msg.data))
                with self._lock:
                    self.positions[int(v["JointIndex"])] = PositionReading(
                        float(v["Position"]), now
                    )
        except Exception as exc:  # a frame that does not decode: count it, the status ages out
            self.receive_errors += 1
            log.warning("event=can_bad_frame id=0x%X error=%r", fid, str(exc))

    def _unwrap_clock(self, status: StatusFrame) -> StatusFrame:
        raw = status.controller_time_s
        if self._clock_raw is not None and raw < self._clock_raw - _CONTROLLER_CLOCK_WRAP_S / 2:
            self._clock_turns += 1
        self._clock_raw = raw
        unwrapped = raw + self._clock_turns * _CONTROLLER_CLOCK_WRAP_S
        return StatusFrame(**{**status.__dict__, "controller_time_s": unwrapped})


def _first_line(exc: BaseException) -> str:
    """python-can puts a whole traceback in some messages; the first line says what happened."""
    text = str(exc).split("Traceback (most recent call last)")[0].strip()
    return text.splitlines()[0] if text else type(exc).__name__
