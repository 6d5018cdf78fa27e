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
import importlib.util
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias, TypeVar

from agent.capture.model import Capture, CaptureMeta
from agent.errors import DriverError
from drivers.travel import JointTravel, Ramps

if TYPE_CHECKING:  # numpy and the estimation package load only where a trajectory is evaluated
    from agent.capture.multi import MultiCapture
    from agent.estimation.identification.excitation import FourierTrajectory

ENTRY_POINT_GROUP = "joint_health_agent.drivers"
T = TypeVar("T")


class CycleKind(enum.StrEnum):
    """What a test cycle measures; the name its captures, history rows and reports carry."""

    BACKLASH = "backlash"  # one joint at constant speed (BacklashCycle)
    IDENTIFICATION = "identification"  # every joint on an excitation trajectory (ExcitationCycle)


class Capability(enum.Flag):
    NONE = 0
    CYCLES = enum.auto()  # can run test cycles (motion)
    MOTOR_ENCODER = enum.auto()  # captures the motor-side encoder
    LINK_ENCODER = enum.auto()  # captures the link-side encoder too (dual-encoder joints)
    CURRENT = enum.auto()  # captures motor current
    TOOLPATH_STREAMING = enum.auto()  # streams G-code to a CNC
    EXCITATION = enum.auto()  # runs an all-joint excitation trajectory (ExcitationCycle)
    RETURN_MOVE = enum.auto()  # can move one joint back to its test pose (Driver.move_joint)


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
    # Joint speeds where the controller reports them; None: judged from successive positions.
    joint_speeds_rad_s: Mapping[str, float] | None = None


@dataclass(frozen=True)
class BacklashCycle:
    """Constant-speed test of Giovannitti et al. 2022: the joint axis horizontal, the motor at
    constant speed."""

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
    # Where the joint may go (drivers.travel): TravelLimits, CONTINUOUS, or None: not known,
    # and then the cycle is refused before motion.
    travel_limits: JointTravel = None

    @property
    def kind(self) -> CycleKind:
        return CycleKind.BACKLASH

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
            cycle=self.kind.value,  # plain str: the meta goes into YAML sidecars and JSON
            commanded_speed_rad_s=self.motor_speed_rad_s,
            gear_ratio=self.gear_ratio,
            encoder_bits=self.encoder_bits if encoder_bits is None else encoder_bits,
            sample_rate_hz=self.sample_rate_hz,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            extra=dict(extra),
        )


@dataclass(frozen=True)
class ExcitationCycle:
    """Identification test (Zollo, Lopez et al. 2014; Madsen et al. 2020): every joint follows
    one finite Fourier series.

    Joint j (in the order of `joints`) follows, with w = 2 pi / period_s and l = 1..L,
        q_j(t) = q0_j + sum_l a_jl / (w l) sin(w l t) - b_jl / (w l) cos(w l t)
    (agent.estimation.identification.excitation.FourierTrajectory), starting and ending each
    period at rest in the start pose q(0). The cycle is: settle_s standing still at the start
    pose (discarded), then the captured part: hold_s at rest, `periods` periods of motion,
    hold_s at rest. Moving to the start pose is not part of it: the interlocks require the
    robot to stand there.
    The capture holds every joint's link position, motor position and motor torque
    (agent.capture.multi.MultiCapture).
    """

    controller: str
    robot: str  # the robot description's name (config/robots/*.yaml `name:`)
    joints: tuple[str, ...]
    period_s: float
    q0_rad: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]  # (n, L) speed coefficients, rad/s
    b: tuple[tuple[float, ...], ...]  # (n, L), rad/s
    periods: int
    hold_s: float
    settle_s: float  # standing still at the start pose before capture starts, discarded
    sample_rate_hz: float
    gear_ratios: tuple[float, ...]  # motor turns per link turn, per joint
    encoder_bits: int | None = None  # both encoders of every joint; None: not known
    travel_limits: tuple[JointTravel, ...] = ()  # per joint, as BacklashCycle.travel_limits

    def __post_init__(self) -> None:
        n = len(self.joints)
        harmonics = {len(row) for row in (*self.a, *self.b)}
        if n == 0 or len(self.q0_rad) != n or len(self.a) != n or len(self.b) != n:
            raise ValueError(f"excitation cycle: q0_rad, a and b need one row per joint ({n})")
        if len(harmonics) != 1 or 0 in harmonics:
            raise ValueError("excitation cycle: every row of a and b needs the same harmonics")
        if len(self.gear_ratios) != n:
            raise ValueError(f"excitation cycle: gear_ratios needs {n} values")
        if not (self.period_s > 0 and self.periods >= 1 and self.hold_s >= 0):
            raise ValueError("excitation cycle: period_s > 0, periods >= 1, hold_s >= 0")
        if not (self.settle_s >= 0 and self.sample_rate_hz > 0):
            raise ValueError("excitation cycle: settle_s >= 0 and sample_rate_hz > 0")

    @property
    def joint(self) -> str:
        return "all"

    @property
    def kind(self) -> CycleKind:
        return CycleKind.IDENTIFICATION

    @property
    def duration_s(self) -> float:
        """The captured part: rest, the periods of motion, rest."""
        return self.periods * self.period_s + 2.0 * self.hold_s

    @property
    def start_pose_rad(self) -> Mapping[str, float]:
        """q(0) of the trajectory per joint: where the robot must stand (checked by interlocks)."""
        return dict(zip(self.joints, self.trajectory().start_rad(), strict=True))

    def trajectory(self) -> FourierTrajectory:
        from agent.estimation.identification.excitation import FourierTrajectory

        return FourierTrajectory(self.period_s, self.q0_rad, self.a, self.b)

    def capture_meta(
        self, machine: str, extra: Mapping[str, Any], encoder_bits: int | None = None
    ) -> CaptureMeta:
        """Metadata of a capture of this cycle; the trajectory goes into `extra` so that the
        capture alone says what motion it records."""
        return CaptureMeta(
            machine=machine,
            joint=self.joint,
            cycle=self.kind.value,  # plain str: the meta goes into YAML sidecars and JSON
            encoder_bits=self.encoder_bits if encoder_bits is None else encoder_bits,
            sample_rate_hz=self.sample_rate_hz,
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            extra={
                "robot": self.robot,
                "trajectory": self.trajectory().to_dict(),
                "periods": self.periods,
                "hold_s": self.hold_s,
                **extra,
            },
        )


Cycle: TypeAlias = BacklashCycle | ExcitationCycle


def backlash_only(driver: Driver, cycle: Cycle) -> BacklashCycle:
    """The cycle, for a driver that runs backlash cycles only; any other kind is refused."""
    if isinstance(cycle, BacklashCycle):
        return cycle
    raise DriverError(
        f"{driver.controller}: driver {driver.name!r} cannot run an {cycle.kind} cycle "
        f"(no Capability.{Capability.EXCITATION.name})"
    )


class Driver(abc.ABC):
    """A connection to one controller.

    Every coroutine may raise DriverError. `run_cycle` must leave the machine stopped when it
    returns or raises, including on cancellation (the daemon cancels it when an interlock drops).

    Where a driver stops motion: its `stop_motion`, in drivers/<name>/driver.py. The package's
    docstring (drivers/<name>/__init__.py) says what else stops it: the controller's own
    watchdog, the UR worker process.
    """

    name: ClassVar[str] = "abstract"
    capabilities: ClassVar[Capability] = Capability.NONE
    # The frozen dataclass the driver's `settings:` section is validated into
    # (agent.schema.validate).
    settings_type: ClassVar[type[Any] | None] = None
    # Modules the driver imports only when it runs (in a worker, at connect): checked by `jha
    # config check` and `jha drivers`, naming the package extra (DRIVER_EXTRAS) that installs them.
    requires: ClassVar[tuple[str, ...]] = ()

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
    async def run_cycle(self, cycle: Cycle) -> Capture | MultiCapture:
        """Run one test cycle: a BacklashCycle gives a Capture, an ExcitationCycle (drivers
        with Capability.EXCITATION) a MultiCapture; a driver refuses a kind it cannot run with
        DriverError (backlash_only)."""

    @abc.abstractmethod
    async def stop_motion(self) -> str | None:
        """Stop any motion now. Must be safe to call at any time, repeatedly. Returns what the
        stop took beyond the plain stop (the protective stop a driver had to escalate to), for
        the abort's message, or None."""

    async def protective_stop(self) -> str | None:
        """The escalation when a stop did not bring the machine to rest: the protocol's
        protective-stop request, if it has one. Returns what was done, or None: nothing more
        than stop_motion is available."""
        return None

    @property
    def returns_by_agent(self) -> bool:
        """True when the cycle ends away from the test pose and the agent moves the joint back
        as a motion of its own (move_joint), so that a fault on the way back cannot cost the
        complete capture; False when run_cycle itself ends at the test pose."""
        return False

    @property
    def move_speed_max_rad_s(self) -> float:
        """The fastest move_joint the driver commands (a request above it is slowed to it)."""
        return float("inf")

    async def move_joint(self, joint: str, target_rad: float, speed_rad_s: float) -> None:
        """Move one joint to `target_rad` at no more than `speed_rad_s` and wait until it stands
        there (Capability.RETURN_MOVE): the recovery to the test pose after an abort. Must stop
        and raise on cancellation, as run_cycle does."""
        raise DriverError(f"{self.controller}: the {self.name} driver cannot move a joint alone")

    @property
    def control_period_s(self) -> float:
        """How often the interlock watcher polls during motion."""
        return 0.01

    def ramps(self, cycle: Cycle) -> Ramps:
        """How the controller will ramp the cycle's joints (drivers.travel); unknown by default,
        and then the run-up and the stop are bounded generously."""
        return Ramps()

    @classmethod
    def joint_travel(cls, settings: Any, index: int) -> JointTravel:
        """What the driver knows of joint `index`'s travel limits without asking the controller
        (a vendor's documented joint range), used when the config gives none; None: nothing."""
        return None


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


# Which extra of the package installs each driver's dependencies (pyproject.toml).
# The others' dependencies are the core's own (asyncua, pyserial serve agent.publish and
# agent.feedrate too).
DRIVER_EXTRAS = {"ur_rtde": "ur", "can": "can"}


def install_hint(driver: str, missing: str) -> str:
    extra = DRIVER_EXTRAS.get(driver)
    where = f": pip install 'joint-health-agent[{extra}]'" if extra else ""
    return f"driver {driver!r} needs the Python module {missing!r}, not installed{where}"


def missing_modules(cls: type[Driver]) -> list[str]:
    """The driver's run-time modules (Driver.requires) that cannot be found."""
    out = []
    for module in cls.requires:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(module)
    return out


def load_driver_class(name: str) -> type[Driver]:
    eps = available_drivers()
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none installed"
        raise DriverError(f"unknown driver {name!r} (installed: {known})")
    try:
        cls = eps[name].load()
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith(("drivers", "agent")):
            raise DriverError(install_hint(name, exc.name)) from exc
        raise
    if not (isinstance(cls, type) and issubclass(cls, Driver)):
        raise DriverError(f"entry point {name!r} does not name a Driver subclass")
    return cls
