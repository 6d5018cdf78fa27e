"""The agent's configuration: one YAML file validated into these frozen dataclasses.

Field constraints live in `field(metadata=...)` and are enforced by `agent.schema.validate`:
  gt / ge / lt / le : numeric bounds;  min_len : least number of items;  doc : one-line help.
Each driver validates its own `settings:` section with its `settings_type` (Telegraf-style).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agent.config.identification import IdentificationCycleSettings
from agent.config.publish import PublishSettings
from agent.models.joint import JointModelSettings

LogLevel = Literal["debug", "info", "warning", "error"]

PAPER_SWEEP_BACKLASH_RAD = (0.0, 3e-4, 5e-4, 7e-4, 9e-4, 11e-4, 13e-4, 15e-4, 17e-4, 19e-4, 21e-4)


@dataclass(frozen=True)
class RetentionSettings:
    """How long captures and reports are kept (agent.service.retention), applied after each
    stop; null switches a limit off. Each joint's latest evidence and what an open watch or
    alert points to are always kept."""

    max_age_days: float | None = field(default=365.0, metadata={"gt": 0.0})
    max_mb: float | None = field(
        default=2000.0, metadata={"gt": 0.0, "doc": "captures + reports size budget, MB"}
    )


@dataclass(frozen=True)
class AgentSettings:
    state_dir: str = field(default="var", metadata={"doc": "history, captures, reports go here"})
    log_level: LogLevel = "info"
    # The control socket's path when systemd gives no RUNTIME_DIRECTORY (default:
    # <state_dir>/control.sock).
    control_socket: str | None = None
    poll_s: float = field(
        default=0.2, metadata={"gt": 0.0, "le": 10.0, "doc": "status poll period while idle"}
    )
    # Free space a stop must leave in state_dir after its captures and reports, or its cycles
    # are not started (agent.service.preflight).
    disk_reserve_mb: float = field(default=50.0, metadata={"ge": 0.0})
    retention: RetentionSettings = field(default_factory=RetentionSettings)


@dataclass(frozen=True)
class BacklashCycleSettings:
    """Constant-speed cycle of Giovannitti et al. 2022 (axis horizontal, no reversal)."""

    motor_speed_rps: float = field(metadata={"gt": 0.0, "le": 500.0, "doc": "motor rev/s"})
    load_turns: float = field(default=12.0, metadata={"ge": 2.0, "le": 100.0})
    sample_rate_hz: float = field(default=500.0, metadata={"gt": 0.0, "le": 100_000.0})
    settle_s: float = field(default=0.5, metadata={"ge": 0.0, "le": 60.0})


@dataclass(frozen=True)
class ThresholdSettings:
    """Status limits. Backlash limits apply when calibrated, amplitude limits otherwise."""

    backlash_watch_rad: float | None = field(default=None, metadata={"gt": 0.0})
    backlash_alert_rad: float | None = field(default=None, metadata={"gt": 0.0})
    amplitude_watch_rad_s: float | None = field(default=None, metadata={"gt": 0.0})
    amplitude_alert_rad_s: float | None = field(default=None, metadata={"gt": 0.0})


@dataclass(frozen=True)
class CalibrationPoint:
    amplitude_rad_s: float = field(metadata={"ge": 0.0})
    backlash_rad: float = field(metadata={"ge": 0.0})


@dataclass(frozen=True)
class ModelToleranceSettings:
    """How far the real joint may be from its `model:`, as the range 9 joints in 10 lie in
    (+-rel, or a factor either way). A simulation calibration measures what delta = f(A) reads
    on joints at the ends of each tolerance: the model term of the backlash interval. 0 (a
    factor of 1) leaves a parameter out; all left out: no model term."""

    stiffness_rel: float = field(default=0.2, metadata={"ge": 0.0, "lt": 1.0})
    load_inertia_rel: float = field(default=0.3, metadata={"ge": 0.0, "lt": 1.0})
    damping_factor: float = field(default=2.0, metadata={"ge": 1.0, "le": 10.0})


@dataclass(frozen=True)
class CalibrationSettings:
    """delta = f(A) of Giovannitti et al. 2022, eq. 10: from a simulation sweep or from bench
    measurements."""

    source: Literal["none", "simulation", "points"] = "none"
    points: tuple[CalibrationPoint, ...] = ()
    sweep_backlash_rad: tuple[float, ...] = PAPER_SWEEP_BACKLASH_RAD
    model_tolerance: ModelToleranceSettings = field(default_factory=ModelToleranceSettings)


@dataclass(frozen=True)
class EstimatorSettings:
    resonance_hz: tuple[float, float] = (10.0, 200.0)
    decay_per_s: tuple[float, float] = (2.0, 400.0)
    period_tolerance: float = field(default=0.02, metadata={"gt": 0.0, "lt": 0.5})
    seed: int = field(default=1, metadata={"ge": 0})


@dataclass(frozen=True)
class JointSettings:
    name: str
    index: int = field(metadata={"ge": 1, "le": 64, "doc": "axis number on the controller"})
    gear_ratio: float = field(metadata={"ge": 1.0, "doc": "motor turns per load turn"})
    backlash_cycle: BacklashCycleSettings
    encoder_bits: int = field(default=19, metadata={"ge": 12, "le": 32})
    test_pose_rad: float = 0.0
    thresholds: ThresholdSettings = field(default_factory=ThresholdSettings)
    calibration: CalibrationSettings = field(default_factory=CalibrationSettings)
    model: JointModelSettings = field(default_factory=JointModelSettings)
    estimator: EstimatorSettings = field(default_factory=EstimatorSettings)
    # Travel limits: a cycle whose whole travel does not fit inside them less the margin is
    # refused before motion. Unset: from the controller's robot description, else from what
    # the driver knows of its controller (UR: +-2 pi); a joint that turns without end says
    # continuous_rotation. A moving joint with none of these is a config error.
    position_min_rad: float | None = None
    position_max_rad: float | None = None
    continuous_rotation: bool = field(
        default=False, metadata={"doc": "turns without end (turntable, test bench)"}
    )
    limit_margin_rad: float = field(default=0.05, metadata={"ge": 0.0, "le": 1.0})


@dataclass(frozen=True)
class InterlockSettings:
    """Every one must hold before motion starts and while it lasts."""

    require_production_stop: bool = True
    require_permission: bool = True
    pose_tolerance_rad: float = field(default=0.01, metadata={"gt": 0.0})
    require_no_alarm: bool = True
    require_full_override: bool = True
    # A person near the machine (light curtain, area scanner): unknown presence counts as present.
    require_operator_absent: bool = False
    # After an abort, move the joint back to its test pose (a separate, logged motion under
    # these same interlocks, at return_speed_rad_s) once the machine is confirmed at rest and
    # every interlock holds; false: a person moves it back.
    return_after_abort: bool = True
    return_speed_rad_s: float = field(default=0.2, metadata={"gt": 0.0, "le": 50.0})


@dataclass(frozen=True)
class ProductionStopTrigger:
    """Cycle when the controller reports a production stop expected to last at least this long
    (a stop of unknown length counts only when the minimum is 0)."""

    min_expected_stop_s: float = field(default=0.0, metadata={"ge": 0.0})


@dataclass(frozen=True)
class ScheduleTrigger:
    """Queue every joint's cycle on a schedule; the cycles still wait for a stop and interlocks."""

    every_s: float | None = field(default=None, metadata={"gt": 0.0})
    cron: str | None = field(default=None, metadata={"doc": "m h dom mon dow (local time)"})
    window: str | None = field(default=None, metadata={"doc": "HH:MM-HH:MM (local time)"})


@dataclass(frozen=True)
class TriggerSettings:
    """What queues cycles; on demand (`jha cycle now`) is always on."""

    production_stop: ProductionStopTrigger | None = field(default_factory=ProductionStopTrigger)
    schedule: ScheduleTrigger | None = None
    # Added to each cycle's settle + duration when fitting cycles into a stop.
    cycle_margin_s: float = field(default=2.0, metadata={"ge": 0.0})


@dataclass(frozen=True)
class ControllerSettings:
    name: str
    driver: str = field(metadata={"doc": "entry point in joint_health_agent.drivers"})
    # Empty only for a driver without Capability.CYCLES (checked in _driver_settings).
    joints: tuple[JointSettings, ...] = field(default=())
    interlocks: InterlockSettings = field(default_factory=InterlockSettings)
    triggers: TriggerSettings = field(default_factory=TriggerSettings)
    identification: IdentificationCycleSettings | None = None
    # Robot description (config/robots/*.yaml): joint N's travel limits when the joint with
    # index N sets none (the identification's robot file serves when this is unset).
    robot: str | None = field(default=None, metadata={"min_len": 1})
    # Validated by the driver's own settings_type; the raw mapping is kept when it has none.
    settings: Any = None


@dataclass(frozen=True)
class Config:
    controllers: tuple[ControllerSettings, ...] = field(metadata={"min_len": 1})
    agent: AgentSettings = field(default_factory=AgentSettings)
    publish: PublishSettings = field(default_factory=PublishSettings)
    source: str = field(default="<memory>", metadata={"internal": True})
