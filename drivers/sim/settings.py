"""Settings of the simulated fake controller (`driver: sim`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SimJointWear:
    """How far one joint of the simulated robot is from its robot file."""

    friction_scale: float = field(
        default=1.0, metadata={"gt": 0.0, "le": 100.0, "doc": "Coulomb, viscous and Stribeck"}
    )
    stiffness_scale: float = field(default=1.0, metadata={"gt": 0.0, "le": 100.0})


@dataclass(frozen=True)
class SimRobotSettings:
    """The simulated robot's truth for the identification cycle (`settings.robot:` of sim)."""

    robot: str = field(metadata={"min_len": 1, "doc": "robot description file"})
    wear: dict[str, SimJointWear] = field(default_factory=dict)
    stribeck_fraction: float = field(
        default=0.5, metadata={"ge": 0.0, "le": 5.0, "doc": "breakaway excess / Coulomb"}
    )
    ripple_fraction: float = field(
        default=0.0, metadata={"ge": 0.0, "le": 1.0, "doc": "strain-wave ripple / Coulomb"}
    )
    load_fraction: float = field(
        default=0.0, metadata={"ge": 0.0, "le": 0.5, "doc": "friction share of gear torque"}
    )
    torque_noise_nm: float = field(
        default=0.0, metadata={"ge": 0.0, "doc": "drive torque noise std, link side"}
    )
    snr_db: float | None = field(
        default=None,
        metadata={"gt": 0.0, "doc": "sensor noise on every channel (Zollo, Lopez et al. 2014)"},
    )
    counts_per_turn: int | None = field(
        default=None, metadata={"gt": 0, "doc": "encoders (default: the robot file's)"}
    )
    control_bandwidth_hz: float = field(default=8.0, metadata={"gt": 0.0, "le": 100.0})

    def check(self) -> list[tuple[str, str]]:
        if not os.path.isfile(self.robot):
            return [("robot", f"no robot description file {self.robot!r}")]
        return []


@dataclass(frozen=True)
class SimJointSettings:
    """What the simulation knows that the agent must find out."""

    backlash_rad: float = field(default=0.0, metadata={"ge": 0.0, "le": 0.05, "doc": "delta"})
    pose_rad: float = field(default=0.0, metadata={"doc": "where the joint stands when stopped"})


@dataclass(frozen=True)
class SimStop:
    """One production stop of the timeline, in seconds after connect."""

    at_s: float = field(metadata={"ge": 0.0})
    length_s: float = field(metadata={"gt": 0.0})


@dataclass(frozen=True)
class SimSettings:
    # Encoder-noise seed; without one every connection draws fresh noise, like a real machine.
    seed: int | None = field(default=None, metadata={"ge": 0})
    # Production timeline, in seconds after connect: runs, then stops for stop_length_s.
    production_runs_s: float = field(default=0.0, metadata={"ge": 0.0})
    stop_length_s: float = field(default=3600.0, metadata={"gt": 0.0})
    # Several stops instead of the one above (then production runs between and after them).
    stops: tuple[SimStop, ...] = ()
    # Whether the stop's length is announced (ControllerStatus.stop_expected_s).
    announce_stop: bool = True
    permission: bool = True
    operator_present: bool | None = None
    control_period_s: float = field(default=0.01, metadata={"gt": 0.0, "le": 1.0})
    alarms: tuple[str, ...] = ()
    speed_override: float = field(default=1.0, metadata={"ge": 0.0, "le": 2.0})
    encoder_noise_counts: float = field(
        default=1.0, metadata={"ge": 0.0, "doc": "peak uniform noise on the encoder, in counts"}
    )
    # 0 runs cycles as fast as the computer can; 1 paces them in real time.
    time_scale: float = field(default=0.0, metadata={"ge": 0.0, "le": 10.0})
    joints: dict[str, SimJointSettings] = field(default_factory=dict)
    # The robot's truth for identification cycles (which robot, wear per joint).
    robot: SimRobotSettings | None = None
    # The machine's own record of its motions, kept outside the agent: one JSON line at each
    # motion's start and end (drivers.sim.motion_log), for tests that count motions.
    motion_log: str | None = field(default=None, metadata={"min_len": 1})
