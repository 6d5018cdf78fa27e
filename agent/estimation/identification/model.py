"""The dynamic model that identification fits and validation predicts with.

What the least squares of agent.estimation.identification.fit and the held-out check of
agent.estimation.identification.validation share: the estimator's settings, the base
parameters (which combinations a trajectory can see), the band-passed kinematics, the motor
torque model (DynamicModel, nominal or identified), Madsen et al. 2020's torque NMSE and the rows
that are left out near standstill.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from agent.estimation.identification.base_params import (
    BaseParameters,
    base_parameters,
    joint_axis_along_y,
    preference_order,
    random_states,
    reduce_regressor,
)
from agent.estimation.identification.filters import (
    FilterSettings,
    ResolvedFilter,
    band_pass,
    dynamics_bandwidth_hz,
    parallel_decimate,
)
from agent.estimation.identification.least_squares import Method
from agent.estimation.identification.robot_signals import RobotSignals
from agent.models.robot.description import RobotDescription
from agent.models.robot.friction import FrictionNonlinearity, friction_torque
from agent.models.robot.regressor import ParameterLayout, parameter_vector, regressor

Array = npt.NDArray[np.float64]
Model = Literal["elastic", "rigid"]


@dataclass(frozen=True)
class IdentificationSettings:
    method: Method = "wls"
    model: Model = "elastic"
    filter: FilterSettings = field(default_factory=FilterSettings)
    # cond of the decimated base regressor (rigid body + friction, SI columns) above which the
    # trajectory is refused as not exciting; optimised excitations reach 20-50 (UR5e ~45)
    max_condition_number: float = 500.0
    min_friction_speed_rad_s: float = 0.05  # 0 keeps every row (the papers)
    saturation_fraction: float = 0.999
    prior_friction: FrictionNonlinearity | None = None  # rigid: compensated before the fit
    use_link_encoder: bool = True  # False: q from the motor encoder (single-encoder ablation)
    # A log with host-time jitter, repeated records or short gaps is put on its tick first
    # (agent.capture.resample); a gap of more missing ticks than this is refused.
    max_gap_ticks: int = 5
    # A constant per joint on the measured torque (a sensor's bias), fitted with the rest.
    torque_offset: bool = False
    # Also the physically consistent estimate (agent.estimation.identification.feasible).
    feasible: bool = False
    # A friction share growing with the transmitted torque (strain-wave gears), fitted as
    # mu * sgn(theta') * |tau| per joint; and a spring on each joint (a cable dress pack, a
    # balancer), fitted with a torque offset as k * (q - q0).
    load_friction: bool = False
    joint_spring: bool = False
    # The drives' torque-constant tolerance (+-, relative: 0.05 for +-5 %): a systematic error
    # of the measured torque that enters every interval (agent.estimation.identification
    # .uncertainty). 0 when the torque is measured by calibrated sensors.
    torque_constant_tolerance: float = 0.0
    # Fit the extended model too (load_friction and joint_spring) and widen each interval by
    # the shift it gives (agent.estimation.identification.model_check); off for the papers'
    # reproductions and where a model is known complete.
    model_check: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.torque_constant_tolerance < 1.0:
            raise ValueError(
                f"torque_constant_tolerance must be in [0, 1), got {self.torque_constant_tolerance}"
            )


@functools.lru_cache(maxsize=16)
def link_base(robot: RobotDescription) -> BaseParameters:
    """Rigid-body base parameters of the links (no rotor, no friction columns)."""
    return base_parameters(robot)


def elastic_base(robot: RobotDescription, n_samples: int = 60, seed: int = 0) -> BaseParameters:
    """Identifiability of the 14 parameters per joint of Zollo, Lopez et al. 2014, from random
    states."""
    n = robot.n_joints
    layout = ParameterLayout(n, rotor=True, friction=True)
    names = [*layout.names, *(f"k{j + 1}" for j in range(n))]
    q, qd, qdd = random_states(robot, n_samples, seed)
    rng = np.random.default_rng(seed + 1)
    delta, thd, thdd = rng.normal(size=(3, n_samples, n))
    y = regressor(robot, q, qd, qdd, rotor=True, friction=True)
    link_rows = np.zeros((n_samples, n, len(names)))
    link_rows[..., : layout.size] = y
    link_rows[..., layout.rotor_columns()] = 0.0
    fc, fv = layout.friction_columns()
    link_rows[..., fc] = 0.0
    link_rows[..., fv] = 0.0
    joints = np.arange(n)
    kcols = layout.size + joints
    link_rows[:, joints, kcols] = -delta
    motor_rows = np.zeros_like(link_rows)
    motor_rows[:, joints, layout.rotor_columns()] = thdd
    motor_rows[:, joints, fc] = np.sign(thd)
    motor_rows[:, joints, fv] = thd
    motor_rows[:, joints, kcols] = delta
    stacked = np.concatenate([link_rows, motor_rows]).reshape(-1, len(names))
    order = preference_order(names, joint_axis_along_y(robot))
    return reduce_regressor(stacked, names, order=order)


# ------------------------------------------------------------------------------- kinematics


@dataclass(frozen=True)
class Kinematics:
    """Band-passed link (q) and rotor (th) motion at the full rate, with the raw torque."""

    q: Array
    qd: Array
    qdd: Array
    th: Array
    thd: Array
    thdd: Array
    tau: Array
    flt: ResolvedFilter


def kinematics(signals: RobotSignals, settings: FilterSettings) -> Kinematics:
    fs = signals.sample_rate_hz
    bw = settings.bandwidth_hz or dynamics_bandwidth_hz(signals.link_pos_rad, fs)
    flt = settings.resolved(fs, bw)
    q = band_pass(signals.link_pos_rad, fs, flt.cutoff_hz, flt.order)
    th = band_pass(signals.motor_pos_rad, fs, flt.cutoff_hz, flt.order)
    return Kinematics(*q, *th, signals.motor_torque_nm, flt)


# ------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class DynamicModel:
    """Motor torque = Y_base(q, q', q'') pi_base + Ia theta'' + Fc sgn(theta') + Fv theta'
    (+ the prior nonlinear friction). The nominal ("CAD") model and an identified one alike."""

    link_base: Array
    rotor_inertia_kg_m2: Array
    coulomb_nm: Array
    viscous_nm_s_rad: Array
    stiffness_nm_rad: Array | None
    prior: FrictionNonlinearity | None = None
    offset_nm: Array | None = None  # a bias on each joint's measured torque (torque_offset)
    load_friction: Array | None = None  # mu: friction per N·m transmitted (load_friction)
    spring_nm_rad: Array | None = None  # joint_spring

    def decimated_torque(
        self,
        robot: RobotDescription,
        kin: Kinematics,
        keep: npt.NDArray[np.intp],
        sub: npt.NDArray[np.intp],
    ) -> Array:
        """The model's motor torque through the parallel filter, at the samples `keep`."""
        y = link_base(robot).reduce(regressor(robot, kin.q[sub], kin.qd[sub], kin.qdd[sub]))
        rigid_sub = np.einsum("njp,p->nj", y, self.link_base)
        rigid = parallel_decimate(rigid_sub, kin.flt, keep, sub)
        drive = self.rotor_inertia_kg_m2 * kin.thdd + self.coulomb_nm * np.sign(kin.thd)
        drive += self.viscous_nm_s_rad * kin.thd
        # the prior's load-dependent share needs the transmitted torque: the measured one
        # stands in (the prior is a fixed compensation, not fitted)
        tau_j = kin.tau - self.rotor_inertia_kg_m2 * kin.thdd
        if self.prior is not None:
            drive += friction_torque(robot, self.prior, kin.thd, kin.th, tau_j, linear=False)[0]
        if self.load_friction is not None:
            # the transmitted torque as the fit has it: the rigid body's, at the full rate
            transmitted = full_rate(rigid_sub, sub, kin.q.shape[0])
            drive += self.load_friction * np.sign(kin.thd) * np.abs(transmitted)
        if self.spring_nm_rad is not None:
            drive += self.spring_nm_rad * kin.q
        out = rigid + parallel_decimate(drive, kin.flt, keep)
        return out if self.offset_nm is None else out + self.offset_nm


def full_rate(rigid_sub: Array, sub: npt.NDArray[np.intp], n_samples: int) -> Array:
    """A smooth column known on the subgrid (filters.subgrid), interpolated to every sample."""
    at = np.arange(n_samples, dtype=np.float64)
    return np.stack(
        [np.interp(at, sub, rigid_sub[:, j]) for j in range(rigid_sub.shape[1])], axis=1
    )


def nominal_model(
    robot: RobotDescription, prior: FrictionNonlinearity | None = None
) -> DynamicModel:
    """The model the robot file describes (Madsen et al. 2020's CAD baseline)."""
    pi = parameter_vector(robot, ParameterLayout(robot.n_joints))
    k = [j.stiffness_nm_rad for j in robot.joints]
    return DynamicModel(
        link_base(robot).to_base(pi),
        np.array([j.rotor_inertia_kg_m2 for j in robot.joints]),
        np.array([j.coulomb_nm for j in robot.joints]),
        np.array([j.viscous_nm_s_rad for j in robot.joints]),
        None if any(v is None for v in k) else np.array(k, dtype=np.float64),
        prior,
    )


def nmse_nm(
    measured: Array, predicted: Array, moving: npt.NDArray[np.bool_] | None = None
) -> tuple[float, Array]:
    """Madsen et al. 2020, section 4.5: sum over joints of MSE / mean |torque|; (total, per joint).

    `moving` (N, n) keeps, per joint, the samples where it moves: at rest the friction is
    anything up to breakaway and no model predicts it (the standstill before and after an
    excitation would otherwise dominate the figure).
    """
    use = np.ones(measured.shape, dtype=bool) if moving is None else moving
    per_joint = np.array(
        [
            np.mean((m[u] - p[u]) ** 2) / np.mean(np.abs(m[u])) if u.any() else np.nan
            for m, p, u in zip(measured.T, predicted.T, use.T, strict=True)
        ]
    )
    return float(per_joint.sum()), per_joint


def slow_rows(speed: Array, flt: ResolvedFilter, min_speed: float) -> npt.NDArray[np.bool_]:
    """Samples within one parallel-filter length of a rotor speed below min_speed."""
    if min_speed <= 0.0:
        return np.zeros(speed.shape, dtype=bool)
    width = 2 * math.ceil(flt.sample_rate_hz / flt.parallel_cutoff_hz) + 1
    slow = (np.abs(speed) < min_speed).astype(np.float64)
    kernel = np.ones(width)
    spread = np.stack([np.convolve(slow[:, j], kernel, mode="same") for j in range(slow.shape[1])])
    return np.asarray(spread.T > 0.0)
