"""Which machine a controller's settings reach (drivers.machine): one spelling per machine, so
that the config refuses two controllers of one machine (tests/config: the refusal itself)."""

from __future__ import annotations

from pathlib import Path

from drivers.can.settings import CanSettings
from drivers.machine import canonical_device, canonical_endpoint, canonical_host
from drivers.ur_rtde.settings import UrRtdeSettings


def test_hosts_are_spelled_one_way() -> None:
    assert canonical_host("localhost") == canonical_host("127.0.0.1") == "127.0.0.1"
    assert canonical_host("[::1]") == canonical_host("0:0:0:0:0:0:0:1") == "::1"
    assert canonical_host("Robot-3.Plant.") == "robot-3.plant"
    a, b = UrRtdeSettings(host="LOCALHOST"), UrRtdeSettings(host="127.0.0.1")
    assert a.machine_address() == b.machine_address() == "UR controller 127.0.0.1"


def test_a_device_and_its_symlink_are_one_port(tmp_path: Path) -> None:
    device = tmp_path / "ttyUSB0"
    device.touch()
    by_id = tmp_path / "usb-FTDI_FT232R-if00-port0"
    by_id.symlink_to(device)
    assert canonical_device(str(by_id)) == canonical_device(str(device)) == str(device)


def test_an_endpoint_is_its_server_whatever_the_path() -> None:
    assert canonical_endpoint("opc.tcp://LocalHost/line4", 4840) == "opc.tcp://127.0.0.1:4840"
    assert canonical_endpoint("opc.tcp://10.0.0.5:4841/x", 4840) == "opc.tcp://10.0.0.5:4841"
    # A port that is not a number: the URL itself names it (the settings check refuses it).
    assert canonical_endpoint("opc.tcp://h:port/", 4840) == "opc.tcp://h:port/"


def test_a_can_bus_is_its_interface_server_and_channel() -> None:
    local = CanSettings(dbc="x.dbc", channel="can0")
    assert local.machine_address() == "CAN bus socketcan can0"
    remote = CanSettings(dbc="x.dbc", interface="socketcand", host="localhost", channel="can0")
    assert remote.machine_address() == "CAN bus socketcand 127.0.0.1:29536 can0"
    other = CanSettings(dbc="y.dbc", interface="socketcand", host="10.0.0.9", channel="can0")
    assert other.machine_address() != remote.machine_address()
