"""RTDE on port 30004: the Universal Robots Real-Time Data Exchange, protocol version 2.

Every package is `uint16 size (header included) | uint8 type | payload`, big-endian. Types:
V request protocol version, v get URControl version, O setup outputs (double frequency + names),
I setup inputs (names), S start, P pause, U data package (uint8 recipe id + values), M text message.
Each connection has its own output recipe (sent every `controller_hz / frequency` cycles once
started) and its own input recipes, numbered from 1 in the order they were set up (ur_rtde relies
on that numbering). An input variable already written by another connection's recipe answers
IN_USE; an unknown name answers NOT_FOUND.

Sends never block the controller cycle: a client that stops reading until its socket buffer is
full is disconnected, as a real controller drops a client that cannot keep up.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("ur_controller.rtde")

RTDE_PORT = 30004
PROTOCOL_VERSION = 2
HEADER = struct.Struct(">HB")

# Wire formats of the RTDE types (big-endian).
FORMATS: dict[str, str] = {
    "BOOL": "?",
    "UINT8": "B",
    "UINT32": "I",
    "UINT64": "Q",
    "INT32": "i",
    "DOUBLE": "d",
    "VECTOR3D": "3d",
    "VECTOR6D": "6d",
    "VECTOR6INT32": "6i",
    "VECTOR6UINT32": "6I",
}

_V6 = [
    "target_q",
    "target_qd",
    "target_qdd",
    "target_current",
    "target_moment",
    "actual_q",
    "actual_qd",
    "actual_current",
    "joint_control_output",
    "actual_TCP_pose",
    "actual_TCP_speed",
    "actual_TCP_force",
    "target_TCP_pose",
    "target_TCP_speed",
    "joint_temperatures",
    "actual_joint_voltage",
    "ft_raw_wrench",
    "payload_inertia",
    "joint_position_deviation_ratio",
    "actual_current_window",
]
_DOUBLES = [
    "timestamp",
    "actual_execution_time",
    "speed_scaling",
    "target_speed_fraction",
    "actual_momentum",
    "actual_main_voltage",
    "actual_robot_voltage",
    "actual_robot_current",
    "standard_analog_input0",
    "standard_analog_input1",
    "standard_analog_output0",
    "standard_analog_output1",
    "io_current",
    "euromap67_24V_voltage",
    "euromap67_24V_current",
    "tool_analog_input0",
    "tool_analog_input1",
    "tool_output_current",
    "tool_temperature",
    "tcp_force_scalar",
    "payload",
    "collision_detection_ratio",
    "speed_scaling_combined",
]
_UINT32 = [
    "runtime_state",
    "robot_status_bits",
    "safety_status_bits",
    "analog_io_types",
    "euromap67_input_bits",
    "euromap67_output_bits",
    "tool_mode",
    "tool_analog_input_types",
    "output_bit_registers0_to_31",
    "output_bit_registers32_to_63",
    "input_bit_registers0_to_31",
    "input_bit_registers32_to_63",
    "script_control_line",
]

OUTPUT_TYPES: dict[str, str] = {
    **{n: "VECTOR6D" for n in _V6},
    **{n: "DOUBLE" for n in _DOUBLES},
    **{n: "UINT32" for n in _UINT32},
    "actual_digital_input_bits": "UINT64",
    "actual_digital_output_bits": "UINT64",
    "robot_mode": "INT32",
    "safety_mode": "INT32",
    "safety_status": "INT32",
    "tool_output_voltage": "INT32",
    "joint_mode": "VECTOR6INT32",
    "actual_tool_accelerometer": "VECTOR3D",
    "elbow_position": "VECTOR3D",
    "elbow_velocity": "VECTOR3D",
    "payload_cog": "VECTOR3D",
    "tool_output_mode": "UINT8",
    "tool_digital_output0_mode": "UINT8",
    "tool_digital_output1_mode": "UINT8",
}
for _i in range(48):
    OUTPUT_TYPES[f"output_int_register_{_i}"] = "INT32"
    OUTPUT_TYPES[f"output_double_register_{_i}"] = "DOUBLE"
    OUTPUT_TYPES[f"input_int_register_{_i}"] = "INT32"
    OUTPUT_TYPES[f"input_double_register_{_i}"] = "DOUBLE"
for _i in range(64, 128):
    OUTPUT_TYPES[f"output_bit_register_{_i}"] = "BOOL"
    OUTPUT_TYPES[f"input_bit_register_{_i}"] = "BOOL"

INPUT_TYPES: dict[str, str] = {
    "speed_slider_mask": "UINT32",
    "speed_slider_fraction": "DOUBLE",
    "standard_digital_output_mask": "UINT8",
    "standard_digital_output": "UINT8",
    "configurable_digital_output_mask": "UINT8",
    "configurable_digital_output": "UINT8",
    "tool_digital_output_mask": "UINT8",
    "tool_digital_output": "UINT8",
    "standard_analog_output_mask": "UINT8",
    "standard_analog_output_type": "UINT8",
    "standard_analog_output_0": "DOUBLE",
    "standard_analog_output_1": "DOUBLE",
    "input_bit_registers0_to_31": "UINT32",
    "input_bit_registers32_to_63": "UINT32",
    "external_force_torque": "VECTOR6D",
}
for _i in range(48):
    INPUT_TYPES[f"input_int_register_{_i}"] = "INT32"
    INPUT_TYPES[f"input_double_register_{_i}"] = "DOUBLE"
for _i in range(64, 128):
    INPUT_TYPES[f"input_bit_register_{_i}"] = "BOOL"


def recipe_struct(types: list[str]) -> struct.Struct:
    return struct.Struct(">" + "".join(FORMATS[t] for t in types))


def package(kind: str, payload: bytes = b"") -> bytes:
    return HEADER.pack(HEADER.size + len(payload), ord(kind)) + payload


def text_message(message: str, source: str = "ur_controller", level: int = 1) -> bytes:
    """An M package (protocol 2): message, source, warning level (0 exception .. 3 info)."""
    m, s = message.encode()[:255], source.encode()[:255]
    return package("M", bytes([len(m)]) + m + bytes([len(s)]) + s + bytes([level]))


class _Output:
    def __init__(self, recipe_id: int, names: list[str], divider: int) -> None:
        self.recipe_id = recipe_id
        self.names = names
        self.types = [OUTPUT_TYPES[n] for n in names]
        self.struct = recipe_struct(self.types)
        self.divider = divider


class _Input:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.types = [INPUT_TYPES[n] for n in names]
        self.struct = recipe_struct(self.types)


class RtdeConnection:
    """One client: its recipes, and a reader thread for its requests and input packages."""

    def __init__(self, server: RtdeServer, sock: socket.socket, peer: Any) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.protocol = 0
        self.output: _Output | None = None
        self.inputs: dict[int, _Input] = {}
        self.started = False
        self.closed = False
        self.packets_sent = 0
        self.held = b""  # packages of a burst, sent with the first one not held back
        self._send_lock = threading.Lock()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.thread = threading.Thread(target=self._read_loop, name=f"rtde {peer}", daemon=True)

    # Sending -------------------------------------------------------------------------------
    def send(self, data: bytes) -> bool:
        """Queue nothing: write now or drop the client (never block the controller cycle)."""
        with self._send_lock:
            if self.closed:
                return False
            view = memoryview(data)
            while view:
                try:
                    n = self.sock.send(view, socket.MSG_DONTWAIT)
                except OSError as exc:
                    if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                        log.warning("rtde client %s does not keep up: disconnected", self.peer)
                    self._close_locked()
                    return False
                view = view[n:]
            return True

    def close(self) -> None:
        with self._send_lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            self.sock.close()
            self.server.forget(self)

    # Receiving -----------------------------------------------------------------------------
    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _read_loop(self) -> None:
        try:
            while not self.closed:
                head = self._recv_exact(HEADER.size)
                if head is None:
                    break
                size, kind = HEADER.unpack(head)
                if size < HEADER.size:
                    self.send(text_message(f"bad package size {size}", level=0))
                    break
                body = self._recv_exact(size - HEADER.size) if size > HEADER.size else b""
                if body is None:
                    break
                self._handle(chr(kind), body)
        finally:
            self.close()

    def _handle(self, kind: str, body: bytes) -> None:
        srv = self.server
        if kind == "V":
            (version,) = struct.unpack(">H", body[:2])
            ok = version == PROTOCOL_VERSION
            self.protocol = version if ok else 0
            self.send(package("V", bytes([1 if ok else 0])))
        elif kind == "v":
            self.send(package("v", struct.pack(">4I", *srv.version)))
        elif kind == "O":
            self._setup_outputs(body)
        elif kind == "I":
            self._setup_inputs(body)
        elif kind == "S":
            self.started = self.output is not None or bool(self.inputs)
            self.send(package("S", bytes([1 if self.started else 0])))
        elif kind == "P":
            self.started = False
            self.send(package("P", bytes([1])))
        elif kind == "U":
            self._input_package(body)
        else:
            self.send(text_message(f"unknown package type {kind!r}", level=0))

    def _setup_outputs(self, body: bytes) -> None:
        srv = self.server
        (freq,) = struct.unpack(">d", body[:8])
        names = [n for n in body[8:].decode(errors="replace").split(",") if n]
        types = [OUTPUT_TYPES.get(n, "NOT_FOUND") for n in names]
        ok = names and "NOT_FOUND" not in types and 0 < freq <= srv.controller_hz
        if ok:
            divider = max(1, round(srv.controller_hz / freq))
            self.output = _Output(1, names, divider)
        elif not 0 < freq <= srv.controller_hz:
            self.send(
                text_message(f"frequency {freq} Hz outside (0, {srv.controller_hz}]", level=0)
            )
        self.send(package("O", bytes([1 if ok else 0]) + ",".join(types).encode()))

    def _setup_inputs(self, body: bytes) -> None:
        srv = self.server
        names = [n for n in body.decode(errors="replace").split(",") if n]
        types = []
        for n in names:
            owner = srv.input_owner(n)
            if n not in INPUT_TYPES:
                types.append("NOT_FOUND")
            elif owner is not None and owner is not self:
                types.append("IN_USE")
            else:
                types.append(INPUT_TYPES[n])
        ok = names and all(t in FORMATS for t in types)
        recipe_id = 0
        if ok:
            recipe_id = len(self.inputs) + 1
            self.inputs[recipe_id] = _Input(names)
        self.send(package("I", bytes([recipe_id]) + ",".join(types).encode()))

    def _input_package(self, body: bytes) -> None:
        if not body:
            return
        recipe = self.inputs.get(body[0])
        if recipe is None or len(body) - 1 != recipe.struct.size:
            self.send(text_message(f"input package for unknown recipe {body[0]}", level=1))
            return
        values = recipe.struct.unpack(body[1:])
        out: dict[str, Any] = {}
        i = 0
        for name, t in zip(recipe.names, recipe.types, strict=True):
            width = int(FORMATS[t][0]) if t.startswith("VECTOR") else 1
            out[name] = values[i] if width == 1 else list(values[i : i + width])
            i += width
        self.server.on_input(out)

    # Publishing ----------------------------------------------------------------------------
    def publish(
        self, tick: int, value: Callable[[str], Any], copies: int = 1, hold: bool = False
    ) -> None:
        """This tick's data package; `copies` > 1 sends it again byte for byte, `hold` keeps
        it back to go out in one write with the next package (a burst)."""
        out = self.output
        if not self.started or out is None or tick % out.divider:
            return
        flat: list[Any] = []
        for name, t in zip(out.names, out.types, strict=True):
            v = value(name)
            if t.startswith("VECTOR"):
                flat.extend(v)
            else:
                flat.append(v)
        data = package("U", bytes([out.recipe_id]) + out.struct.pack(*flat)) * copies
        if hold:
            self.held += data
            return
        data, self.held = self.held + data, b""
        if self.send(data):
            self.packets_sent += 1
            self.server.packets_sent += 1


class RtdeServer:
    """The listener and its connections; the controller calls `publish` once per cycle."""

    def __init__(
        self,
        host: str,
        *,
        version: tuple[int, int, int, int],
        controller_hz: float,
        on_input: Callable[[dict[str, Any]], None],
        port: int = RTDE_PORT,
    ) -> None:
        self.version = version
        self.controller_hz = controller_hz
        self.on_input = on_input
        self.connections: list[RtdeConnection] = []
        self.packets_sent = 0  # data packages sent to all clients since start
        self._lock = threading.Lock()
        self.listener = socket.create_server((host, port), reuse_port=False)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.thread = threading.Thread(target=self._accept_loop, name="rtde accept", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, peer = self.listener.accept()
            except OSError:
                return
            conn = RtdeConnection(self, sock, peer)
            with self._lock:
                self.connections.append(conn)
            conn.thread.start()

    def forget(self, conn: RtdeConnection) -> None:
        with self._lock:
            if conn in self.connections:
                self.connections.remove(conn)

    def input_owner(self, name: str) -> RtdeConnection | None:
        with self._lock:
            for c in self.connections:
                if any(name in r.names for r in c.inputs.values()):
                    return c
        return None

    def publish(
        self, tick: int, value: Callable[[str], Any], copies: int = 1, hold: bool = False
    ) -> None:
        with self._lock:
            conns = list(self.connections)
        for c in conns:
            c.publish(tick, value, copies, hold)

    def broadcast(self, data: bytes) -> None:
        """Raw bytes to every started client (the garbage fault)."""
        with self._lock:
            conns = [c for c in self.connections if c.started]
        for c in conns:
            c.send(data)

    def close(self) -> None:
        self.listener.close()
        with self._lock:
            conns = list(self.connections)
        for c in conns:
            c.close()
