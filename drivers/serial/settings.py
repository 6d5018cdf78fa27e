"""Settings of the serial encoder-board driver (`driver: serial`), validated by
agent.schema.validate, and the channel of every joint they give (resolve_channels)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.errors import DriverError
from drivers.machine import canonical_device
from drivers.serial.frames import MAX_PAYLOAD_BYTES, SAMPLE_HEADER


@dataclass(frozen=True)
class SerialJointChannels:
    """Where one joint's counts sit in the sample frame."""

    motor_channel: int = field(metadata={"ge": 0, "le": 245, "doc": "channel of the motor encoder"})
    link_channel: int | None = field(
        default=None, metadata={"ge": 0, "le": 245, "doc": "channel of the link encoder, if any"}
    )


@dataclass(frozen=True)
class SerialSettings:
    port: str = field(metadata={"min_len": 1, "doc": "serial device of the board, /dev/ttyUSB0"})
    baudrate: int = field(default=921_600, metadata={"gt": 0})
    exclusive: bool = field(default=True, metadata={"doc": "lock the port against other users"})
    channels: int = field(
        default=2, metadata={"ge": 1, "le": 82, "doc": "counts in every sample frame"}
    )
    count_bits: int = field(
        default=19, metadata={"ge": 12, "le": 32, "doc": "bit width of a count on the wire"}
    )
    # Joints left out take the pair layout: the k-th joint of the controller (from 0) has its
    # motor count in channel 2k and its link count in channel 2k + 1.
    joints: dict[str, SerialJointChannels] = field(default_factory=dict)
    reply_timeout_s: float = field(default=0.5, metadata={"gt": 0.0, "le": 60.0})
    start_timeout_s: float = field(
        default=2.0,
        metadata={"gt": 0.0, "le": 600.0, "doc": "START to first frame, on top of settle_s"},
    )
    stall_timeout_s: float = field(
        default=0.5, metadata={"gt": 0.0, "le": 60.0, "doc": "longest silence inside a capture"}
    )
    lost_frames: Literal["refuse", "interpolate"] = "refuse"
    max_interpolated_frames: int = field(
        default=10, metadata={"ge": 0, "doc": "with interpolate: most frames filled in a capture"}
    )
    max_gap_frames: int = field(
        default=2, metadata={"ge": 1, "doc": "with interpolate: longest run of frames filled"}
    )
    # An identical frame received twice (same counter, same bytes) carries no new information:
    # drop_identical keeps one copy. A repeated counter with other content is always refused.
    duplicate_frames: Literal["refuse", "drop_identical"] = "refuse"
    heartbeat_interval_s: float = field(
        default=0.1,
        metadata={"gt": 0.0, "le": 5.0, "doc": "HEARTBEAT period while a cycle runs"},
    )
    watchdog_timeout_s: float = field(
        default=0.5,
        metadata={
            "ge": 0.05,
            "le": 60.0,
            "doc": "the board stops the joint after this long without a HEARTBEAT",
        },
    )
    rate_tolerance: float = field(
        default=0.005,
        metadata={"gt": 0.0, "lt": 0.5, "doc": "board clock vs requested rate, relative"},
    )

    def machine_address(self) -> str:
        return f"serial port {canonical_device(self.port)}"

    def check(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        # Three beats per timeout: one late or lost beat must not stop a healthy cycle.
        if self.watchdog_timeout_s < 3.0 * self.heartbeat_interval_s:
            out.append(
                (
                    "watchdog_timeout_s",
                    f"expected at least 3 x heartbeat_interval_s "
                    f"({3.0 * self.heartbeat_interval_s:g} s), found {self.watchdog_timeout_s:g}",
                )
            )
        width = math.ceil(self.count_bits / 8)
        most = (MAX_PAYLOAD_BYTES - SAMPLE_HEADER.size) // width
        if self.channels > most:
            out.append(
                (
                    "channels",
                    f"expected at most {most} channels of {self.count_bits}-bit counts (a sample "
                    f"frame holds {MAX_PAYLOAD_BYTES} bytes), found {self.channels}",
                )
            )
        used: dict[int, str] = {}
        for name, j in self.joints.items():
            for side in ("motor_channel", "link_channel"):
                ch = getattr(j, side)
                if ch is None:
                    continue
                where = f"joints.{name}.{side}"
                if ch >= self.channels:
                    out.append(
                        (where, f"expected a channel < channels ({self.channels}), found {ch}")
                    )
                elif ch in used:
                    out.append(
                        (where, f"expected a channel no other joint uses, found {ch} ({used[ch]})")
                    )
                else:
                    used[ch] = where
        return out


def resolve_channels(
    settings: SerialSettings, joints: tuple[Any, ...], controller: str
) -> dict[str, tuple[int, int | None]]:
    """Joint name -> (motor channel, link channel or None); DriverError names what does not fit."""
    out: dict[str, tuple[int, int | None]] = {}
    for k, joint in enumerate(joints):
        given = settings.joints.get(joint.name)
        if given is not None:
            out[joint.name] = (given.motor_channel, given.link_channel)
        elif 2 * k + 1 < settings.channels:
            out[joint.name] = (2 * k, 2 * k + 1)
        else:
            raise DriverError(
                f"{controller}: joint {joint.name} has no channels: the pair layout of "
                f"{settings.channels} channels covers {settings.channels // 2} joints; give it "
                f"settings.joints.{joint.name}.motor_channel"
            )
        if joint.encoder_bits > settings.count_bits:
            raise DriverError(
                f"{controller}: joint {joint.name} has a {joint.encoder_bits}-bit encoder but "
                f"the board sends {settings.count_bits}-bit counts (settings.count_bits)"
            )
    used: dict[int, str] = {}
    for name, pair in out.items():
        for ch in pair:
            if ch is None:
                continue
            if ch in used:
                raise DriverError(f"{controller}: channel {ch} is given to {used[ch]} and {name}")
            used[ch] = name
    return out
