"""Drive gains (motor current to joint torque) from a payload pair: the same excitation run twice,
without and with a payload whose mass, centre of mass and inertia are known. Whatever the arm's
own dynamics and friction are, they are the same in both runs, so the difference of the
currents is the payload's torque divided by each drive's gain (the method of the UR and Panda
identification literature, e.g. Gaz et al. 2019 for the Panda). Arms that report motor current
and not torque (Universal Robots) publish no such gains.

Per joint, the current difference is regressed on the payload's torque (computed from the
filtered link positions of the run with the payload, through the robot's own regressor), after
the identification's signal chain: zero-phase low-pass and differences for speed and
acceleration, parallel filtering and decimation of the currents and torques (Madsen et al.
2020, section 4). The slope is 1/gain: the currents are the noisy side, so regressing them on
the torque keeps the slope free of the attenuation bias that noisy regressors give.

Uncertainty: the slope's Newey-West standard deviation (the residuals are correlated through
the filters) and two uniform type-B terms: the payload's stated tolerance (every inertial
parameter of the payload off by the same fraction scales the payload torque, and so each gain,
by it), and the gears' load-dependent friction share mu (strain-wave gears: friction grows with
the transmitted torque, so the payload's torque also raises the friction by up to mu times
itself, ||a + b| - |a|| <= |b|: a bias of each gain within +-mu that no model of the arm's own
torque, unknown before the gains are, can remove). A joint the payload hardly loads is not
judged: its gain is null with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from agent.capture.model import Capture
from agent.errors import CaptureError, EstimationError
from agent.estimation.identification.filters import (
    FilterSettings,
    band_pass,
    decimation_index,
    dynamics_bandwidth_hz,
    parallel_decimate,
)
from agent.estimation.identification.uncertainty import coverage_half_width, robust_covariance
from agent.models.robot.description import (
    InertiaTensor,
    LinkInertial,
    RobotDescription,
    link_parameters,
)
from agent.models.robot.regressor import ParameterLayout, regressor

Array = npt.NDArray[np.float64]

CURRENT = "current_a"  # the drive's measured current, A (agent.capture.model)
MAX_REL_STD = 0.05  # a gain known worse than this (1 sd, noise alone) is not given
MAX_POSITION_MISMATCH_RAD = 0.01  # rms between the two runs: beyond it, not the same trajectory


@dataclass(frozen=True)
class Payload:
    """The payload fixed to the last link, in its DH frame (the flange for UR's own DH)."""

    mass_kg: float
    com_m: tuple[float, float, float]
    inertia_com_kg_m2: InertiaTensor = field(default_factory=lambda: InertiaTensor(0.0, 0.0, 0.0))
    # Every inertial parameter known to within this fraction (a scale's and a CAD model's
    # tolerance): a uniform type-B term of each gain.
    tolerance: float = 0.01

    def parameters(self) -> Array:
        return link_parameters(LinkInertial(self.mass_kg, self.com_m, self.inertia_com_kg_m2))


@dataclass(frozen=True)
class JointGain:
    """One joint's gain, link side (joint torque per A), and the motor shaft's torque constant
    it means through the robot file's gear ratio (what the UR driver's torque_constants_nm_a
    holds: the identification multiplies motor_torque_nm by the gear ratio)."""

    joint: str
    gear_ratio: float
    gain_nm_a: float | None
    std_nm_a: float | None  # noise and payload tolerance combined
    interval_95: tuple[float, float] | None
    payload_torque_rms_nm: float  # what the payload adds to this joint, after the filters
    rel_std_noise: float | None  # the slope's own relative sd
    reason: str | None  # why the gain is null

    @property
    def torque_constant_nm_a(self) -> float | None:
        return None if self.gain_nm_a is None else self.gain_nm_a / self.gear_ratio

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["interval_95"] = None if self.interval_95 is None else list(self.interval_95)
        if self.rel_std_noise is not None and not math.isfinite(self.rel_std_noise):
            d["rel_std_noise"] = None  # strict JSON; the reason says it
        d["torque_constant_nm_a"] = self.torque_constant_nm_a
        return d


@dataclass(frozen=True)
class DriveGainResult:
    robot: str
    joints: tuple[JointGain, ...]
    samples: int
    rows: int
    sample_rate_hz: float
    position_mismatch_rms_rad: float
    payload: Payload
    load_friction_share: float

    def to_dict(self) -> dict[str, object]:
        return {
            "robot": self.robot,
            "samples": self.samples,
            "rows": self.rows,
            "sample_rate_hz": self.sample_rate_hz,
            "position_mismatch_rms_rad": self.position_mismatch_rms_rad,
            "load_friction_share": self.load_friction_share,
            "payload": {
                "mass_kg": self.payload.mass_kg,
                "com_m": list(self.payload.com_m),
                "inertia_com_kg_m2": asdict(self.payload.inertia_com_kg_m2),
                "tolerance": self.payload.tolerance,
            },
            "joints": [j.to_dict() for j in self.joints],
        }


def _by_joint(captures: Sequence[Capture], robot: RobotDescription, which: str) -> list[Capture]:
    named = {c.meta.joint: c for c in captures if c.meta.joint}
    if len(named) == len(captures) and set(named) >= set(robot.joint_names):
        return [named[j] for j in robot.joint_names]
    if len(captures) != robot.n_joints:
        raise CaptureError(
            which,
            f"expected one capture per joint of {robot.name} ({', '.join(robot.joint_names)}), "
            f"found {len(captures)}",
        )
    return list(captures)


def _columns(captures: list[Capture]) -> tuple[Array, Array, Array]:
    for c in captures:
        for name in ("link_pos_rad", CURRENT):
            if name not in c.channels:
                raise CaptureError(c.source, f"no {name} channel: a payload pair needs link "
                                   "position and motor current")  # fmt: skip
    n = min(c.time_s.size for c in captures)
    t = captures[0].time_s[:n]
    q = np.column_stack([c.channels["link_pos_rad"][:n] for c in captures])
    i = np.column_stack([c.channels[CURRENT][:n] for c in captures])
    return t, q, i


def drive_gains(
    robot: RobotDescription,
    without: Sequence[Capture],
    with_payload: Sequence[Capture],
    payload: Payload,
    filter_settings: FilterSettings | None = None,
    load_friction_share: float = 0.02,
) -> DriveGainResult:
    """Each joint's gain (N·m per A, link side: what turns the current into the torque the
    identification's motor_torque_nm holds) from a payload pair."""
    if payload.mass_kg <= 0.0 or not 0.0 <= payload.tolerance < 1.0:
        raise EstimationError("the payload needs a mass > 0 and a tolerance in [0, 1)")
    if not 0.0 <= load_friction_share < 0.5:
        raise EstimationError("load_friction_share: expected a fraction in [0, 0.5)")
    bounds = (payload.tolerance, load_friction_share)
    t0, q0, i0 = _columns(_by_joint(without, robot, "without payload"))
    t1, q1, i1 = _columns(_by_joint(with_payload, robot, "with payload"))
    n = min(t0.size, t1.size)
    dt = float(np.median(np.diff(t1[:n])))
    if dt <= 0 or abs(float(np.median(np.diff(t0[:n]))) - dt) > 1e-3 * dt:
        raise EstimationError("the two runs are not sampled at the same rate")
    fs = 1.0 / dt
    mismatch = float(np.sqrt(np.mean((q1[:n] - q0[:n]) ** 2)))
    if mismatch > MAX_POSITION_MISMATCH_RAD:
        raise EstimationError(
            f"the two runs differ by {mismatch:.4f} rad rms in link position (more than "
            f"{MAX_POSITION_MISMATCH_RAD} rad): a payload pair is the same trajectory twice, "
            "started at the same sample"
        )
    flt = (filter_settings or FilterSettings()).resolved(fs, dynamics_bandwidth_hz(q1[:n], fs))
    q, qd, qdd = band_pass(q1[:n], fs, flt.cutoff_hz, flt.order)
    layout = ParameterLayout(robot.n_joints)
    last = layout.inertial_columns()[-10:]
    y = regressor(robot, q, qd, qdd)[:, :, last]
    tau_p = y @ payload.parameters()
    keep = decimation_index(n, flt)
    tau = parallel_decimate(tau_p, flt, keep)
    delta = parallel_decimate(i1[:n] - i0[:n], flt, keep)
    gains = tuple(
        _joint_gain(spec.name, spec.gear_ratio, tau[:, j], delta[:, j], bounds)
        for j, spec in enumerate(robot.joints)
    )
    return DriveGainResult(
        robot.name, gains, n, keep.size, fs, mismatch, payload, load_friction_share
    )


def _joint_gain(
    name: str, gear: float, tau: Array, delta: Array, bounds: tuple[float, ...]
) -> JointGain:
    """`bounds`: relative half-ranges of the uniform type-B terms (payload, load friction)."""
    rms = float(np.sqrt(np.mean(tau**2)))
    if rms == 0.0:
        return JointGain(name, gear, None, None, None, 0.0, None,
                         "the payload puts no torque on this joint")  # fmt: skip
    slope = float(tau @ delta / (tau @ tau))
    res = delta - slope * tau
    cov = robust_covariance(tau[:, None], res, delta, np.zeros(tau.size, dtype=np.intp))
    sd_slope = math.sqrt(max(float(cov.hac[0, 0]), 0.0))
    rel_noise = sd_slope / abs(slope) if slope != 0.0 else math.inf
    if rel_noise > MAX_REL_STD:
        return JointGain(
            name, gear, None, None, None, rms, rel_noise,
            f"cannot judge: the payload changes this joint's torque by {rms:.3g} N·m rms, "
            f"which resolves its gain to +-{rel_noise:.0%} (1 sd), more than "
            f"{MAX_REL_STD:.0%}: a heavier payload, or one whose centre of mass is further "
            "from this joint's axis",
        )  # fmt: skip
    if slope <= 0.0:
        return JointGain(
            name, gear, None, None, None, rms, None,
            f"the current difference does not follow the payload's torque (slope {slope:.3g} "
            "A/N·m): check that both runs are the same joints in the same order and sign",
        )  # fmt: skip
    gain = 1.0 / slope
    sd_noise = gain * rel_noise
    sd_total = math.sqrt(sd_noise**2 + sum((gain * b) ** 2 / 3.0 for b in bounds))
    ranges = np.array([[gain * b] for b in bounds])
    half = float(coverage_half_width(np.array([sd_noise]), ranges)[0])
    return JointGain(name, gear, gain, sd_total, (gain - half, gain + half), rms, rel_noise, None)
