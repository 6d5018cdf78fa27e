"""MQTT 5.0 data representations (OASIS MQTT Version 5.0, section 1.5) and properties (section
2.2.2) as a receiver reads them: every value checked against what the specification allows.

A violation raises MalformedPacket, Protocol Errors included (a forbidden property value): either
way this client closes the connection (section 4.13) and the broker redelivers.
"""

from __future__ import annotations

import struct
from typing import Any


class MalformedPacket(ValueError):
    """The broker sent bytes that are not a packet this client can accept (and why)."""


# Section 1.5.5 [MQTT-1.5.5-1]: a trailing zero byte would make two encodings of one value.
NOT_MINIMAL = "{what} not in the fewest bytes (a trailing 0x00 digit)"


# Property identifiers (section 2.2.2.2) and how each is encoded.
SESSION_EXPIRY_INTERVAL = 0x11
RECEIVE_MAXIMUM = 0x21
MAXIMUM_PACKET_SIZE = 0x27
SERVER_KEEP_ALIVE = 0x13
TOPIC_ALIAS = 0x23
REASON_STRING = 0x1F
USER_PROPERTY = 0x26
SUBSCRIPTION_IDENTIFIER = 0x0B
RESPONSE_TOPIC = 0x08
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
PUBLISH_PROPERTIES = frozenset({0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x23, 0x26})
CONNACK_PROPERTIES = frozenset(
    {0x11, 0x12, 0x13, 0x15, 0x16, 0x1A, 0x1C, 0x1F, 0x21}  # session expiry .. receive maximum
    | {0x22, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A}  # topic alias maximum .. shared subs.
)
SUBACK_PROPERTIES = frozenset({0x1F, 0x26})
DISCONNECT_PROPERTIES = frozenset({0x11, 0x1C, 0x1F, 0x26})
_REPEATABLE = frozenset({USER_PROPERTY, SUBSCRIPTION_IDENTIFIER})
# Values the specification forbids (each a Protocol Error, which this client treats as it treats
# a Malformed Packet: it closes the connection, section 4.13): what each property may hold.
_FLAG = frozenset({0, 1})
_VALUE_RULES: dict[int, tuple[Any, str]] = {
    0x01: (_FLAG, "0 or 1"),  # payload format indicator, 3.3.2.3.2
    0x0B: (range(1, 268_435_456), "1 to 268,435,455"),  # subscription identifier, 3.3.2.3.8
    0x21: (range(1, 65_536), "1 to 65,535"),  # receive maximum, 3.2.2.3.3
    0x24: (_FLAG, "0 or 1"),  # maximum QoS, 3.2.2.3.4
    0x25: (_FLAG, "0 or 1"),  # retain available, 3.2.2.3.5
    0x27: (range(1, 1 << 32), "1 or more"),  # maximum packet size, 3.2.2.3.6
    0x28: (_FLAG, "0 or 1"),  # wildcard subscription available, 3.2.2.3.11
    0x29: (_FLAG, "0 or 1"),  # subscription identifiers available, 3.2.2.3.12
    0x2A: (_FLAG, "0 or 1"),  # shared subscription available, 3.2.2.3.13
}


def _read_varint(data: bytes, at: int, what: str) -> tuple[int, int]:
    value = 0
    for shift in (0, 7, 14, 21):
        if at >= len(data):
            raise MalformedPacket(f"{what} cut short")
        digit = data[at]
        at += 1
        value |= (digit & 0x7F) << shift
        if not digit & 0x80:
            if digit == 0 and shift:
                raise MalformedPacket(NOT_MINIMAL.format(what=what))
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


def read_utf8(data: bytes, at: int, what: str) -> tuple[str, int]:
    raw, at = _read_binary(data, at, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket(f"{what} is not UTF-8") from None
    if "\x00" in text:  # section 1.5.4: a UTF-8 string must not hold U+0000
        raise MalformedPacket(f"{what} holds U+0000")
    return text, at


def read_properties(data: bytes, at: int, allowed: frozenset[int]) -> tuple[dict[int, Any], int]:
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
            value, at = read_utf8(data, at, "property")
        elif kind == _BINARY:
            value, at = _read_binary(data, at, "property")
        else:
            key, at = read_utf8(data, at, "user property")
            val, at = read_utf8(data, at, "user property")
            value = (key, val)
        if at > end:
            raise MalformedPacket("a property runs past the properties' length")
        _check_value(ident, value)
        if ident in _REPEATABLE:
            found.setdefault(ident, []).append(value)
        else:
            found[ident] = value
    return found, end


def _check_value(ident: int, value: Any) -> None:
    rule = _VALUE_RULES.get(ident)
    if rule is not None and value not in rule[0]:
        raise MalformedPacket(f"property {ident:#x} is {value}, it may only be {rule[1]}")
    if ident == RESPONSE_TOPIC and ("+" in value or "#" in value):
        # A topic name (section 3.3.2.3.5 [MQTT-3.3.2-14]): a wildcard would be a filter.
        raise MalformedPacket(f"response topic {value!r} holds a wildcard")
