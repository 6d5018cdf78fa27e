"""A simulated payload pair for the drive-gain calibration (agent.estimation.identification.
drive_gains): one excitation run by a position-controlled arm twice, without and with a payload,
its joints' motor currents as the drives report them.

What the estimator is not told (the open world it must survive): the arm is "as built" and
carries friction beyond Coulomb + viscous (agent.models.robot.mismatch.realistic: Stribeck,
load-dependent friction, ripple, cogging, a cable spring, all the same in both runs except
what the payload's extra torque does to the load-dependent part); the second run is 1 K
warmer (friction moves); the stated payload is off the true one by `mass_error` and `com_error_m`;
currents carry white noise and the link encoder is quantised (19 bits); the second run tracks
the trajectory with its own small error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.capture.model import Capture, CaptureMeta
from agent.estimation.identification.drive_gains import CURRENT, Payload
from agent.models.robot.description import RobotDescription
from agent.models.robot.friction import FrictionNonlinearity, friction_torque
from agent.models.robot.mismatch import at_temperature, realistic, with_payload
from agent.models.robot.regressor import ParameterLayout, parameter_vector, regressor

Array = npt.NDArray[np.float64]
ENCODER_STEP_RAD = 2 * np.pi / 2**19


@dataclass(frozen=True)
class PayloadPair:
    without: tuple[Capture, ...]
    with_payload: tuple[Capture, ...]
    stated: Payload  # what the operator types in
    true_gains_nm_a: Array  # link side, per joint


def _trajectory(robot: RobotDescription, t: Array, rng: np.random.Generator) -> tuple[Array, ...]:
    """A sum of sines per joint (0.1 Hz base, 5 harmonics) inside half the joint's range and
    its speed limit: position, speed, acceleration."""
    n = robot.n_joints
    w = 2 * np.pi * 0.1 * np.arange(1, 6)
    a = rng.normal(size=(n, 5)) / np.arange(1, 6)
    phase = rng.uniform(0, 2 * np.pi, (n, 5))
    arg = t[:, None, None] * w[None, None, :] + phase[None]
    q = (a[None] * np.sin(arg)).sum(axis=2)
    qd = (a[None] * w * np.cos(arg)).sum(axis=2)
    qdd = -(a[None] * w**2 * np.sin(arg)).sum(axis=2)
    span = np.array([min(j.position_max_rad, -j.position_min_rad, np.pi) for j in robot.joints])
    speed = np.array([j.speed_max_rad_s for j in robot.joints])
    scale = np.minimum(0.5 * span / np.abs(q).max(axis=0), 0.6 * speed / np.abs(qd).max(axis=0))
    ramp = np.clip(t / 2.0, 0, 1) * np.clip((t[-1] - t) / 2.0, 0, 1)  # start and end at rest
    ramp = (3 * ramp**2 - 2 * ramp**3)[:, None]
    return q * scale * ramp, qd * scale * ramp, qdd * scale * ramp


def _torque(
    robot: RobotDescription, nl: FrictionNonlinearity, q: Array, qd: Array, qdd: Array
) -> Array:
    layout = ParameterLayout(robot.n_joints, rotor=True, friction=True)
    y = regressor(robot, q, qd, qdd, rotor=True, friction=True)
    rigid = y @ parameter_vector(robot, layout)
    extra, _ = friction_torque(robot, nl, qd, q, rigid, linear=False)
    return np.asarray(rigid + extra)


def payload_pair(
    robot: RobotDescription,
    payload: Payload,
    *,
    seed: int = 0,
    duration_s: float = 25.0,
    rate_hz: float = 500.0,
    current_noise_a: float = 0.02,
    mass_error: float = 0.005,
    com_error_m: float = 0.001,
) -> PayloadPair:
    rng = np.random.default_rng(seed)
    cond = realistic(robot, seed)
    t = np.arange(0.0, duration_s, 1.0 / rate_hz)
    q, qd, qdd = _trajectory(robot, t, rng)
    gear = np.array([j.gear_ratio for j in robot.joints])
    gains = rng.uniform(0.08, 0.14, robot.n_joints) * gear  # link side, N·m per A
    loaded = with_payload(at_temperature(cond.truth, 1.0), payload.mass_kg, payload.com_m)
    runs = []
    for truth, lag in ((cond.truth, 0.0), (loaded, 2e-4)):
        q_run = q + lag * np.sin(2 * np.pi * 0.3 * t)[:, None]  # its own tracking error
        tau = _torque(truth, cond.friction, q_run, qd, qdd)
        current = tau / gains + rng.normal(0.0, current_noise_a, tau.shape)
        measured = np.round(q_run / ENCODER_STEP_RAD) * ENCODER_STEP_RAD
        runs.append(
            tuple(
                Capture(
                    t,
                    {"link_pos_rad": measured[:, j], CURRENT: current[:, j]},
                    CaptureMeta(joint=spec.name, cycle="excitation"),
                )
                for j, spec in enumerate(robot.joints)
            )
        )
    off = rng.normal(size=3)
    stated = Payload(
        payload.mass_kg * (1 + mass_error),
        tuple(
            float(c) for c in np.asarray(payload.com_m) + com_error_m * off / np.linalg.norm(off)
        ),  # type: ignore[arg-type]
        payload.inertia_com_kg_m2,
        payload.tolerance,
    )
    return PayloadPair(runs[0], runs[1], stated, gains)
