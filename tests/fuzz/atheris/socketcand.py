"""atheris target `socketcand_lines`: bytes from a socketcand server through the real receive path.

Per input, a socketcand server on loopback (a thread of this process) accepts python-can's
socketcand client, completes the handshake (`< hi >`, `< open can0 >` / `< ok >`, `< rawmode >`
/ `< ok >`), sends the input as the bus traffic and closes the connection. The client side is
what the CAN driver runs: python-can's SocketCanDaemonBus (its ASCII parser instrumented for
coverage too) under BusLink's reader loop, run here on the calling thread until it ends.

Property: the reader loop ends (the server closed the connection: never a hang), with the link
failed for a reason that says so (closed, or receive errors, never an exception escaping the
loop), and what it kept from the frames is valid (tests/fuzz/atheris_can.check_link).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
from collections.abc import Iterator

from can.interfaces.socketcand.socketcand import SocketCanDaemonBus

import drivers.can.link
from drivers.can.link import BusLink
from tests.fuzz.atheris.can import check_link, reset
from tests.fuzz.atheris.oracle import Target, check, guarded
from tests.fuzz.cases.can import PROTO, frame_line

CHANNEL = "can0"
# python-can logs every element it cannot parse, with a traceback: thousands of lines per run
# that say what the property checks anyway.
logging.getLogger("can.interfaces.socketcand.socketcand").setLevel(logging.CRITICAL)
logging.getLogger("drivers.can.link").setLevel(logging.CRITICAL)
# The reader's poll interval (50 ms in the driver). At end of stream python-can's recv spins
# until its timeout runs out before BusLink can see the closed socket: 50 ms per input would
# be 20 inputs a second. Only how often the loop looks changes, not what it does.
drivers.can.link._RECV_TIMEOUT_S = 0.001


def _read_until_close(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b">"):
        chunk = conn.recv(256)
        if not chunk:
            break
        data += chunk
    return data


class LoopbackServer:
    """A socketcand server speaking just what python-can's client needs, one client at a time.

    The input is sent only after the client's constructor has returned (`ready`): python-can
    checks each `< ok >` with one recv, so traffic in the same read would fail its handshake.
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = int(self.sock.getsockname()[1])
        self.payloads: queue.Queue[bytes] = queue.Queue()
        self.ready = threading.Event()
        self.served = threading.Event()
        threading.Thread(target=self._serve, name="socketcand-fuzz", daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            payload = self.payloads.get()
            # A client that gives up half way (an input that broke it) must not end the server.
            with conn, contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.sendall(b"< hi >")
                if _read_until_close(conn) == f"< open {CHANNEL} >".encode():
                    conn.sendall(b"< ok >")
                    if _read_until_close(conn) == b"< rawmode >":
                        conn.sendall(b"< ok >")
                        self.ready.wait()
                        self.ready.clear()
                        conn.sendall(payload)
            self.served.set()


SERVER = LoopbackServer()


def _socketcand(data: bytes) -> None:
    SERVER.served.clear()
    SERVER.payloads.put(data)
    # tcp_tune as drivers.can.link.bus_kwargs opens it (no Nagle delay on the small replies)
    bus = SocketCanDaemonBus(channel=CHANNEL, host="127.0.0.1", port=SERVER.port, tcp_tune=True)
    link = BusLink(bus, PROTO, lambda: None, "atheris")
    recorder = reset(link)
    SERVER.ready.set()
    try:
        SERVER.served.wait()
        link._run()  # the reader thread's loop, here on this thread: it returns when it ends
    finally:
        bus.shutdown()
    check(link.failure is not None, "the reader loop ended without a failure")
    reason = link.failure or ""
    check(
        "closed by the peer" in reason or "receive error" in reason or "connection lost" in reason,
        f"link failed for {reason!r}",
    )
    check_link(link, recorder)


def seeds() -> Iterator[bytes]:
    """Frames as the socketcand peer forwards them: status, position, an encoder stream."""
    status = PROTO.status.frame_id
    lines = [
        frame_line(status, bytes.fromhex("2105000000051234")),
        frame_line(PROTO.joint_position.frame_id, bytes.fromhex("0300000400")),
    ]
    for k in range(12):
        lines.append(frame_line(PROTO.encoder.frame_id, bytes((k, 0, 7, 0, 0, 1, 0, 3))))
    yield "".join(lines).encode()
    yield "".join(lines[:3]).encode() + b"< frame 7FF 1.5 00 >< error 1 2 >"


TARGET = Target("socketcand_lines", guarded(_socketcand), seeds, doc=__doc__ or "")
