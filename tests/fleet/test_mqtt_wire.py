"""agent.fleet.mqtt_wire against the MQTT 5.0 specification (OASIS, chapters 1 to 3) and against an
independent implementation: paho-mqtt (the agent's publisher) builds the packets a broker sends
and decodes them too, and every packet this client sends is compared byte for byte with the
spec's layout written out here and with what paho builds for the same fields.

Properties: a stream of valid packets gives the same packets however it is cut; every malformed
input raises MalformedPacket and nothing else (the session closes the connection on it and the
broker redelivers); random and mutated bytes give packets, MalformedPacket or a clean wait for
the rest, never another exception.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paho.mqtt import _packet as paho_packet
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties, VariableByteIntegers
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from agent.fleet import mqtt_wire as wire
from tests.support.summary import counted

V5 = MQTTProtocolVersion.MQTTv5

# -- an independent encoder: paho's, or the spec's byte layout written out --------------------


def paho_bytes(send: Callable[[paho.Client], object], client_id: str = "") -> bytes:
    """The one packet paho's own encoder builds in `send(client)` (captured, never sent)."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    sent: list[bytes] = []

    def queue(command: int, packet: bytes, mid: int, qos: int, info: object = None) -> int:
        sent.append(bytes(packet))
        return 0

    client._packet_queue = queue  # type: ignore[method-assign]
    client._sock = True  # type: ignore[assignment]  # paho builds no PUBLISH without a socket
    try:
        send(client)
    finally:
        client._sock = None
    (packet,) = sent
    return packet


def props(packet_type: int, **values: Any) -> Properties:
    p = Properties(packet_type)
    for name, value in values.items():
        setattr(p, name, value)
    return p


def fixed(first_byte: int, body: bytes) -> bytes:
    """Fixed header (section 2.1.1) by paho's variable byte integer, then the body."""
    return bytes([first_byte]) + VariableByteIntegers.encode(len(body)) + body


def utf8(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack(">H", len(data)) + data


def publish_bytes(
    topic: str,
    payload: bytes,
    qos: int = 0,
    packet_id: int = 0,
    *,
    retain: bool = False,
    dup: bool = False,
    properties: Properties | None = None,
) -> bytes:
    """paho's PUBLISH encoder (the broker's side of it is the same packet, section 3.3)."""
    return paho_bytes(
        lambda c: c._send_publish(
            packet_id, topic.encode(), payload, qos, retain, dup, None, properties
        )
    )


def connack_bytes(
    session_present: bool, reason_code: int, properties: Properties | None = None
) -> bytes:
    """Section 3.2: flags, reason code, properties (paho packs them)."""
    packed = (properties or Properties(PacketTypes.CONNACK)).pack()
    return fixed(0x20, bytes([int(session_present), reason_code]) + packed)


def suback_bytes(
    packet_id: int, reason_codes: list[int], properties: Properties | None = None
) -> bytes:
    """Section 3.9: packet identifier, properties, one reason code per filter."""
    packed = (properties or Properties(PacketTypes.SUBACK)).pack()
    codes = b"".join(ReasonCode(PacketTypes.SUBACK, identifier=c).pack() for c in reason_codes)
    return fixed(0x90, struct.pack(">H", packet_id) + packed + codes)


def disconnect_bytes(reason_code: int | None = None, properties: Properties | None = None) -> bytes:
    """paho's DISCONNECT encoder (section 3.14): empty, a reason code, or both and properties."""
    reason = (
        None if reason_code is None else ReasonCode(PacketTypes.DISCONNECT, identifier=reason_code)
    )
    return paho_bytes(lambda c: c._send_disconnect(reason, properties))


PINGRESP_BYTES = paho_bytes(lambda c: c._send_pingresp())


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at these offsets (taken modulo its length + 1)."""
    edges = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def feed_all(data: bytes, maximum: int = 1 << 20) -> list[wire.Packet]:
    return wire.PacketReader(maximum).feed(data)


def the_packet(data: bytes) -> wire.Packet:
    (packet,) = feed_all(data)
    return packet


# -- decoding what a broker sends ---------------------------------------------------------------


def test_publish_qos0_decodes_as_paho_decodes_it() -> None:
    data = publish_bytes("jha/press1/report", b'{"a": 1}')
    assert data[0] == 0x30  # PUBLISH, no DUP, QoS 0, no RETAIN
    assert the_packet(data) == wire.Publish("jha/press1/report", b'{"a": 1}', 0, 0, False, False)
    theirs = paho_packet.decode_publish(data[0], data[2:], V5)
    assert (theirs.topic, bytes(theirs.payload), theirs.qos, theirs.mid) == (
        b"jha/press1/report",
        b'{"a": 1}',
        0,
        0,
    )


@pytest.mark.parametrize(
    ("retain", "dup"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_publish_qos1_flags_and_every_property_a_broker_may_send(retain: bool, dup: bool) -> None:
    p = props(
        PacketTypes.PUBLISH,
        PayloadFormatIndicator=1,
        MessageExpiryInterval=3600,
        ContentType="application/json",
        ResponseTopic="jha/reply",
        CorrelationData=b"\x00\x01\xff",
        UserProperty=[("site", "plant-a"), ("line", "7"), ("site", "again")],
        # Subscription identifiers: a variable byte integer of 1, 2 and 4 bytes, and repeated
        # (section 3.3.2.3.8: one per matching subscription).
        SubscriptionIdentifier=[5, 300, 268_435_455],
    )
    data = publish_bytes(
        "jha/m/J1/health", b"\x00payload\xff", 1, 65535, retain=retain, dup=dup, properties=p
    )
    assert data[0] == 0x30 | (0x08 if dup else 0) | 0x02 | (0x01 if retain else 0)
    got = the_packet(data)
    assert got == wire.Publish("jha/m/J1/health", b"\x00payload\xff", 1, 65535, retain, dup)
    theirs = paho_packet.decode_publish(data[0], data[2:], V5)
    assert (theirs.qos, theirs.mid, theirs.retain, theirs.dup) == (1, 65535, retain, dup)
    assert bytes(theirs.payload) == got.payload  # type: ignore[union-attr]


def test_publish_with_an_empty_payload_and_a_long_remaining_length() -> None:
    assert the_packet(publish_bytes("t", b"", 1, 1)) == wire.Publish("t", b"", 1, 1, False, False)
    big = bytes(range(256)) * 700  # 179,200 bytes: a three-byte remaining length
    data = publish_bytes("t/big", big, 1, 2)
    assert data[1] & 0x80 and data[2] & 0x80 and not data[3] & 0x80
    assert the_packet(data) == wire.Publish("t/big", big, 1, 2, False, False)


def test_publish_topic_in_any_language() -> None:
    topic = "jha/Zürich-Presse/关节 1/health"
    assert the_packet(publish_bytes(topic, b"x")).topic == topic  # type: ignore[union-attr]


def test_connack_session_present_and_properties_as_paho_decodes_them() -> None:
    p = props(
        PacketTypes.CONNACK,
        SessionExpiryInterval=0xFFFFFFFF,
        ReceiveMaximum=100,
        MaximumQoS=1,
        RetainAvailable=1,
        MaximumPacketSize=1 << 20,
        AssignedClientIdentifier="auto-3F2A",
        TopicAliasMaximum=10,
        ReasonString="welcome back",
        UserProperty=[("broker", "mosquitto"), ("zone", "eu")],
        WildcardSubscriptionAvailable=1,
        SubscriptionIdentifierAvailable=0,
        SharedSubscriptionAvailable=1,
        ServerKeepAlive=30,
        ResponseInformation="info",
        ServerReference="other:1883",
        AuthenticationMethod="none",
        AuthenticationData=b"\x01\x02",
    )
    data = connack_bytes(True, 0, p)
    got = the_packet(data)
    assert isinstance(got, wire.ConnAck)
    assert got.session_present and got.reason_code == 0
    assert got.properties[wire.SERVER_KEEP_ALIVE] == 30
    assert got.properties[0x12] == "auto-3F2A"
    assert got.properties[wire.REASON_STRING] == "welcome back"
    assert got.properties[0x26] == [("broker", "mosquitto"), ("zone", "eu")]
    theirs = paho_packet.decode_connack(data[0], data[2:], V5).properties
    assert theirs is not None
    for name, ident in theirs.names.items():
        if hasattr(theirs, name.replace(" ", "")):
            assert got.properties[ident] == getattr(theirs, name.replace(" ", "")), name
    assert len(got.properties) == len(p.json())


@pytest.mark.parametrize("code", [0x80, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x97, 0x9F])
def test_connack_refusals_keep_their_reason_code_and_string(code: int) -> None:
    got = the_packet(connack_bytes(False, code, props(PacketTypes.CONNACK, ReasonString="no")))
    assert got == wire.ConnAck(False, code, {wire.REASON_STRING: "no"})


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("ReceiveMaximum", 1, 65_535),
        # paho stops at 268,435,455 (the largest packet); the four-byte field's top is below.
        ("MaximumPacketSize", 1, 268_435_455),
        ("MaximumQoS", 0, 1),
        ("RetainAvailable", 0, 1),
        ("WildcardSubscriptionAvailable", 0, 1),
        ("SubscriptionIdentifierAvailable", 0, 1),
        ("SharedSubscriptionAvailable", 0, 1),
    ],
)
def test_connack_property_values_at_both_ends_of_their_range(
    name: str, low: int, high: int
) -> None:
    """Sections 3.2.2.3.3 to 3.2.2.3.13: the values the specification allows are kept."""
    for value in (low, high):
        got = the_packet(connack_bytes(False, 0, props(PacketTypes.CONNACK, **{name: value})))
        assert isinstance(got, wire.ConnAck) and list(got.properties.values()) == [value]
    top = the_packet(fixed(0x20, b"\x00\x00\x05\x27\xff\xff\xff\xff"))
    assert top == wire.ConnAck(False, 0, {0x27: 0xFFFFFFFF})


def test_publish_payload_format_indicator_0_and_1_are_accepted() -> None:
    for value in (0, 1):
        p = props(PacketTypes.PUBLISH, PayloadFormatIndicator=value, ResponseTopic="a/b")
        got = the_packet(publish_bytes("t", b"{}", 1, 7, properties=p))
        assert got == wire.Publish("t", b"{}", 1, 7, False, False)


def test_connack_without_properties() -> None:
    assert the_packet(connack_bytes(False, 0)) == wire.ConnAck(False, 0, {})


def test_suback_several_reason_codes_and_a_refusal() -> None:
    data = suback_bytes(
        1, [1, 0, 0x87, 0x80, 0x8F, 0xA2], props(PacketTypes.SUBACK, ReasonString="acl")
    )
    got = the_packet(data)
    assert got == wire.SubAck(1, (1, 0, 0x87, 0x80, 0x8F, 0xA2))
    theirs = paho_packet.decode_suback(data[0], data[2:], V5)
    assert theirs.mid == 1
    assert [c.value for c in theirs.reason_codes] == list(got.reason_codes)  # type: ignore[union-attr]


def test_pingresp() -> None:
    assert PINGRESP_BYTES == b"\xd0\x00"
    assert the_packet(PINGRESP_BYTES) == wire.PingResp()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (disconnect_bytes(), wire.Disconnect(0, None)),
        (disconnect_bytes(0x8E), wire.Disconnect(0x8E, None)),
        (
            disconnect_bytes(0x8E, props(PacketTypes.DISCONNECT, ReasonString="taken over")),
            wire.Disconnect(0x8E, "taken over"),
        ),
        (
            disconnect_bytes(
                0x9C,
                props(
                    PacketTypes.DISCONNECT,
                    ServerReference="b2:8883",
                    UserProperty=("why", "maintenance"),
                    SessionExpiryInterval=0,
                ),
            ),
            wire.Disconnect(0x9C, None),
        ),
        (fixed(0xE0, b"\x8b"), wire.Disconnect(0x8B, None)),  # reason code, no property length
    ],
)
def test_disconnect_from_the_broker(data: bytes, expected: wire.Disconnect) -> None:
    assert the_packet(data) == expected
    theirs = paho_packet.decode_disconnect(data[0], data[2:], V5)
    assert (0 if theirs.reason is None else theirs.reason.value) == expected.reason_code


# -- encoding what this client sends --------------------------------------------------------------


def test_variable_byte_integer_at_each_length_boundary() -> None:
    """Section 1.5.5: 1 to 4 bytes, the fewest that hold the value."""
    for n, length in [(0, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (2_097_151, 3)]:
        assert wire.varint(n) == VariableByteIntegers.encode(n) and len(wire.varint(n)) == length
    for n in (2_097_152, 268_435_455):
        assert wire.varint(n) == VariableByteIntegers.encode(n) and len(wire.varint(n)) == 4
    for bad in (-1, 268_435_456):
        with pytest.raises(ValueError):
            wire.varint(bad)


def test_connect_is_the_spec_layout_byte_for_byte() -> None:
    """Section 3.1, written out: what `jha fleet` sends for a persistent session with a login."""
    expected = bytes.fromhex(
        "10"  # CONNECT, reserved flags 0
        "34"  # remaining length 52
        "0004 4d515454"  # protocol name "MQTT"
        "05"  # protocol version 5
        "c0"  # user name, password; no will; clean start off; reserved bit 0
        "003c"  # keep alive 60 s
        "0d"  # property length 13
        "11 ffffffff"  # session expiry interval: never
        "21 03e8"  # receive maximum 1000
        "27 00120000"  # maximum packet size 1,179,648
        "0009 6a68612d666c656574"  # client identifier "jha-fleet"
        "0005 666c656574"  # user name "fleet"
        "0008 733363726574c3a9"  # password "s3cret" + "é" as UTF-8 binary data
    )
    got = wire.connect(
        "jha-fleet",
        keepalive_s=60,
        clean_start=False,
        session_expiry_s=0xFFFFFFFF,
        receive_maximum=1000,
        maximum_packet_size=1_179_648,
        username="fleet",
        password="s3creté",
    )
    assert got == expected


@pytest.mark.parametrize(
    ("username", "password", "clean_start", "flags"),
    [
        (None, None, False, 0x00),
        (None, None, True, 0x02),
        ("fleet", None, False, 0x80),
        ("fleet", "pw", False, 0xC0),
        ("fleet", "pw", True, 0xC2),
    ],
)
def test_connect_matches_paho_and_its_decoder(
    username: str | None, password: str | None, clean_start: bool, flags: int
) -> None:
    ours = wire.connect(
        "jha-fleet-1",
        keepalive_s=5,
        clean_start=clean_start,
        session_expiry_s=0xFFFFFFFF,
        receive_maximum=65535,
        maximum_packet_size=268_435_455,
        username=username,
        password=password,
    )

    def send(c: paho.Client) -> None:
        c._clean_start = clean_start
        c._connect_properties = props(
            PacketTypes.CONNECT,
            SessionExpiryInterval=0xFFFFFFFF,
            ReceiveMaximum=65535,
            MaximumPacketSize=268_435_455,
        )
        if username is not None:
            c.username_pw_set(username, password)
        c._send_connect(5)

    assert ours == paho_bytes(send, client_id="jha-fleet-1")
    # The spec's fields, read back with paho's property decoder.
    assert ours[0] == 0x10 and ours[2:9] == b"\x00\x04MQTT\x05" and ours[9] == flags
    assert ours[10:12] == b"\x00\x05"
    read = Properties(PacketTypes.CONNECT)
    _, used = read.unpack(ours[12:])
    assert (read.SessionExpiryInterval, read.ReceiveMaximum, read.MaximumPacketSize) == (
        0xFFFFFFFF,
        65535,
        268_435_455,
    )
    rest = ours[12 + used :]
    assert rest.startswith(utf8("jha-fleet-1"))


def test_subscribe_is_the_spec_layout_and_matches_paho() -> None:
    """Section 3.8: fixed-header flags 0b0010; per filter one options byte, QoS in bits 0-1 and
    retain handling in bits 4-5 (no local, retain as published off)."""
    filters = ["jha/+/report", "$share/g/site-b/jha/+/+/health"]
    ours = wire.subscribe(1, filters, 1, 1)
    body = b"\x00\x01" + b"\x00" + utf8(filters[0]) + b"\x11" + utf8(filters[1]) + b"\x11"
    assert ours == bytes([0x82, len(body)]) + body

    def send(c: paho.Client) -> None:
        c._last_mid = 0
        options = SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB)
        c._send_subscribe(0, [(f.encode(), options) for f in filters])

    assert ours == paho_bytes(send)
    options = SubscribeOptions()
    options.unpack(ours[-1:])  # paho's reading of the options byte
    assert (options.QoS, options.retainHandling) == (1, SubscribeOptions.RETAIN_SEND_IF_NEW_SUB)
    assert not options.noLocal and not options.retainAsPublished
    assert wire.subscribe(7, ["t"], 0, 2) == bytes.fromhex("8207 0007 00 000174 20")


@pytest.mark.parametrize("packet_id", [1, 2, 0x1234, 65535])
def test_puback_is_four_bytes_with_the_reason_code_left_out(packet_id: int) -> None:
    """Section 3.4.2.1: success and no properties, so remaining length 2."""
    ours = wire.puback(packet_id)
    assert ours == bytes([0x40, 0x02]) + struct.pack(">H", packet_id)
    assert ours == paho_bytes(lambda c: c._send_puback(packet_id))
    theirs = paho_packet.decode_puback(ours[0], ours[2:], V5)
    assert theirs.mid == packet_id and theirs.reason.value == 0


def test_pingreq_and_disconnect_match_paho() -> None:
    assert wire.PINGREQ == b"\xc0\x00" == paho_bytes(lambda c: c._send_pingreq())
    # Section 3.14.2.1: no reason code means 0x00, normal disconnection: the session stays.
    assert wire.DISCONNECT == b"\xe0\x00" == paho_bytes(lambda c: c._send_disconnect())
    assert paho_packet.decode_disconnect(0xE0, b"", V5).reason is None


# -- malformed input: MalformedPacket and nothing else ---------------------------------------------


def _publish_raw(first: int, topic: bytes, rest: bytes) -> bytes:
    return fixed(first, utf8(topic) + rest)


MALFORMED = {
    "remaining length of five bytes": b"\x30\xff\xff\xff\xff\x01",
    "topic longer than the packet": fixed(0x30, b"\x00\x64abc"),
    "packet id cut off": fixed(0x32, utf8(b"t") + b"\x00"),
    "topic not UTF-8": _publish_raw(0x30, b"jha/\xff\xfe", b"\x00"),
    "topic with a UTF-16 surrogate": _publish_raw(0x30, b"jha/\xed\xa0\x80", b"\x00"),
    "topic with U+0000": _publish_raw(0x30, b"jha/\x00/x", b"\x00"),
    "topic with a + wildcard": _publish_raw(0x30, b"jha/+/report", b"\x00"),
    "topic with a # wildcard": _publish_raw(0x30, b"jha/#", b"\x00"),
    "empty topic (no alias allowed)": _publish_raw(0x30, b"", b"\x00"),
    "topic alias (none allowed)": _publish_raw(0x30, b"t", b"\x03\x23\x00\x01"),
    "QoS 3": _publish_raw(0x36, b"t", b"\x00\x01\x00"),
    "DUP at QoS 0": _publish_raw(0x38, b"t", b"\x00"),
    "packet id 0": _publish_raw(0x32, b"t", b"\x00\x00\x00"),
    "properties longer than the packet": _publish_raw(0x30, b"t", b"\x09\x02\x00"),
    "properties length cut off": _publish_raw(0x30, b"t", b""),
    "unknown property 0x05": _publish_raw(0x30, b"t", b"\x02\x05\x00"),
    "unknown property 0x80 as a two-byte identifier": _publish_raw(0x30, b"t", b"\x03\x80\x01\x00"),
    "message expiry cut short": _publish_raw(0x30, b"t", b"\x03\x02\x00\x00payload"),
    "content type runs past the properties": _publish_raw(0x30, b"t", b"\x03\x03\x00\x05abcde"),
    "user property value missing": _publish_raw(0x30, b"t", b"\x04\x26\x00\x01k"),
    "subscription identifier of five bytes": _publish_raw(
        0x30, b"t", b"\x06\x0b\xff\xff\xff\xff\x01"
    ),
    "property given twice": _publish_raw(
        0x30, b"t", b"\x0a\x02\x00\x00\x00\x01\x02\x00\x00\x00\x02"
    ),
    "content type not UTF-8": _publish_raw(0x30, b"t", b"\x04\x03\x00\x01\xff"),
    # Section 1.5.5: a variable byte integer in more bytes than it needs.
    "remaining length 0 in two bytes": b"\xd0\x80\x00",
    "remaining length 5 in three bytes": b"\xd0\x85\x80\x00" + bytes(5),
    "properties length 0 in two bytes": _publish_raw(0x30, b"t", b"\x80\x00"),
    "subscription identifier 5 in two bytes": _publish_raw(0x30, b"t", b"\x03\x0b\x85\x00"),
    # Property values the specification forbids (Protocol Errors).
    "payload format indicator 2": _publish_raw(0x30, b"t", b"\x02\x01\x02"),
    "subscription identifier 0": _publish_raw(0x30, b"t", b"\x02\x0b\x00"),
    "response topic with a wildcard": _publish_raw(0x30, b"t", b"\x06\x08\x00\x03a/+"),
    "CONNACK receive maximum 0": fixed(0x20, b"\x00\x00\x03\x21\x00\x00"),
    "CONNACK maximum QoS 2": fixed(0x20, b"\x00\x00\x02\x24\x02"),
    "CONNACK maximum packet size 0": fixed(0x20, b"\x00\x00\x05\x27\x00\x00\x00\x00"),
    "CONNACK retain available 2": fixed(0x20, b"\x00\x00\x02\x25\x02"),
    "CONNACK wildcard subscription available 2": fixed(0x20, b"\x00\x00\x02\x28\x02"),
    "CONNACK subscription identifiers available 7": fixed(0x20, b"\x00\x00\x02\x29\x07"),
    "CONNACK shared subscription available 255": fixed(0x20, b"\x00\x00\x02\x2a\xff"),
    "CONNACK with reserved flags in the fixed header": fixed(0x21, b"\x00\x00\x00"),
    "SUBACK with reserved flags": fixed(0x92, b"\x00\x01\x00\x01"),
    "PINGRESP with reserved flags": b"\xd1\x00",
    "DISCONNECT with reserved flags": b"\xe8\x00",
    "CONNACK too short": fixed(0x20, b"\x00"),
    "CONNACK with reserved acknowledge flags": fixed(0x20, b"\x02\x00\x00"),
    "CONNACK with bytes after its properties": fixed(0x20, b"\x00\x00\x00\x00"),
    "CONNACK with a property it cannot carry (topic alias)": fixed(
        0x20, b"\x00\x00\x03\x23\x00\x01"
    ),
    "SUBACK without a reason code": fixed(0x90, b"\x00\x01\x00"),
    "SUBACK without properties": fixed(0x90, b"\x00\x01"),
    "PINGRESP with a body": fixed(0xD0, b"\x00"),
    "DISCONNECT with bytes after its properties": fixed(0xE0, b"\x00\x00\x00"),
    "reserved packet type 0": b"\x00\x00",
    "CONNECT": wire.connect(
        "x",
        keepalive_s=5,
        clean_start=True,
        session_expiry_s=0,
        receive_maximum=1,
        maximum_packet_size=100,
    ),
    "PUBACK (this client never publishes)": b"\x40\x02\x00\x01",
    "PUBREC": b"\x50\x02\x00\x01",
    "PUBREL": b"\x62\x02\x00\x01",
    "PUBCOMP": b"\x70\x02\x00\x01",
    "SUBSCRIBE": wire.subscribe(1, ["t"], 1, 1),
    "UNSUBSCRIBE": fixed(0xA2, b"\x00\x01\x00" + utf8("t")),
    "UNSUBACK": fixed(0xB0, b"\x00\x01\x00\x00"),
    "PINGREQ": b"\xc0\x00",
    "AUTH": b"\xf0\x00",
}


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_packet_raises_malformed_packet(data: bytes) -> None:
    with pytest.raises(wire.MalformedPacket):
        feed_all(data)
    # The same byte by byte: the error comes when the packet is whole, never before or after.
    reader = wire.PacketReader(1 << 20)
    with pytest.raises(wire.MalformedPacket):
        for i in range(len(data)):
            assert reader.feed(data[i : i + 1]) == []


def test_a_packet_over_the_maximum_size_is_refused_from_its_header() -> None:
    """Section 3.1.2.11.4: the maximum counts the whole packet; it is refused as soon as its
    remaining length is known, before any of its body is buffered."""
    data = publish_bytes("t", b"x" * 95, 1, 1)
    assert len(data) == 103
    assert the_packet(data) == wire.Publish("t", b"x" * 95, 1, 1, False, False)  # 1 MiB: fine
    assert wire.PacketReader(103).feed(data) != []
    with pytest.raises(wire.MalformedPacket, match="maximum packet size"):
        wire.PacketReader(102).feed(data[:2])


# -- properties ------------------------------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00+#"), max_size=40)
_topic = _text.filter(bool)
_user_properties = st.lists(st.tuples(_text, _text), max_size=3)


@st.composite
def _publish(draw: st.DrawFn) -> tuple[wire.Packet, bytes]:
    qos = draw(st.sampled_from([0, 1]))
    packet_id = draw(st.integers(1, 65535)) if qos else 0
    retain = draw(st.booleans())
    dup = draw(st.booleans()) if qos else False
    topic, payload = draw(_topic), draw(st.binary(max_size=300))
    p = Properties(PacketTypes.PUBLISH)
    if draw(st.booleans()):
        p.MessageExpiryInterval = draw(st.integers(0, 0xFFFFFFFF))
    if draw(st.booleans()):
        p.ContentType = draw(_text)
    if draw(st.booleans()):
        p.PayloadFormatIndicator = draw(st.sampled_from([0, 1]))
    if draw(st.booleans()):
        p.CorrelationData = draw(st.binary(max_size=20))
    for ident in draw(st.lists(st.integers(1, 268_435_455), max_size=2)):
        p.SubscriptionIdentifier = ident
    for pair in draw(_user_properties):
        p.UserProperty = pair
    data = publish_bytes(topic, payload, qos, packet_id, retain=retain, dup=dup, properties=p)
    return wire.Publish(topic, payload, qos, packet_id, retain, dup), data


@st.composite
def _connack(draw: st.DrawFn) -> tuple[wire.Packet, bytes]:
    present = draw(st.booleans())
    code = draw(st.sampled_from([0, 0x80, 0x86, 0x87, 0x88, 0x8A]))
    expected: dict[int, Any] = {}
    p = Properties(PacketTypes.CONNACK)
    if draw(st.booleans()):
        expected[0x13] = p.ServerKeepAlive = draw(st.integers(0, 65535))
    if draw(st.booleans()):
        expected[0x12] = p.AssignedClientIdentifier = draw(_text)
    if draw(st.booleans()):
        expected[0x1F] = p.ReasonString = draw(_text)
    pairs = draw(_user_properties)
    for pair in pairs:
        p.UserProperty = pair
    if pairs:
        expected[0x26] = pairs
    return wire.ConnAck(present, code, expected), connack_bytes(present, code, p)


@st.composite
def _suback(draw: st.DrawFn) -> tuple[wire.Packet, bytes]:
    packet_id = draw(st.integers(1, 65535))
    codes = draw(st.lists(st.sampled_from([0, 1, 2, 0x80, 0x87, 0x8F, 0x91, 0x97]), min_size=1))
    return wire.SubAck(packet_id, tuple(codes)), suback_bytes(packet_id, codes)


@st.composite
def _disconnect(draw: st.DrawFn) -> tuple[wire.Packet, bytes]:
    code = draw(st.sampled_from([None, 0, 0x04, 0x8B, 0x8D, 0x8E, 0x9C]))
    reason = draw(st.none() | _text)
    if code is None:
        return wire.Disconnect(0, None), disconnect_bytes()
    p = None if reason is None else props(PacketTypes.DISCONNECT, ReasonString=reason)
    return wire.Disconnect(code, reason), disconnect_bytes(code, p)


_packet = st.one_of(
    _publish(), _connack(), _suback(), _disconnect(), st.just((wire.PingResp(), PINGRESP_BYTES))
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_packet, max_size=12), st.lists(st.integers(0, 10_000), max_size=30))
def test_property_a_stream_cut_anywhere_gives_the_same_packets(
    packets: list[tuple[wire.Packet, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(data for _, data in packets)
    expected = [p for p, _ in packets]
    assert feed_all(stream) == expected
    reader = wire.PacketReader(1 << 20)
    got: list[wire.Packet] = []
    for piece in pieces(stream, cuts):
        got += reader.feed(piece)
    assert got == expected
    assert reader.feed(b"") == [] and not reader._buffer  # nothing left over


@settings(max_examples=200, deadline=None)
@given(_publish())
def test_property_publish_decodes_as_paho_decodes_it(case: tuple[wire.Packet, bytes]) -> None:
    expected, data = case
    got = the_packet(data)
    assert got == expected
    assert isinstance(got, wire.Publish)
    at = 2 if data[1] < 0x80 else 3 if data[2] < 0x80 else 4
    theirs = paho_packet.decode_publish(data[0], data[at:], V5)
    assert (theirs.topic.decode(), bytes(theirs.payload), theirs.mid) == (
        got.topic,
        got.payload,
        got.packet_id,
    )
    assert (theirs.qos, theirs.retain, theirs.dup) == (got.qos, got.retain, got.dup)


def _outcome(reader: wire.PacketReader, pieces: list[bytes]) -> tuple[list[wire.Packet], bool]:
    """The packets returned until the first MalformedPacket, and whether it came. Any other
    exception escapes, failing the test."""
    got: list[wire.Packet] = []
    for piece in pieces:
        try:
            got += reader.feed(piece)
        except wire.MalformedPacket:
            return got, True
    return got, False


def _check_hostile(data: bytes, cuts: list[int], maximum: int) -> None:
    tally = counted("fuzzing", "fleet: MQTT 5 packet reader (random, mutated bytes)")
    tally.case()
    try:
        # Byte by byte: every packet before the first malformed one, and where it stops.
        singles, bad = _outcome(
            wire.PacketReader(maximum), [data[i : i + 1] for i in range(len(data))]
        )
        whole_reader = wire.PacketReader(maximum)
        whole, whole_bad = _outcome(whole_reader, [data])
        split, split_bad = _outcome(wire.PacketReader(maximum), pieces(data, cuts))
        # However the bytes come, the same verdict; the packets returned are those before it.
        assert whole_bad == split_bad == bad
        assert split == singles[: len(split)]
        if not bad:
            assert whole == split == singles
    except AssertionError as exc:
        tally.crash(f"{data.hex()[:80]}: {exc}")
        raise
    except Exception as exc:
        tally.crash(f"{data.hex()[:80]}: {type(exc).__name__}: {exc}")
        raise


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=6), st.integers(2, 300))
def test_fuzz_random_bytes_give_packets_malformed_or_a_wait(
    data: bytes, cuts: list[int], maximum: int
) -> None:
    _check_hostile(data, cuts, maximum)


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    stream = bytearray(b"".join(d for _, d in draw(st.lists(_packet, min_size=1, max_size=4))))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(stream) - 1))
        action = draw(st.sampled_from(["flip", "set", "drop", "insert", "truncate"]))
        if action == "flip":
            stream[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "set":
            stream[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0xC0, 0xED]))
        elif action == "drop":
            del stream[at]
        elif action == "insert":
            stream[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del stream[at:]
        if not stream:
            break
    return bytes(stream)


@settings(max_examples=1500, deadline=None)
@given(_mutated(), st.lists(st.integers(0, 2000), max_size=6))
def test_fuzz_mutated_valid_packets_give_packets_malformed_or_a_wait(
    data: bytes, cuts: list[int]
) -> None:
    _check_hostile(data, cuts, 1 << 20)
