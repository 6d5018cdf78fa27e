"""Stiffness measurements of both kinds (Prod. Eng. 2023), and their simulation.

TCP deviations under a known force, as laser sensors read them (eq. 6 plus Gaussian sensor
noise, eq. 8); and standstill readings of a motor and a link encoder per joint, whose difference
is the gravity twist plus a mounting offset (Gaussian count noise, then quantisation to whole
counts). The compliance model they are simulated on is agent.models.robot.compliance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.errors import EstimationError
from agent.models.robot.compliance import ComplianceModel, gravity_deflection, tcp_deviation

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class TcpMeasurements:
    """M experiments: pose, TCP force, measured TCP deviation and its noise sd per axis."""

    q_rad: Array  # (M, n)
    force_n: Array  # (M, 3)
    deviation_m: Array  # (M, 3)
    sigma_m: Array  # (M, 3)
    source: str = "<memory>"

    def __len__(self) -> int:
        return int(self.q_rad.shape[0])


@dataclass(frozen=True)
class DualEncoderMeasurements:
    """P standstill poses: link angles and motor angles in link units (motor / gear ratio)."""

    q_link_rad: Array  # (P, n)
    q_motor_link_rad: Array  # (P, n)
    sigma_rad: Array  # (n,) sd of motor/N - link per joint
    source: str = "<memory>"

    @property
    def windup_rad(self) -> Array:
        return np.asarray(self.q_motor_link_rad - self.q_link_rad)


def simulate_tcp_measurements(
    model: ComplianceModel,
    q: npt.ArrayLike,
    force: npt.ArrayLike,
    k_true: npt.ArrayLike,
    sigma_m: float,
    rng: np.random.Generator,
) -> TcpMeasurements:
    """Eq. 6 at the true k plus Gaussian sensor noise (eq. 8)."""
    qa = np.atleast_2d(np.asarray(q, dtype=np.float64))
    fa = np.broadcast_to(np.asarray(force, dtype=np.float64), (qa.shape[0], 3)).copy()
    dev = tcp_deviation(model, qa, fa, k_true)
    noisy = dev + rng.normal(0.0, sigma_m, dev.shape)
    return TcpMeasurements(qa, fa, noisy, np.full(dev.shape, sigma_m), "<simulated>")


def encoder_sigma_rad(
    counts_per_turn: int, gear_ratio: npt.ArrayLike, noise_counts: float
) -> Array:
    """sd of motor/N - link from quantisation (step^2 / 12, as uniform noise) and Gaussian
    count noise on both encoders; the motor term is divided by the gear ratio."""
    step = 2 * math.pi / counts_per_turn
    per_encoder = step**2 / 12 + (noise_counts * step) ** 2
    g = np.asarray(gear_ratio, dtype=np.float64)
    return np.asarray(np.sqrt(per_encoder * (1.0 + 1.0 / g**2)))


def simulate_dual_encoder(
    model: ComplianceModel,
    q: npt.ArrayLike,
    k_true: npt.ArrayLike,
    offsets_rad: npt.ArrayLike,
    *,
    noise_counts: float,
    rng: np.random.Generator,
) -> DualEncoderMeasurements:
    """Standstill readings of both encoders: the link at q, the motor ahead by the gravity
    twist plus the mounting offset; Gaussian count noise, then quantisation to whole counts
    of the robot's encoder resolution (encoder_counts_per_turn, both sides)."""
    robot = model.robot
    if robot.encoder_counts_per_turn is None:
        raise EstimationError(f"{robot.source}: no encoder_counts_per_turn for the simulation")
    qa = np.atleast_2d(np.asarray(q, dtype=np.float64))
    step = 2 * math.pi / robot.encoder_counts_per_turn
    gear = np.array([j.gear_ratio for j in robot.joints])
    motor = (qa + gravity_deflection(model, qa, k_true) + np.asarray(offsets_rad)) * gear

    def read(angle: Array) -> Array:
        counts = np.round(angle / step + rng.normal(0.0, noise_counts, angle.shape))
        return np.asarray(counts * step)

    return DualEncoderMeasurements(
        q_link_rad=read(qa),
        q_motor_link_rad=read(motor) / gear,
        sigma_rad=encoder_sigma_rad(robot.encoder_counts_per_turn, gear, noise_counts),
        source="<simulated>",
    )
