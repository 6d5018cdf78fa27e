"""The socket between the UR driver and its worker process: length-prefixed pickles.

uint32 big-endian length + pickle payload, both ways, between two processes of the same
installation (the worker is the driver's child and inherits the socket). Requests
`{"id", "op": Op, **args}`; replies `{"id", "ok": True, "result"}` or `{"id", "ok": False,
"kind": FaultKind, "error"}`. Messages without an id need no reply: the driver's heartbeat
`{"op": Op.BEAT}`. The worker's `{"id", "event": ABORTING, "error"}` announces an abort before
its stop is sent.
"""

from __future__ import annotations

import contextlib
import enum
import pickle
import socket
import struct
import threading
from typing import Any

LEN = struct.Struct(">I")


class Op(enum.StrEnum):
    """What the driver asks of the worker; the worker serves `op_<value>` (worker/server.py)."""

    CONNECT = "connect"
    STATUS = "status"
    CYCLE = "cycle"  # the backlash test cycle, on the worker's cycle thread
    EXCITE = "excite"  # the excitation trajectory, on the cycle thread
    STREAM = "stream"  # count RTDE packages without moving, on the cycle thread
    MOVE = "move"  # moveJ of one joint (the return to the test pose), on the cycle thread
    STOP = "stop"  # served at once by the worker's main thread
    # triggerProtectiveStop, the agent's last step when its stop left the arm moving; at once
    PROTECTIVE_STOP = "protective_stop"
    CLOSE = "close"
    BEAT = "beat"  # the driver's heartbeat: no id, no reply


class FaultKind(enum.StrEnum):
    """Why a request failed: the `kind` of a failed reply."""

    ABORT = "abort"  # the controller refused or stopped the motion (CycleAborted in the driver)
    DRIVER = "driver"  # communication failed (DriverError)


# The `event` of the worker's message announcing an abort before it sends the stop.
ABORTING = "aborting"
# The heartbeat message: the driver writes it every heartbeat_interval_s while a cycle runs.
BEAT = {"op": Op.BEAT}


def encode(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return LEN.pack(len(data)) + data


class Fault(Exception):
    """Ends a request; its kind goes into the failed reply."""

    def __init__(self, message: str, kind: FaultKind = FaultKind.DRIVER) -> None:
        super().__init__(message)
        self.kind = kind


def send_msg(sock: socket.socket, lock: threading.Lock, obj: Any) -> None:
    data = encode(obj)
    with lock:
        sock.sendall(data)


def tell(sock: socket.socket, lock: threading.Lock, obj: Any) -> None:
    """send_msg to a driver that may be gone (killed): nobody is left to tell, and what the
    worker does next (stop the arm) must not depend on it."""
    with contextlib.suppress(OSError):
        send_msg(sock, lock, obj)


def recv_msg(sock: socket.socket) -> Any:
    def exact(n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    head = exact(LEN.size)
    if head is None:
        return None
    body = exact(LEN.unpack(head)[0])
    return None if body is None else pickle.loads(body)
