"""The socket between the UR driver and its worker process: length-prefixed pickles.

uint32 big-endian length + pickle payload, both ways, between two processes of the same
installation (the worker is the driver's child and inherits the socket). Requests
`{"id", "op", **args}`; replies `{"id", "ok": True, "result"}` or `{"id", "ok": False, "kind",
"error"}`. Messages without an id need no reply: the driver's heartbeat `{"op": "beat"}`, and the
worker's `{"id", "event": "aborting", "error"}` announcing an abort before its stop is sent.
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import struct
import threading
from typing import Any

LEN = struct.Struct(">I")
# The heartbeat frame, encoded once: the driver writes it every heartbeat_interval_s.
BEAT = {"op": "beat"}


def encode(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return LEN.pack(len(data)) + data


class Fault(Exception):
    """Ends a request: kind 'abort' (controller stopped or refused) or 'driver' (link failed)."""

    def __init__(self, message: str, kind: str = "driver") -> None:
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
