"""The CAN frames of the `can` driver, read from a DBC file (cantools).

The DBC gives identifiers, layouts, byte order and scaling; the driver needs six messages, each
playing one part, with the signal names below (docs/drivers/can.md lists them with the layout of
the example config/can/joint_encoder.dbc). Enumerated signals are read as raw numbers against the
code tables here, so a plant DBC may name its value tables as it likes.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import cantools
from cantools.database.can import Database as CanDatabase
from cantools.database.can import Message

from agent.errors import DriverError
from drivers.base import ControllerMode

# Signals each message must carry, by the part it plays (the keys of CanMessageNames).
REQUIRED_SIGNALS: Mapping[str, tuple[str, ...]] = {
    "command": ("Command", "CycleCounter", "JointIndex"),
    "status": (
        "Mode",
        "Permission",
        "AlarmActive",
        "CycleState",
        "SpeedOverride",
        "AlarmCode",
        "CycleCounter",
        "RejectReason",
        "ControllerTime",
    ),
    "cycle_setup": ("JointIndex", "SampleRate", "MotorSpeed", "CycleCounter"),
    "cycle_length": ("SampleCount", "Settle", "CycleCounter"),
    "joint_position": ("JointIndex", "Position"),
    "encoder": ("MotorCounts", "LinkCounts", "Counter", "JointIndex"),
}
# Raw integers: they must arrive unscaled and unsigned (counts, counters, indexes).
_RAW_UNSIGNED: Mapping[str, tuple[str, ...]] = {
    "encoder": ("MotorCounts", "LinkCounts", "Counter", "JointIndex"),
    "cycle_length": ("SampleCount",),
}
# Fewer counter values than this would let a burst of lost frames alias into "no gap".
MIN_COUNTER_BITS = 8


@dataclass(frozen=True)
class CanMessageNames:
    """Which DBC message plays which part; the signals inside are fixed (docs/drivers/can.md)."""

    command: str = field(default="JhaCommand", metadata={"min_len": 1})
    status: str = field(default="JhaStatus", metadata={"min_len": 1})
    cycle_setup: str = field(default="JhaCycleSetup", metadata={"min_len": 1})
    cycle_length: str = field(default="JhaCycleLength", metadata={"min_len": 1})
    joint_position: str = field(default="JhaJointPosition", metadata={"min_len": 1})
    encoder: str = field(default="JhaEncoder", metadata={"min_len": 1})


class Command(enum.IntEnum):
    NOP = 0
    ENABLE = 1  # start the periodic status frames (like a CANopen NMT start)
    START_CYCLE = 2
    STOP = 3


class CycleState(enum.IntEnum):
    IDLE = 0
    PREPARING = 1
    SETTLING = 2
    CAPTURING = 3
    DONE = 4
    ABORTED = 5
    REJECTED = 6


# A cycle counter seen in one of these states means the controller took our START_CYCLE.
ACCEPTED_STATES = frozenset(
    {CycleState.PREPARING, CycleState.SETTLING, CycleState.CAPTURING, CycleState.DONE}
)

MODES: Mapping[int, ControllerMode] = {
    0: ControllerMode.PRODUCTION,
    1: ControllerMode.STOPPED,
    2: ControllerMode.TEST_CYCLE,
    3: ControllerMode.MANUAL,
    4: ControllerMode.FAULT,
}

REJECT_REASONS: Mapping[int, str] = {
    0: "no reason given",
    1: "controller not stopped",
    2: "permission signal off",
    3: "unknown joint",
    4: "bad cycle parameters",
    5: "the stream would overload the bus",
    6: "controller busy with another cycle",
    7: "alarm active",
}


class DbcError(ValueError):
    """The DBC file cannot serve the driver; `field` is the settings key to blame."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class CanProtocol:
    """The six messages of the driver, resolved from one DBC file."""

    source: str
    command: Message
    status: Message
    cycle_setup: Message
    cycle_length: Message
    joint_position: Message
    encoder: Message

    @property
    def position_bits(self) -> int:
        """Bit width of the encoder counts the frames carry (19 in the example DBC)."""
        return int(self.encoder.get_signal_by_name("MotorCounts").length)

    @property
    def counter_modulus(self) -> int:
        return 1 << int(self.encoder.get_signal_by_name("Counter").length)

    def receive_filters(self) -> list[dict[str, Any]]:
        """python-can filters passing exactly the frames the controller sends us."""
        return [
            {
                "can_id": m.frame_id,
                "can_mask": 0x1FFFFFFF if m.is_extended_frame else 0x7FF,
                "extended": bool(m.is_extended_frame),
            }
            for m in (self.status, self.joint_position, self.encoder)
        ]


@dataclass(frozen=True)
class StatusFrame:
    """One decoded status frame, raw codes kept (the driver maps them, the peer makes them)."""

    mode_code: int
    permission: bool
    alarm_active: bool
    cycle_state: int
    speed_override: float
    alarm_code: int
    cycle_counter: int
    reject_reason: int
    controller_time_s: float  # as sent: wraps every 65.536 s

    @property
    def mode(self) -> ControllerMode:
        # An unknown code is treated as a fault: nothing moves on a state we cannot read.
        return MODES.get(self.mode_code, ControllerMode.FAULT)


class CanFrameError(DriverError, ValueError):
    """A received frame does not decode as the DBC's message: the message names it and why."""


def decode_numbers(message: Message, data: bytes, *, scaling: bool = True) -> dict[str, float]:
    """The signals of one frame as numbers (value tables not applied); CanFrameError if the
    bytes are not a frame of `message` (wrong length, a container message)."""
    where = f"{message.name} (id 0x{message.frame_id:X})"
    try:
        decoded = message.decode(bytes(data), decode_choices=False, scaling=scaling)
    except Exception as exc:  # cantools raises DecodeError, or struct/bitstruct errors, of its own
        raise CanFrameError(f"{where}: {len(data)}-byte frame does not decode: {exc}") from None
    if not isinstance(decoded, Mapping):
        raise CanFrameError(f"{where} is a container message, not a frame of signals")
    return {str(k): v for k, v in decoded.items() if isinstance(v, int | float)}


def decode_status(proto: CanProtocol, data: bytes) -> StatusFrame:
    """The status frame, or CanFrameError if a signal is missing or not a finite number."""
    v = decode_numbers(proto.status, data)
    missing = [n for n in REQUIRED_SIGNALS["status"] if n not in v]
    bad = [n for n in REQUIRED_SIGNALS["status"] if n in v and not math.isfinite(v[n])]
    if missing or bad:
        where = f"{proto.status.name} (id 0x{proto.status.frame_id:X})"
        raise CanFrameError(f"{where}: signals {', '.join(missing + bad)} are not numbers")
    return StatusFrame(
        mode_code=int(v["Mode"]),
        permission=bool(v["Permission"]),
        alarm_active=bool(v["AlarmActive"]),
        cycle_state=int(v["CycleState"]),
        speed_override=float(v["SpeedOverride"]),
        alarm_code=int(v["AlarmCode"]),
        cycle_counter=int(v["CycleCounter"]),
        reject_reason=int(v["RejectReason"]),
        controller_time_s=float(v["ControllerTime"]),
    )


def encode(message: Message, values: Mapping[str, Any]) -> bytes:
    """Encode with range checks (a value outside the DBC's [min|max] is a DriverError upstream)."""
    return bytes(message.encode(dict(values), scaling=True, strict=True))


def nominal_frame_bits(message: Message) -> int:
    """Bits a data frame occupies on a classic CAN bus without stuffing, interframe space included.

    Standard frame: SOF 1, ID 11, RTR 1, IDE 1, r0 1, DLC 4, data, CRC 15 + 1, ACK 2, EOF 7, IFS 3
    = 47 + 8 * bytes (111 for 8 bytes). Extended frames add SRR, IDE and 18 ID bits (20 more).
    Stuffing adds up to a fifth of the stuffed part on top; the peer models it bit by bit.
    """
    return (67 if message.is_extended_frame else 47) + 8 * int(message.length)


def stream_bus_load(message: Message, frames_per_s: float, bitrate: int) -> float:
    """Share of the bus one periodic stream takes (unstuffed lower bound)."""
    return frames_per_s * nominal_frame_bits(message) / bitrate


def load_protocol(path: str, names: CanMessageNames) -> CanProtocol:
    """Read the DBC and resolve every message the driver needs; raises DbcError naming the field.

    A file read before with the same size and modification time is not parsed again: config
    validation and the driver both load it, and cantools takes tens of milliseconds a file.
    """
    file = Path(path)
    try:
        st = file.stat()
    except OSError:
        st = None
    if st is None or not file.is_file():
        raise DbcError("dbc", f"expected a readable DBC file, found no file at {path!r}")
    return _load_protocol(path, names, st.st_mtime_ns, st.st_size, st.st_ino)


@functools.lru_cache(maxsize=16)
def _load_protocol(
    path: str, names: CanMessageNames, mtime_ns: int, size: int, inode: int
) -> CanProtocol:
    """load_protocol for one version of the file (the stat fields are the cache key)."""
    file = Path(path)
    try:
        db = cantools.database.load_file(str(file), database_format="dbc", strict=True)
    except Exception as exc:  # cantools raises parser, OS and value errors of its own
        raise DbcError("dbc", f"cannot load DBC file {path!r}: {exc}") from exc
    if not isinstance(db, CanDatabase):
        raise DbcError("dbc", f"expected a CAN database in {path!r}, found {type(db).__name__}")
    messages: dict[str, Message] = {}
    for role in (f.name for f in fields(CanMessageNames)):
        wanted = getattr(names, role)
        try:
            msg = db.get_message_by_name(wanted)
        except KeyError:
            known = ", ".join(sorted(m.name for m in db.messages)) or "none"
            raise DbcError(
                f"messages.{role}",
                f"expected the name of a message in {path} (found: {known}), found {wanted!r}",
            ) from None
        _check_signals(role, msg, path)
        messages[role] = msg
    _check_distinct_ids(messages, path)
    proto = CanProtocol(source=path, **messages)
    link_bits = int(proto.encoder.get_signal_by_name("LinkCounts").length)
    if link_bits != proto.position_bits:
        raise DbcError(
            "messages.encoder",
            f"{path}: {proto.encoder.name}.LinkCounts has {link_bits} bits, MotorCounts has "
            f"{proto.position_bits}: expected the same encoder width on both sides",
        )
    return proto


def _check_signals(role: str, msg: Message, path: str) -> None:
    have = {s.name: s for s in msg.signals}
    missing = [name for name in REQUIRED_SIGNALS[role] if name not in have]
    if missing:
        raise DbcError(
            f"messages.{role}",
            f"{path}: message {msg.name} lacks signal(s) {', '.join(missing)} "
            f"(the {role} message needs {', '.join(REQUIRED_SIGNALS[role])})",
        )
    for name in _RAW_UNSIGNED.get(role, ()):
        s = have[name]
        if s.is_signed or s.is_float or s.scale != 1 or s.offset != 0:
            raise DbcError(
                f"messages.{role}",
                f"{path}: {msg.name}.{name} must be an unsigned integer with scale 1 and offset 0",
            )
    if role == "encoder" and have["Counter"].length < MIN_COUNTER_BITS:
        raise DbcError(
            "messages.encoder",
            f"{path}: {msg.name}.Counter has {have['Counter'].length} bits, expected at least "
            f"{MIN_COUNTER_BITS} so that lost frames are counted",
        )


def _check_distinct_ids(messages: Mapping[str, Message], path: str) -> None:
    seen: dict[int, str] = {}
    for role, msg in messages.items():
        if msg.frame_id in seen:
            raise DbcError(
                f"messages.{role}",
                f"{path}: {msg.name} shares frame id 0x{msg.frame_id:X} with the "
                f"{seen[msg.frame_id]} message; expected one message per part",
            )
        seen[msg.frame_id] = role
