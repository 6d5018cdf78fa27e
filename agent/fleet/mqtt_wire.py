"""The MQTT 5.0 packets a QoS 1 subscriber exchanges (OASIS MQTT Version 5.0, chapters 2 and 3):
CONNECT, SUBSCRIBE, PUBACK, PINGREQ and DISCONNECT out; CONNACK, SUBACK, PUBLISH, PINGRESP and
DISCONNECT in. Pure functions and an incremental reader, no socket.

Why the fleet has its own: at plant scale it receives thousands of messages a second, and a
general client's per-packet Python work (paho reads each packet's header in several calls and
wakes its network thread once per acknowledgement) took a third of the ingest's CPU. This reader
takes whatever bytes arrived and returns every whole packet in them; acknowledgements of a
committed batch leave in one write.

A packet that breaks the specification raises MalformedPacket: the caller closes the connection
(section 4.13), the broker keeps the session and redelivers what was not acknowledged.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from agent.fleet.mqtt_fields import (
    CONNACK_PROPERTIES,
    DISCONNECT_PROPERTIES,
    MAXIMUM_PACKET_SIZE,
    NOT_MINIMAL,
    PUBLISH_PROPERTIES,
    REASON_STRING,
    RECEIVE_MAXIMUM,
    SERVER_KEEP_ALIVE,
    SESSION_EXPIRY_INTERVAL,
    SUBACK_PROPERTIES,
    TOPIC_ALIAS,
    MalformedPacket,
    read_properties,
    read_utf8,
)

__all__ = ["REASON_STRING", "SERVER_KEEP_ALIVE", "MalformedPacket"]


class PacketType(IntEnum):
    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


_MAX_REMAINING = 268_435_455  # the largest a four-byte variable byte integer holds


@dataclass(frozen=True)
class ConnAck:
    session_present: bool
    reason_code: int  # 0 success, >= 0x80 refused (section 3.2.2.2)
    properties: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SubAck:
    packet_id: int
    reason_codes: tuple[int, ...]  # per filter: the granted QoS, or >= 0x80 refused


@dataclass(frozen=True)
class Publish:
    topic: str
    payload: bytes
    qos: int
    packet_id: int  # 0 at QoS 0
    retain: bool
    dup: bool


@dataclass(frozen=True)
class PingResp:
    pass


@dataclass(frozen=True)
class Disconnect:
    reason_code: int
    reason: str | None


Packet = ConnAck | SubAck | Publish | PingResp | Disconnect


# -- encoding --------------------------------------------------------------------------------


def varint(n: int) -> bytes:
    if not 0 <= n <= _MAX_REMAINING:
        raise ValueError(f"{n} does not fit a variable byte integer")
    out = bytearray()
    while True:
        digit, n = n & 0x7F, n >> 7
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _utf8(text: str) -> bytes:
    data = text.encode("utf-8")
    return _binary(data)


def _binary(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise ValueError("a string or binary field is limited to 65,535 bytes")
    return struct.pack(">H", len(data)) + data


def _packet(first_byte: int, body: bytes) -> bytes:
    return bytes([first_byte]) + varint(len(body)) + body


def connect(
    client_id: str,
    *,
    keepalive_s: int,
    clean_start: bool,
    session_expiry_s: int,
    receive_maximum: int,
    maximum_packet_size: int,
    username: str | None = None,
    password: str | None = None,
) -> bytes:
    flags = (0x02 if clean_start else 0) | (0x80 if username is not None else 0)
    flags |= 0x40 if password is not None else 0
    properties = (
        struct.pack(">BI", SESSION_EXPIRY_INTERVAL, session_expiry_s)
        + struct.pack(">BH", RECEIVE_MAXIMUM, receive_maximum)
        + struct.pack(">BI", MAXIMUM_PACKET_SIZE, maximum_packet_size)
    )
    body = _utf8("MQTT") + bytes([5, flags]) + struct.pack(">H", keepalive_s)
    body += varint(len(properties)) + properties + _utf8(client_id)
    if username is not None:
        body += _utf8(username)
    if password is not None:
        body += _binary(password.encode("utf-8"))
    return _packet(PacketType.CONNECT << 4, body)


def subscribe(packet_id: int, filters: list[str], qos: int, retain_handling: int) -> bytes:
    """One SUBSCRIBE of every filter with the same options (section 3.8.3.1)."""
    options = bytes([qos | (retain_handling << 4)])
    body = struct.pack(">H", packet_id) + b"\x00"  # no properties
    body += b"".join(_utf8(f) + options for f in filters)
    return _packet((PacketType.SUBSCRIBE << 4) | 0x02, body)


_PUBACK = struct.Struct(">BBH")


def puback(packet_id: int) -> bytes:
    """Success, with the reason code left out (section 3.4.2.1): four bytes."""
    return _PUBACK.pack(PacketType.PUBACK << 4, 2, packet_id)


PINGREQ = bytes([PacketType.PINGREQ << 4, 0])
DISCONNECT = bytes([PacketType.DISCONNECT << 4, 0])  # normal disconnection, session kept


# -- decoding --------------------------------------------------------------------------------


class PacketReader:
    """Bytes in as they arrive, whole packets out; a partial packet waits for the rest."""

    def __init__(self, maximum_packet_size: int) -> None:
        self._buffer = bytearray()
        self._maximum = maximum_packet_size

    def feed(self, data: bytes) -> list[Packet]:
        self._buffer += data
        buffer = self._buffer
        packets: list[Packet] = []
        pos, end = 0, len(buffer)
        while end - pos >= 2:
            length, at, whole = 0, pos + 1, False
            for shift in (0, 7, 14, 21):
                if at >= end:
                    break  # the length itself has not all arrived
                digit = buffer[at]
                at += 1
                length |= (digit & 0x7F) << shift
                if not digit & 0x80:
                    if digit == 0 and shift:
                        raise MalformedPacket(NOT_MINIMAL.format(what="remaining length"))
                    whole = True
                    break
            else:
                raise MalformedPacket("remaining length longer than four bytes")
            if not whole:
                break
            if at - pos + length > self._maximum:
                raise MalformedPacket(
                    f"a packet of {at - pos + length} bytes, over the maximum packet size "
                    f"{self._maximum} this client announced"
                )
            if end - at < length:
                break
            packets.append(decode(buffer[pos], bytes(buffer[at : at + length])))
            pos = at + length
        del buffer[:pos]
        return packets


def decode(first_byte: int, body: bytes) -> Packet:
    kind, flags = first_byte >> 4, first_byte & 0x0F
    if kind == PacketType.PUBLISH:
        return _publish(flags, body)
    if flags != 0:
        raise MalformedPacket(f"packet type {kind} with reserved flags {flags:#x}")
    if kind == PacketType.CONNACK:
        return _connack(body)
    if kind == PacketType.SUBACK:
        return _suback(body)
    if kind == PacketType.PINGRESP:
        if body:
            raise MalformedPacket("PINGRESP with a body")
        return PingResp()
    if kind == PacketType.DISCONNECT:
        return _disconnect(body)
    # PUBACK included: this client publishes nothing, so no broker has anything to acknowledge.
    name = PacketType(kind).name if kind else "reserved (0)"
    raise MalformedPacket(f"a {name} packet, which a QoS 1 subscriber never receives")


def _publish(flags: int, body: bytes) -> Publish:
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise MalformedPacket("PUBLISH with QoS 3")
    if qos == 0 and flags & 0x08:
        raise MalformedPacket("PUBLISH with DUP set at QoS 0")
    topic, at = read_utf8(body, 0, "PUBLISH topic")
    packet_id = 0
    if qos:
        if len(body) < at + 2:
            raise MalformedPacket("PUBLISH without its packet identifier")
        packet_id = struct.unpack_from(">H", body, at)[0]
        if packet_id == 0:
            raise MalformedPacket("PUBLISH with packet identifier 0")
        at += 2
    properties, at = read_properties(body, at, PUBLISH_PROPERTIES)
    if not topic:
        # This client allows no topic alias (Topic Alias Maximum absent: 0), section 3.3.2.3.4.
        raise MalformedPacket("PUBLISH with an empty topic (topic aliases are not allowed)")
    if "+" in topic or "#" in topic:
        # A topic name, not a filter (section 3.3.2.1): a broker never forwards a wildcard.
        raise MalformedPacket("PUBLISH with a wildcard in its topic name")
    if TOPIC_ALIAS in properties:
        raise MalformedPacket("PUBLISH with a topic alias, which this client did not allow")
    return Publish(topic, body[at:], qos, packet_id, bool(flags & 0x01), bool(flags & 0x08))


def _connack(body: bytes) -> ConnAck:
    if len(body) < 2:
        raise MalformedPacket("CONNACK shorter than its flags and reason code")
    if body[0] & 0xFE:
        raise MalformedPacket("CONNACK with reserved acknowledge flags set")
    properties, at = read_properties(body, 2, CONNACK_PROPERTIES) if len(body) > 2 else ({}, 2)
    if at != len(body):
        raise MalformedPacket("CONNACK with bytes after its properties")
    return ConnAck(bool(body[0] & 0x01), body[1], properties)


def _suback(body: bytes) -> SubAck:
    if len(body) < 3:
        raise MalformedPacket("SUBACK shorter than its identifier and properties")
    packet_id = struct.unpack_from(">H", body)[0]
    _, at = read_properties(body, 2, SUBACK_PROPERTIES)
    if at >= len(body):
        raise MalformedPacket("SUBACK without a reason code")
    return SubAck(packet_id, tuple(body[at:]))


def _disconnect(body: bytes) -> Disconnect:
    if not body:
        return Disconnect(0, None)
    properties, at = read_properties(body, 1, DISCONNECT_PROPERTIES) if len(body) > 1 else ({}, 1)
    if at != len(body):
        raise MalformedPacket("DISCONNECT with bytes after its properties")
    reason = properties.get(REASON_STRING)
    return Disconnect(body[0], reason if isinstance(reason, str) else None)
