"""A fake MQTT 5 server for the fleet's session tests: a plain TCP server whose every connection
runs a script the test writes (answer CONNECT with malformed bytes, send a CONNACK and a PUBLISH
in one write, never answer a PINGREQ...), recording every packet the client sent.

Its packets are built here from the byte layouts of the MQTT 5.0 specification (chapter 3), not
with the client's own codec (agent.fleet.mqtt_wire), so that the two check each other.

Also a relay in front of a real broker that can turn into a black hole: it keeps every
connection open and swallows what is sent both ways, as a hung broker or a link whose packets
vanish does (no RST, no FIN: only a keep alive notices).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

from tests.peers.mosquitto_broker import CuttableRelay

CONNECT, CONNACK, PUBLISH, PUBACK, SUBSCRIBE, SUBACK = 1, 2, 3, 4, 8, 9
PINGREQ, PINGRESP, DISCONNECT = 12, 13, 14


# -- server packets, from the spec's layouts ----------------------------------------------------


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def packet(first_byte: int, body: bytes) -> bytes:
    return bytes([first_byte]) + varint(len(body)) + body


def utf8(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def connack(session_present: bool = False, reason_code: int = 0, properties: bytes = b"") -> bytes:
    """Section 3.2; `properties` already encoded (identifier, value...)."""
    body = bytes([int(session_present), reason_code]) + varint(len(properties)) + properties
    return packet(CONNACK << 4, body)


def server_keep_alive(seconds: int) -> bytes:
    return struct.pack(">BH", 0x13, seconds)


def suback(packet_id: int, *reason_codes: int) -> bytes:
    return packet(SUBACK << 4, struct.pack(">HB", packet_id, 0) + bytes(reason_codes))


def publish(topic: str, payload: bytes, packet_id: int = 0, *, dup: bool = False) -> bytes:
    """QoS 1 with a packet id, else QoS 0; no properties."""
    qos = 1 if packet_id else 0
    first = (PUBLISH << 4) | (0x08 if dup else 0) | (qos << 1)
    pid = struct.pack(">H", packet_id) if packet_id else b""
    return packet(first, utf8(topic) + pid + b"\x00" + payload)


def disconnect(reason_code: int, reason: str | None = None) -> bytes:
    props = b"" if reason is None else b"\x1f" + utf8(reason)
    return packet(DISCONNECT << 4, bytes([reason_code]) + varint(len(props)) + props)


PINGRESP_PACKET = bytes([PINGRESP << 4, 0])


# -- the server ---------------------------------------------------------------------------------


class FakeConnection:
    """One accepted connection: read the client's packets, send whatever the script likes."""

    def __init__(self, sock: socket.socket, index: int) -> None:
        self.sock = sock
        self.index = index  # 0 for the first connection the client made
        self.received: list[tuple[int, bytes]] = []  # (packet type, body) of each client packet
        self.closed_by_client = False
        self._buffer = b""

    def read(self, timeout_s: float = 10.0) -> tuple[int, bytes] | None:
        """The client's next packet as (type, body), or None when it closed the connection."""
        self.sock.settimeout(timeout_s)
        while True:
            whole = self._split()
            if whole is not None:
                self.received.append(whole)
                return whole
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self.closed_by_client = True
                return None
            self._buffer += data

    def _split(self) -> tuple[int, bytes] | None:
        buf = self._buffer
        length, at = 0, 1
        for shift in (0, 7, 14, 21):
            if at >= len(buf):
                return None
            length |= (buf[at] & 0x7F) << shift
            at += 1
            if not buf[at - 1] & 0x80:
                break
        if len(buf) < at + length:
            return None
        self._buffer = buf[at + length :]
        return buf[0] >> 4, buf[at : at + length]

    def expect(self, kind: int, timeout_s: float = 10.0) -> bytes:
        got = self.read(timeout_s)
        assert got is not None, f"the client closed the connection instead of sending {kind}"
        assert got[0] == kind, f"expected packet type {kind}, got {got[0]}"
        return got[1]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def accept_session(self, session_present: bool = True, properties: bytes = b"") -> None:
        """CONNECT -> CONNACK, SUBSCRIBE -> SUBACK granting QoS 1 to every filter."""
        self.expect(CONNECT)
        self.send(connack(session_present, 0, properties))
        body = self.expect(SUBSCRIBE)
        self.send(suback(struct.unpack_from(">H", body)[0], 1))

    def drain(self, timeout_s: float = 30.0) -> None:
        """Record what the client sends until it closes the connection."""
        while self.read(timeout_s) is not None:
            pass

    def of_type(self, kind: int) -> list[bytes]:
        return [body for k, body in self.received if k == kind]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class FakeMqttServer:
    """Runs `script(connection)` on its own thread for every connection the client makes; the
    connection is closed when the script returns. Errors of a script are kept in `errors`."""

    def __init__(self, script: Callable[[FakeConnection], None]) -> None:
        self._script = script
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self.connections: list[FakeConnection] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                conn = FakeConnection(sock, len(self.connections))
                self.connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: FakeConnection) -> None:
        try:
            self._script(conn)
        except Exception as exc:  # reported to the test, which asserts there were none
            self.errors.append(f"connection {conn.index}: {type(exc).__name__}: {exc}")
        finally:
            conn.close()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.connections)

    def close(self) -> None:
        self._server.close()
        with self._lock:
            conns = list(self.connections)
        for c in conns:
            c.close()

    def __enter__(self) -> FakeMqttServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- a relay that can become a black hole -------------------------------------------------------


class BlackHoleRelay(CuttableRelay):
    """CuttableRelay whose `black_hole()` swallows every byte both ways on every connection, open
    or new, and hides a close from the other side; `restore()` resets the connections that lived
    through it (their bytes are lost) and lets new ones through again."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._swallowing = threading.Event()  # before the accept thread starts
        super().__init__(target_port, target_host)

    def black_hole(self) -> None:
        self._swallowing.set()

    def restore(self) -> None:
        self._swallowing.clear()
        self.cut()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:  # type: ignore[override]
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if not self._swallowing.is_set():
                    dst.sendall(data)
        if not self._swallowing.is_set():
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
