"""Settings of the CAN driver (`driver: can`), validated from the controller's `settings:`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from drivers.can.dbc import CanMessageNames, DbcError, load_protocol
from drivers.machine import canonical_host

Interface = Literal["socketcan", "socketcand", "udp_multicast"]
DuplicatePolicy = Literal["drop", "abort"]

# python-can's defaults for the network interfaces, used when `port` is not given.
DEFAULT_PORTS: dict[str, int] = {"socketcand": 29536, "udp_multicast": 43113}


@dataclass(frozen=True)
class CanSettings:
    dbc: str = field(
        metadata={"min_len": 1, "doc": "DBC file of the frames, relative to the working directory"}
    )
    interface: Interface = "socketcan"
    channel: str = field(
        default="can0",
        metadata={"min_len": 1, "doc": "CAN device (socketcan, socketcand) or multicast group"},
    )
    host: str = field(default="127.0.0.1", metadata={"min_len": 1, "doc": "socketcand server"})
    port: int | None = field(
        default=None, metadata={"ge": 1, "le": 65535, "doc": "socketcand / udp_multicast port"}
    )
    bitrate: int = field(
        default=1_000_000,
        metadata={"ge": 10_000, "le": 1_000_000, "doc": "bus bitrate (set on the device itself)"},
    )
    max_bus_load: float = field(
        default=0.95, metadata={"gt": 0.0, "le": 1.0, "doc": "refuse encoder streams above this"}
    )
    connect_timeout_s: float = field(default=5.0, metadata={"gt": 0.0, "le": 120.0})
    status_timeout_s: float = field(
        default=0.5, metadata={"gt": 0.0, "le": 10.0, "doc": "older status is a lost controller"}
    )
    ack_timeout_s: float = field(
        default=1.0, metadata={"gt": 0.0, "le": 30.0, "doc": "for the controller to take a cycle"}
    )
    stall_timeout_s: float = field(
        default=0.5, metadata={"gt": 0.0, "le": 10.0, "doc": "encoder stream silent this long"}
    )
    prepare_timeout_s: float = field(
        default=30.0,
        metadata={"gt": 0.0, "le": 600.0, "doc": "controller may prepare this long beyond settle"},
    )
    duplicate_frames: DuplicatePolicy = field(
        default="drop",
        metadata={
            "doc": "an encoder frame repeated byte for byte right after itself (CAN double "
            "reception): drop the copy, or abort the cycle"
        },
    )
    reconnect_max_s: float = field(
        default=10.0, metadata={"gt": 0.0, "le": 600.0, "doc": "longest wait between reconnects"}
    )
    messages: CanMessageNames = field(default_factory=CanMessageNames)

    @property
    def resolved_port(self) -> int | None:
        return self.port if self.port is not None else DEFAULT_PORTS.get(self.interface)

    def machine_address(self) -> str:
        """The bus: the controller's frames (the DBC) on it belong to one runner."""
        if self.interface == "socketcan":
            return f"CAN bus socketcan {self.channel}"
        port = self.port or DEFAULT_PORTS[self.interface]
        where = canonical_host(self.host) if self.interface == "socketcand" else "multicast"
        return f"CAN bus {self.interface} {where}:{port} {self.channel}"

    def check(self) -> list[tuple[str, str]]:
        """The DBC must exist and carry every message and signal the driver uses."""
        try:
            load_protocol(self.dbc, self.messages)
        except DbcError as exc:
            return [(exc.field, str(exc))]
        return []
