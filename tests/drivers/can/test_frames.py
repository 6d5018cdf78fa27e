"""The CAN driver's frames without a peer: the example DBC's layout, the encoder frame decoding
and counter-gap accounting, the exact bus timing the peers use, and the settings' file:line
errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.load import load_config
from agent.errors import ConfigError, DriverError
from drivers.base import load_driver_class
from drivers.can.dbc import CanMessageNames, load_protocol, nominal_frame_bits
from drivers.can.driver import CanDriver
from drivers.can.recorder import CaptureRecorder
from drivers.can.settings import CanSettings
from tests.peers.can_bits import VirtualBus, frame_bits, frame_bits_reference, pack_intel
from tests.peers.can_harness import DBC, config_text, run, write

PROTO = load_protocol(str(DBC), CanMessageNames())


def test_example_dbc_carries_two_19_bit_positions_and_a_counter_in_one_8_byte_frame() -> None:
    proto = load_protocol(str(DBC), CanMessageNames())
    enc = proto.encoder
    layout = {s.name: (s.start, s.length, s.byte_order, s.is_signed) for s in enc.signals}
    assert enc.length == 8 and not enc.is_extended_frame
    assert layout["MotorCounts"] == (0, 19, "little_endian", False)
    assert layout["LinkCounts"] == (19, 19, "little_endian", False)
    assert layout["Counter"] == (38, 16, "little_endian", False)
    assert proto.position_bits == 19 and proto.counter_modulus == 65536
    # The command frame wins arbitration over everything the controller sends.
    assert proto.command.frame_id < min(f["can_id"] for f in proto.receive_filters())
    assert proto.status.frame_id < proto.encoder.frame_id
    assert nominal_frame_bits(enc) == 111  # 8-byte standard frame with interframe space


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**19 - 1), st.integers(0, 2**19 - 1)), min_size=2, max_size=40
    ),
    st.integers(0, 65535),
    st.integers(1, 64),
)
def test_encoder_frames_decode_to_the_counts_the_peer_packed(
    counts: list[tuple[int, int]], first_counter: int, joint: int
) -> None:
    proto = PROTO
    n = len(counts)
    motor = np.array([c[0] for c in counts], dtype=np.int64)
    link = np.array([c[1] for c in counts], dtype=np.int64)
    payload = pack_intel(
        proto,
        {
            "MotorCounts": motor,
            "LinkCounts": link,
            "Counter": np.arange(n, dtype=np.int64) % 65536,
            "JointIndex": np.full(n, joint),
        },
    )
    rec = CaptureRecorder(proto, joint, n, cycle_counter=1)
    rec.acked = True
    done = [rec.on_frame(bytes(row), 0.0) for row in payload]
    assert done[-1] and rec.complete and rec.lost == 0
    assert np.array_equal(rec.motor_counts, motor) and np.array_equal(rec.link_counts, link)
    # Every row agrees with cantools' own encoding.
    for k in (0, n - 1):
        values = {
            "MotorCounts": int(motor[k]),
            "LinkCounts": int(link[k]),
            "Counter": k,
            "JointIndex": joint,
        }
        assert bytes(payload[k]) == proto.encoder.encode(values)


def test_counter_gap_counts_the_lost_frames_and_fails_the_capture() -> None:
    proto = load_protocol(str(DBC), CanMessageNames())
    n = 10
    payload = pack_intel(
        proto,
        {
            "MotorCounts": np.arange(n),
            "LinkCounts": np.arange(n),
            "Counter": np.arange(n),
            "JointIndex": np.ones(n, dtype=np.int64),
        },
    )
    rec = CaptureRecorder(proto, 1, n, cycle_counter=1)
    rec.on_frame(bytes(payload[0]), 0.0)
    assert rec.received == 0 and rec.ignored_before_ack == 1  # not ours until acknowledged
    rec.acked = True
    for k in (0, 1, 2, 6):  # 3, 4, 5 never arrive
        rec.on_frame(bytes(payload[k]), 0.0)
    assert rec.lost == 3 and rec.received == 3
    assert (
        rec.error is not None and "3 encoder frame(s) lost: counter jumped from 2 to 6" in rec.error
    )


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 0x7FF), st.lists(st.binary(min_size=0, max_size=8), min_size=1, max_size=5))
def test_vectorised_frame_length_matches_the_bit_by_bit_reference(
    can_id: int, rows: list[bytes]
) -> None:
    for data in rows:
        got = int(frame_bits(can_id, np.frombuffer(data, dtype=np.uint8).reshape(1, -1))[0])
        assert got == frame_bits_reference(can_id, data)
        body = 34 + 8 * len(data)  # the stuffed part: SOF .. CRC
        assert body + 13 <= got <= body + 13 + (body - 1) // 4


def _stream_load(rate_hz: int) -> tuple[int, float]:
    """One second of a real encoder stream on the virtual 1 Mbit/s bus: (overruns, load)."""
    proto = load_protocol(str(DBC), CanMessageNames())
    k = np.arange(rate_hz, dtype=np.int64)
    motor = (k * 2 * np.pi * 100 / rate_hz / (2 * np.pi / 2**19)).astype(np.int64) % 2**19
    payload = pack_intel(
        proto,
        {
            "MotorCounts": motor,
            "LinkCounts": motor // 40,
            "Counter": k % 65536,
            "JointIndex": np.ones(rate_hz, dtype=np.int64),
        },
    )
    bits = frame_bits(proto.encoder.frame_id, payload)
    bus = VirtualBus(1_000_000)
    for i in range(rate_hz):
        bus.submit(
            i / rate_hz, proto.encoder.frame_id, bytes(payload[i]), int(bits[i]), stream=True
        )
        if i % (rate_hz // 50) == 0:  # status + one joint position every 20 ms, as the peer
            bus.submit(i / rate_hz, proto.status.frame_id, bytes(8), 130)
            bus.submit(i / rate_hz, proto.joint_position.frame_id, bytes(8), 130)
        bus.run_until(i / rate_hz)
    bus.run_until(2.0)
    return bus.overruns, bus.busy_bits / 1e6


def test_8000_frames_per_second_fit_a_1_mbit_bus_and_9000_do_not() -> None:
    overruns, load = _stream_load(8000)
    assert overruns == 0 and 0.9 < load < 0.98
    overruns, _ = _stream_load(9000)
    assert overruns > 0


def test_settings_errors_name_file_line_and_field(tmp_path: Path) -> None:
    missing = write(tmp_path / "a.yaml", config_text("socketcand", "can0", 29536, dbc="nope.dbc"))
    with pytest.raises(ConfigError) as err:
        load_config(missing)
    assert f"{missing}:5: controllers[0].settings.dbc: expected a readable DBC file" in str(
        err.value
    )

    renamed = config_text("socketcand", "can0", 29536).replace(
        "      port: 29536\n", "      port: 29536\n      messages: {encoder: Encoder}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "b.yaml", renamed))
    assert ":9: controllers[0].settings.messages.encoder: expected the name of a message" in str(
        err.value
    )
    assert "JhaEncoder" in str(err.value)  # the names it has are listed

    no_counter = DBC.read_text().replace(' SG_ Counter : 38|16@1+ (1,0) [0|65535] "" AGENT\n', "")
    dbc = write(tmp_path / "nocounter.dbc", no_counter)
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "c.yaml", config_text("socketcand", "can0", 29536, str(dbc))))
    assert "message JhaEncoder lacks signal(s) Counter" in str(err.value)

    bad = config_text("socketcand", "can0", 29536).replace("port: 29536", "port: 70000")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path / "d.yaml", bad))
    assert ":8: controllers[0].settings.port: expected an integer" in str(err.value)


def test_driver_is_registered_and_refuses_joints_the_frames_cannot_carry(config_file: Path) -> None:
    assert load_driver_class("can") is CanDriver
    settings = CanSettings(dbc=str(DBC))
    ctrl = load_config(config_file).controllers[0]
    wide = dataclasses.replace(ctrl.joints[0], encoder_bits=20)
    driver = CanDriver("cell1", settings, (wide,))
    with pytest.raises(DriverError, match=r"joint j1 has encoder_bits 20, but .* carries 19-bit"):
        run(driver.connect())
    with pytest.raises(DriverError, match="needs a settings section"):
        CanDriver("cell1", None, ctrl.joints)
