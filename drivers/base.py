"""The one interface every controller driver implements.

Modelled on python-can's BusABC: one abstract class, implementations found through the
entry-point group `joint_health_agent.drivers`, typed exceptions (agent.errors.DriverError).
A driver knows its protocol and nothing of estimation, files or reports.
"""

from __future__ import annotations

import abc
import asyncio
import datetime as dt
import enum
import importlib.metadata
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from agent.capture import Capture, CaptureMeta
from agent.errors import DriverError

ENTRY_POINT_GROUP = "joint_health_agent.drivers"
T = TypeVar("T")


class Capability(enum.Flag):
    NONE = 0
    CYCLES = enum.auto()  # can run test cycles (motion)
    MOTOR_ENCODER = enum.auto()  # captures the motor-side encoder
    LINK_ENCODER = enum.auto()  # captures the link-side encoder too (dual-encoder joints)
    CURRENT = enum.auto()  # captures motor current
    TOOLPATH_STREAMING = enum.auto()  # streams G-code to a CNC


class ControllerMode(enum.Enum):
    PRODUCTION = "production"  # running the production program: never move
    STOPPED = "stopped"  # production stopped, drives enabled, idle
    TEST_CYCLE = "test_cycle"  # executing one of our test cycles
    MANUAL = "manual"  # teach / jog mode: a person may be at the machine
    FAULT = "fault"  # protective stop, alarm, e-stop
    DISCONNECTED = "disconnected"


@dataclass(frozen=True)
class ControllerStatus:
    """One consistent snapshot of what the interlocks look at."""

    mode: ControllerMode
    permission: bool  # the plant's "agent may move the machine" signal
    joint_positions_rad: Mapping[str, float] = field(default_factory=dict)
    alarms: tuple[str, ...] = ()
    speed_override: float = 1.0
    operator_present: bool | None = None
    stop_expected_s: float | None = None  # how long the production stop is expected to last
    time_s: float = 0.0  # controller clock


@dataclass(frozen=True)
class BacklashCycle:
    """Constant-speed test of paper 000: the joint axis horizontal, the motor at constant speed."""

    controller: str
    joint: str
    joint_index: int
    motor_speed_rad_s: float
    gear_ratio: float
    duration_s: float  # captured part, after settling
    settle_s: float  # run-up before capture starts, discarded
    sample_rate_hz: float
    encoder_bits: int
    test_pose_rad: float

    @property
    def kind(self) -> str:
        return "backlash"

    @property
    def start_pose_rad(self) -> Mapping[str, float]:
        """Where each joint the cycle moves must stand before motion (checked by interlocks)."""
        return {self.joint: self.test_pose_rad}

    def capture_meta(
        self, machine: str, extra: Mapping[str, Any], encoder_bits: int | None = None
    ) -> CaptureMeta:
        """Metadata of a capture of this cycle: what an estimator needs to read it.

        `encoder_bits` is what the controller reported, when it reports its own.
        """
        return CaptureMeta(
            machine=machine,
            joint=self.joint,
            cycle=self.kind,
            commanded_speed_rad_s=self.motor_speed_rad_s,
            gear_ratio=self.gear_ratio,
            encoder_bits=self.encoder_bits if encoder_bits is None else encoder_bits,
            sample_rate_hz=self.sample_rate_hz,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            extra=dict(extra),
        )


class Driver(abc.ABC):
    """A connection to one controller.

    Every coroutine may raise DriverError. `run_cycle` must leave the machine stopped when it
    returns or raises, including on cancellation (the daemon cancels it when an interlock drops).
    """

    name: ClassVar[str] = "abstract"
    capabilities: ClassVar[Capability] = Capability.NONE
    # The frozen dataclass the driver's `settings:` section is validated into (agent.schema).
    settings_type: ClassVar[type[Any] | None] = None

    def __init__(self, controller: str, settings: Any, joints: tuple[Any, ...]) -> None:
        self.controller = controller
        self.settings = settings
        self.joints = joints

    @abc.abstractmethod
    async def connect(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def read_status(self) -> ControllerStatus: ...

    @abc.abstractmethod
    async def run_cycle(self, cycle: BacklashCycle) -> Capture: ...

    @abc.abstractmethod
    async def stop_motion(self) -> None:
        """Stop any motion now. Must be safe to call at any time, repeatedly."""

    @property
    def control_period_s(self) -> float:
        """How often the interlock watcher polls during motion."""
        return 0.01


async def within(awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """`await awaitable`; TimeoutError after timeout_s (None: no limit). wait_for done right.

    On Python 3.11 wait_for can swallow a cancellation that arrives just as the awaited thing
    completes; a driver woken by every frame meets that race often, and a cancelled cycle must
    never keep running. asyncio.timeout cancels and re-raises correctly.
    """
    async with asyncio.timeout(timeout_s):
        return await awaitable


def available_drivers() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def load_driver_class(name: str) -> type[Driver]:
    eps = available_drivers()
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none installed"
        raise DriverError(f"unknown driver {name!r} (installed: {known})")
    cls = eps[name].load()
    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise DriverError(f"entry point {name!r} does not name a Driver subclass")
    return cls
