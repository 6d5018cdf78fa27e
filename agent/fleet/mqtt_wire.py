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


class MalformedPacket(ValueError):
    """The broker sent bytes that are not a packet this client can accept (and why)."""


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


# Property identifiers (section 2.2.2.2) and how each is encoded.
SESSION_EXPIRY_INTERVAL = 0x11
RECEIVE_MAXIMUM = 0x21
MAXIMUM_PACKET_SIZE = 0x27
SERVER_KEEP_ALIVE = 0x13
TOPIC_ALIAS = 0x23
REASON_STRING = 0x1F
USER_PROPERTY = 0x26
SUBSCRIPTION_IDENTIFIER = 0x0B
_BYTE, _TWO, _FOUR, _VARINT, _UTF8, _BINARY, _PAIR = range(7)
_PROPERTY_KIND = {
    0x01: _BYTE,  # payload format indicator
    0x02: _FOUR,  # message expiry interval
    0x03: _UTF8,  # content type
    0x08: _UTF8,  # response topic
    0x09: _BINARY,  # correlation data
    0x0B: _VARINT,  # subscription identifier
    0x11: _FOUR,
    0x12: _UTF8,  # assigned client identifier
    0x13: _TWO,
    0x15: _UTF8,  # authentication method
    0x16: _BINARY,  # authentication data
    0x17: _BYTE,  # request problem information
    0x18: _FOUR,  # will delay interval
    0x19: _BYTE,  # request response information
    0x1A: _UTF8,  # response information
    0x1C: _UTF8,  # server reference
    0x1F: _UTF8,
    0x21: _TWO,
    0x22: _TWO,  # topic alias maximum
    0x23: _TWO,
    0x24: _BYTE,  # maximum QoS
    0x25: _BYTE,  # retain available
    0x26: _PAIR,  # user property
    0x27: _FOUR,
    0x28: _BYTE,  # wildcard subscription available
    0x29: _BYTE,  # subscription identifier available
    0x2A: _BYTE,  # shared subscription available
}
_FIXED = {_BYTE: (1, ">B"), _TWO: (2, ">H"), _FOUR: (4, ">I")}
# Which properties each received packet may carry (section 2.2.2.2: any other identifier makes
# it a Malformed Packet), and the two that may come more than once (a list of their values).
_PUBLISH_PROPERTIES = frozenset({0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x23, 0x26})
_CONNACK_PROPERTIES = frozenset(
    {0x11, 0x12, 0x13, 0x15, 0x16, 0x1A, 0x1C, 0x1F, 0x21}  # session expiry .. receive maximum
    | {0x22, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A}  # topic alias maximum .. shared subs.
)
_SUBACK_PROPERTIES = frozenset({0x1F, 0x26})
_DISCONNECT_PROPERTIES = frozenset({0x11, 0x1C, 0x1F, 0x26})
_REPEATABLE = frozenset({USER_PROPERTY, SUBSCRIPTION_IDENTIFIER})
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
    topic, at = _read_utf8(body, 0, "PUBLISH topic")
    packet_id = 0
    if qos:
        if len(body) < at + 2:
            raise MalformedPacket("PUBLISH without its packet identifier")
        packet_id = struct.unpack_from(">H", body, at)[0]
        if packet_id == 0:
            raise MalformedPacket("PUBLISH with packet identifier 0")
        at += 2
    properties, at = _read_properties(body, at, _PUBLISH_PROPERTIES)
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
    properties, at = _read_properties(body, 2, _CONNACK_PROPERTIES) if len(body) > 2 else ({}, 2)
    if at != len(body):
        raise MalformedPacket("CONNACK with bytes after its properties")
    return ConnAck(bool(body[0] & 0x01), body[1], properties)


def _suback(body: bytes) -> SubAck:
    if len(body) < 3:
        raise MalformedPacket("SUBACK shorter than its identifier and properties")
    packet_id = struct.unpack_from(">H", body)[0]
    _, at = _read_properties(body, 2, _SUBACK_PROPERTIES)
    if at >= len(body):
        raise MalformedPacket("SUBACK without a reason code")
    return SubAck(packet_id, tuple(body[at:]))


def _disconnect(body: bytes) -> Disconnect:
    if not body:
        return Disconnect(0, None)
    properties, at = _read_properties(body, 1, _DISCONNECT_PROPERTIES) if len(body) > 1 else ({}, 1)
    if at != len(body):
        raise MalformedPacket("DISCONNECT with bytes after its properties")
    reason = properties.get(REASON_STRING)
    return Disconnect(body[0], reason if isinstance(reason, str) else None)


def _read_varint(data: bytes, at: int, what: str) -> tuple[int, int]:
    value = 0
    for shift in (0, 7, 14, 21):
        if at >= len(data):
            raise MalformedPacket(f"{what} cut short")
        digit = data[at]
        at += 1
        value |= (digit & 0x7F) << shift
        if not digit & 0x80:
            return value, at
    raise MalformedPacket(f"{what} longer than four bytes")


def _read_binary(data: bytes, at: int, what: str) -> tuple[bytes, int]:
    if len(data) < at + 2:
        raise MalformedPacket(f"{what} cut short")
    (length,) = struct.unpack_from(">H", data, at)
    at += 2
    if len(data) < at + length:
        raise MalformedPacket(f"{what} cut short")
    return data[at : at + length], at + length


def _read_utf8(data: bytes, at: int, what: str) -> tuple[str, int]:
    raw, at = _read_binary(data, at, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket(f"{what} is not UTF-8") from None
    if "\x00" in text:  # section 1.5.4: a UTF-8 string must not hold U+0000
        raise MalformedPacket(f"{what} holds U+0000")
    return text, at


def _read_properties(data: bytes, at: int, allowed: frozenset[int]) -> tuple[dict[int, Any], int]:
    length, at = _read_varint(data, at, "properties length")
    end = at + length
    if end > len(data):
        raise MalformedPacket("properties longer than the packet")
    found: dict[int, Any] = {}
    while at < end:
        ident, at = _read_varint(data, at, "property identifier")
        kind = _PROPERTY_KIND.get(ident)
        value: Any
        if kind is None:
            raise MalformedPacket(f"unknown property {ident:#x}")
        if ident not in allowed:
            raise MalformedPacket(f"property {ident:#x} in a packet that cannot carry it")
        if ident in found and ident not in _REPEATABLE:
            raise MalformedPacket(f"property {ident:#x} given twice")  # section 2.2.2.2
        if kind in _FIXED:
            size, fmt = _FIXED[kind]
            if at + size > end:
                raise MalformedPacket(f"property {ident:#x} cut short")
            (value,), at = struct.unpack_from(fmt, data, at), at + size
        elif kind == _VARINT:
            value, at = _read_varint(data, at, "property")
        elif kind == _UTF8:
            value, at = _read_utf8(data, at, "property")
        elif kind == _BINARY:
            value, at = _read_binary(data, at, "property")
        else:
            key, at = _read_utf8(data, at, "user property")
            val, at = _read_utf8(data, at, "user property")
            value = (key, val)
        if at > end:
            raise MalformedPacket("a property runs past the properties' length")
        if ident in _REPEATABLE:
            found.setdefault(ident, []).append(value)
        else:
            found[ident] = value
    return found, end
