"""The identification job the daemon runs: the excitation cycle to drive, and the analysis of
its capture (Zollo, Lopez et al. 2014; Madsen et al. 2020). Pure and picklable:
analyze_identification runs in the daemon's process pool.

    cycle = excitation_cycle(ctrl)                  # before the stop: design (cached)
    capture = await run_guarded_cycle(driver, cycle, ...)
    outcome = analyze_identification(capture, ctrl.identification)

A capture the identification cannot trust is refused with IdentificationRefused, whose
`reason` says why: "missing_channels" (an encoder or the torque is not in it), "saturated" (a
drive reached its torque limit), "poor_excitation" (the regressor's condition number is above
the configured limit) or "bad_capture" (anything else wrong with the data).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agent.atomic import atomic_write_text
from agent.capture.multi import MultiCapture
from agent.config.identification import IdentificationCycleSettings
from agent.config.model import ControllerSettings
from agent.config.travel_limits import joint_travel
from agent.errors import CaptureError, ConfigError, EstimationError
from agent.estimation.identification.excitation import (
    ExcitationSettings,
    FourierTrajectory,
    design_excitation,
)
from agent.estimation.identification.filters import FilterSettings
from agent.estimation.identification.fit import PoorExcitation, identify
from agent.estimation.identification.model import IdentificationSettings
from agent.estimation.identification.result import IdentificationResult
from agent.history.records import Estimate
from agent.models.robot.description import RobotDescription, load_robot
from agent.report.evidence import EvidencePlot, EvidenceSeries
from drivers.base import ExcitationCycle
from drivers.travel import JointTravel, TravelLimits

RefusalReason = Literal["missing_channels", "saturated", "poor_excitation", "bad_capture"]
MAX_EVIDENCE_POINTS = 2000
# Which channels give each quantity, best first (counts need the encoder resolution).
LINK_CHANNELS = ("link_pos_rad", "link_counts")
MOTOR_CHANNELS = ("motor_pos_rad", "motor_counts")
TORQUE_CHANNELS = ("motor_torque_nm",)


class IdentificationRefused(EstimationError):
    """The capture is not analysed; `reason` is one of RefusalReason."""

    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__(message)
        self.reason: RefusalReason = reason

    def __reduce__(self) -> tuple[type[IdentificationRefused], tuple[str, str]]:
        # process pools pickle exceptions through their constructor arguments
        return (type(self), (self.reason, str(self)))


# ------------------------------------------------------------------------------- the cycle


@functools.lru_cache(maxsize=8)
def _robot(path: str, mtime_ns: int) -> RobotDescription:
    return load_robot(path)


def robot_of(settings: IdentificationCycleSettings) -> RobotDescription:
    """The robot file of the settings, read once per change of the file."""
    try:
        mtime = os.stat(settings.robot).st_mtime_ns
    except OSError as e:
        raise ConfigError(f"identification.robot: cannot read {settings.robot!r}: {e}") from None
    return _robot(settings.robot, mtime)


@functools.lru_cache(maxsize=8)
def _designed(
    robot: RobotDescription, design: ExcitationSettings
) -> tuple[FourierTrajectory, float]:
    result = design_excitation(robot, design)
    return result.trajectory, result.condition_number


def excitation_design(
    settings: IdentificationCycleSettings, robot: RobotDescription
) -> ExcitationSettings:
    t = settings.trajectory
    if t.position_center_rad is not None and len(t.position_center_rad) != robot.n_joints:
        raise ConfigError(
            f"identification.trajectory.position_center_rad: expected {robot.n_joints} values "
            f"(one per joint of {robot.source}), found {len(t.position_center_rad)}"
        )
    return ExcitationSettings(
        period_s=t.period_s,
        harmonics=t.harmonics,
        position_center_rad=t.position_center_rad,
        position_halfrange_rad=t.position_halfrange_rad,
        speed_fraction=t.speed_fraction,
        accel_fraction=t.accel_fraction,
        maxiter=t.maxiter,
        seed=t.seed,
    )


def excitation_cycle(
    ctrl: ControllerSettings, designed: tuple[FourierTrajectory, float] | None = None
) -> ExcitationCycle:
    """The identification cycle of a controller: the optimised excitation of its robot.

    The design (SLSQP, seconds to a minute for six joints) is cached per robot and settings in
    this process; `designed` (trajectory, condition number) skips it (cached_excitation_cycle
    brings one from the state dir). Raises ConfigError when the controller has no
    `identification:` section, when its joints do not name every joint of the robot (the
    interlocks must see each one's pose), or when the optimiser cannot reach the
    condition-number limit the analysis will apply.
    """
    s = ctrl.identification
    if s is None:
        raise ConfigError(f"controller {ctrl.name}: no identification: section")
    robot = robot_of(s)
    names = {j.name for j in ctrl.joints}
    missing = [j for j in robot.joint_names if j not in names]
    if ctrl.joints and missing:
        raise ConfigError(
            f"controller {ctrl.name}: joints {', '.join(missing)} of {robot.source} are not "
            "among the controller's joints; the interlocks must see every joint's pose"
        )
    trajectory, cond = designed or _designed(robot, excitation_design(s, robot))
    if trajectory.n_joints != robot.n_joints:
        raise ConfigError(
            f"controller {ctrl.name}: the designed excitation drives {trajectory.n_joints} "
            f"joints, {robot.source} has {robot.n_joints}"
        )
    if not cond <= s.max_condition_number:
        raise ConfigError(
            f"controller {ctrl.name}: the best excitation within the limits reaches condition "
            f"number {cond:.4g}, above identification.max_condition_number "
            f"{s.max_condition_number:g}: widen the trajectory limits or raise the limit"
        )
    counts = robot.encoder_counts_per_turn
    bits = int(math.log2(counts)) if counts and counts & (counts - 1) == 0 else None
    return ExcitationCycle(
        controller=ctrl.name,
        robot=robot.name,
        joints=robot.joint_names,
        period_s=trajectory.period_s,
        q0_rad=trajectory.q0_rad,
        a=trajectory.a,
        b=trajectory.b,
        periods=s.trajectory.periods,
        hold_s=s.trajectory.hold_s,
        settle_s=s.settle_s,
        sample_rate_hz=s.sample_rate_hz,
        gear_ratios=tuple(j.gear_ratio for j in robot.joints),
        encoder_bits=bits,
        travel_limits=_travel_limits(ctrl, robot),
    )


def _travel_limits(ctrl: ControllerSettings, robot: RobotDescription) -> tuple[JointTravel, ...]:
    """Each robot joint's limits: the configured joint's (drivers.travel), else the robot's."""
    configured = {j.name: j for j in ctrl.joints}
    out: list[JointTravel] = []
    for spec in robot.joints:
        joint = configured.get(spec.name)
        if joint is not None:
            out.append(joint_travel(ctrl, joint))
        else:
            where = f"robot description {robot.source}"
            out.append(TravelLimits(spec.position_min_rad, spec.position_max_rad, source=where))
    return tuple(out)


def design_key(settings: IdentificationCycleSettings) -> str:
    """What the design depends on, hashed: the robot file's bytes and the design settings."""
    try:
        robot_bytes = Path(settings.robot).read_bytes()
    except OSError as e:
        raise ConfigError(f"identification.robot: cannot read {settings.robot!r}: {e}") from None
    design = excitation_design(settings, robot_of(settings))
    text = json.dumps(dataclasses.asdict(design), sort_keys=True)
    digest = hashlib.sha256(robot_bytes + b"\0" + text.encode())
    return digest.hexdigest()[:32]


def cached_excitation_cycle(
    ctrl: ControllerSettings, cache_dir: Path
) -> tuple[ExcitationCycle, bool]:
    """excitation_cycle with the design cached in `cache_dir` (one JSON file per design_key):
    a daemon designs each trajectory once, across restarts. Returns (cycle, from the cache).
    A damaged cache file is designed again and replaced."""
    s = ctrl.identification
    if s is None:
        raise ConfigError(f"controller {ctrl.name}: no identification: section")
    path = cache_dir / f"excitation-{design_key(s)}.json"
    designed = _load_design(path)
    if designed is not None:
        return excitation_cycle(ctrl, designed), True
    robot = robot_of(s)
    trajectory, cond = _designed(robot, excitation_design(s, robot))
    # Only a design the analysis will accept is kept (excitation_cycle refuses the others).
    cycle = excitation_cycle(ctrl, (trajectory, cond))
    cache_dir.mkdir(parents=True, exist_ok=True)
    doc = {"trajectory": trajectory.to_dict(), "condition_number": cond, "robot": s.robot}
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    return cycle, False


def _load_design(path: Path) -> tuple[FourierTrajectory, float] | None:
    try:
        doc = json.loads(path.read_text())
        t = doc["trajectory"]
        trajectory = FourierTrajectory(
            float(t["period_s"]),
            tuple(float(v) for v in t["q0_rad"]),
            tuple(tuple(float(v) for v in row) for row in t["a"]),
            tuple(tuple(float(v) for v in row) for row in t["b"]),
        )
        cond = float(doc["condition_number"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or damaged: designed again
    if not (math.isfinite(cond) and trajectory.period_s > 0 and trajectory.a):
        return None
    return trajectory, cond


# ------------------------------------------------------------------------------- the analysis


@dataclass(frozen=True)
class IdentificationOutcome:
    """Per joint: indicators (agent.history.records.Estimate) and evidence plots; the fit's
    summary."""

    controller: str
    robot: str
    model: str
    method: str
    condition_number: float
    nmse_nm: float
    estimates: Mapping[str, tuple[Estimate, ...]]
    evidence: Mapping[str, tuple[EvidencePlot, ...]]
    warnings: tuple[str, ...]
    seconds: float
    source: str
    result: dict[str, Any] = field(repr=False)  # IdentificationResult.to_dict(), no samples

    def to_dict(self) -> dict[str, Any]:
        return {
            "controller": self.controller,
            "robot": self.robot,
            "model": self.model,
            "method": self.method,
            "condition_number": self.condition_number,
            "nmse_nm": self.nmse_nm,
            "estimates": {j: [e.to_dict() for e in es] for j, es in self.estimates.items()},
            "evidence": {j: [p.to_dict() for p in ps] for j, ps in self.evidence.items()},
            "warnings": list(self.warnings),
            "seconds": self.seconds,
            "source": self.source,
            "result": self.result,
        }


def identification_settings(s: IdentificationCycleSettings) -> IdentificationSettings:
    return IdentificationSettings(
        method=s.method,
        model=s.model,
        filter=FilterSettings(
            bandwidth_hz=s.bandwidth_hz, cutoff_hz=s.cutoff_hz, decimation=s.decimation
        ),
        max_condition_number=s.max_condition_number,
        min_friction_speed_rad_s=s.min_friction_speed_rad_s,
        saturation_fraction=s.saturation_fraction,
        load_friction=s.load_friction,
    )


def check_channels(capture: MultiCapture, robot: RobotDescription) -> None:
    """Refuse (missing_channels) a capture without every joint's two encoders and torque."""
    missing_joints = [j for j in robot.joint_names if j not in capture.joints]
    if missing_joints:
        raise IdentificationRefused(
            "missing_channels",
            f"{capture.source}: no data for joints {', '.join(missing_joints)} of {robot.source}",
        )
    lacking = [
        f"{what} ({' or '.join(names)})"
        for what, names in (
            ("link encoder", LINK_CHANNELS),
            ("motor encoder", MOTOR_CHANNELS),
            ("motor torque", TORQUE_CHANNELS),
        )
        if not any(n in capture.channels for n in names)
    ]
    if lacking:
        raise IdentificationRefused(
            "missing_channels",
            f"{capture.source}: missing {', '.join(lacking)}; the identification needs both "
            "encoders and the drive torque of every joint",
        )


def analyze_identification(
    capture: MultiCapture,
    settings: IdentificationCycleSettings,
    robot: RobotDescription | None = None,
) -> IdentificationOutcome:
    """Identify friction, stiffness and the dynamic model from an excitation capture.

    `robot` defaults to the settings' robot file. Raises IdentificationRefused (a typed
    EstimationError, exit code 65) with the reason when the capture cannot be trusted.
    """
    robot = robot if robot is not None else robot_of(settings)
    check_channels(capture, robot)
    single_encoder = capture.meta.extra.get("motor_position_from") == "link_encoder"
    if settings.model == "elastic" and single_encoder:
        # One encoder per joint (UR RTDE): the gear's twist, which the elastic model needs, is
        # not in the data.
        raise IdentificationRefused(
            "missing_channels",
            f"{capture.source}: {capture.meta.extra.get('motor_position_note', '')}; "
            "identification.model elastic needs a motor encoder, use model: rigid",
        )
    by_name = dict(zip(capture.joints, capture.joint_captures(), strict=True))
    captures = [by_name[name] for name in robot.joint_names]
    try:
        chosen = identification_settings(settings)
        if single_encoder:  # no twist to read a stiffness from: the gear is fitted as rigid
            chosen = dataclasses.replace(chosen, use_link_encoder=False)
        result = identify(captures, robot, chosen, where=capture.source)
    except PoorExcitation as e:
        raise IdentificationRefused("poor_excitation", f"{capture.source}: {e}") from e
    except CaptureError as e:
        reason: RefusalReason = "saturated" if "saturated" in e.problem else "bad_capture"
        raise IdentificationRefused(reason, str(e)) from e
    except EstimationError as e:
        raise IdentificationRefused("bad_capture", f"{capture.source}: {e}") from e
    return IdentificationOutcome(
        controller=capture.meta.machine,
        robot=robot.name,
        model=result.model,
        method=result.method,
        condition_number=result.condition_number,
        nmse_nm=result.nmse_nm,
        estimates=joint_estimates(result, capture.source),
        evidence=torque_evidence(result),
        warnings=result.warnings,
        seconds=result.seconds,
        source=capture.source,
        result=result.to_dict(),
    )


# Indicators recorded per joint (IndicatorRow names); rotor inertia stays in `result`.
INDICATORS = (
    "coulomb_friction_nm",
    "viscous_friction_nm_s_rad",
    "stiffness_nm_rad",
    "torque_nmse_nm",
)


def joint_estimates(result: IdentificationResult, source: str) -> dict[str, tuple[Estimate, ...]]:
    # rel_std_pct is the noise part only: the model check's shift (result.model_check) is a bias
    # the same model makes in every identification of the joint, and it cancels in the change
    # against the joint's baseline that the verdict judges; the result keeps it in its intervals.
    detail = {
        "method": result.method,
        "model": result.model,
        "condition_number": result.condition_number,
        "source": source,
    }
    return {
        j.joint: tuple(
            Estimate(r.indicator, r.value, r.unit, {**detail, "rel_std_pct": r.rel_std_pct})
            for r in j.rows()
            if r.indicator in INDICATORS and math.isfinite(r.value)
        )
        for j in result.joints
    }


def torque_evidence(result: IdentificationResult) -> dict[str, tuple[EvidencePlot, ...]]:
    """Per joint, measured vs predicted motor torque (link side) over time, on the rows the
    fit used (a joint standing still is left out), at most MAX_EVIDENCE_POINTS points."""
    out: dict[str, tuple[EvidencePlot, ...]] = {}
    for j, health in enumerate(result.joints):
        measured = result.measured_torque_nm[:, j]
        predicted = result.predicted_torque_nm[:, j]
        use = np.flatnonzero(np.isfinite(measured) & np.isfinite(predicted))
        step = max(1, math.ceil(use.size / MAX_EVIDENCE_POINTS))
        use = use[::step]
        t = np.asarray(result.time_s[use], dtype=np.float64)
        out[health.joint] = (
            EvidencePlot(
                title=f"{health.joint}: measured vs predicted motor torque",
                x_label="time (s)",
                y_label="torque, link side (N·m)",
                series=(
                    EvidenceSeries("measured", t, np.asarray(measured[use], dtype=np.float64)),
                    EvidenceSeries("predicted", t, np.asarray(predicted[use], dtype=np.float64)),
                ),
            ),
        )
    return out
