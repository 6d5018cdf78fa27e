"""What the sensors make of a simulated elastic-robot run: encoder quantisation, noise at a
signal-to-noise ratio, and one Capture per joint as the two encoders and the drive report it.

The run itself (an ElasticRun, defined here so the two modules import one way) comes from
agent.models.robot.elastic.simulate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.capture.model import Capture, CaptureMeta
from agent.models.robot.description import RobotDescription
from agent.models.robot.friction import Array, joint_values


@dataclass(frozen=True)
class ElasticRun:
    """The true motion (link-side units); motor_* is theta = motor angle / gear ratio."""

    time_s: Array
    link_pos_rad: Array
    link_speed_rad_s: Array
    link_accel_rad_s2: Array
    motor_pos_rad: Array
    motor_speed_rad_s: Array
    motor_accel_rad_s2: Array
    motor_torque_nm: Array  # drive torque seen from the link (clipped at torque_max_nm)
    saturated: npt.NDArray[np.bool_]
    passes: int
    last_change_rad: float  # largest change of q in the last relaxation pass

    @property
    def sample_rate_hz(self) -> float:
        return float((self.time_s.size - 1) / (self.time_s[-1] - self.time_s[0]))


def add_noise_snr(x: npt.ArrayLike, snr_db: float, rng: np.random.Generator) -> Array:
    """x plus Gaussian noise of std(column) * 10^(-snr_db / 20) in every column (axis 0 time)."""
    a = np.asarray(x, dtype=np.float64)
    std = a.std(axis=0) * 10.0 ** (-snr_db / 20.0)
    return a + rng.standard_normal(a.shape) * std


def quantise(angle_rad: npt.ArrayLike, counts_per_turn: int) -> Array:
    """The angle an encoder with this many counts per turn reports (zero set mid-count)."""
    step = 2.0 * math.pi / counts_per_turn
    return np.round(np.asarray(angle_rad, dtype=np.float64) / step) * step


def measure(
    run: ElasticRun,
    robot: RobotDescription,
    *,
    counts_per_turn: int | None = None,
    snr_db: float | None = None,
    torque_noise_nm: npt.ArrayLike | None = None,
    torque_constant_error: npt.ArrayLike | None = None,
    seed: int = 0,
    cycle: str = "excitation",
) -> tuple[Capture, ...]:
    """One Capture per joint as the two encoders and the drive report the run.

    Link and motor shaft are each read by an encoder of counts_per_turn (default the robot's;
    None there too: no quantisation); snr_db adds sensor noise to every channel;
    torque_noise_nm (per joint, link side) adds drive torque noise on top;
    torque_constant_error (per joint, measured / true - 1) scales the torque the drive reports,
    as a torque constant off its nominal value does (current times the nominal constant).
    """
    rng = np.random.default_rng(seed)
    counts = counts_per_turn or robot.encoder_counts_per_turn
    ratio = joint_values(robot, "gear_ratio")
    link = run.link_pos_rad
    shaft = run.motor_pos_rad * ratio
    torque = run.motor_torque_nm / ratio
    if torque_constant_error is not None:
        err = np.broadcast_to(
            np.asarray(torque_constant_error, dtype=np.float64), (robot.n_joints,)
        )
        torque = torque * (1.0 + err)
    if counts:
        link, shaft = quantise(link, counts), quantise(shaft, counts)
    if snr_db is not None:
        link, shaft, torque = (add_noise_snr(x, snr_db, rng) for x in (link, shaft, torque))
    if torque_noise_nm is not None:
        std = np.broadcast_to(np.asarray(torque_noise_nm, dtype=np.float64), (robot.n_joints,))
        torque = torque + rng.standard_normal(torque.shape) * (std / ratio)
    extra = {"counts_per_turn": counts, "snr_db": snr_db}
    return tuple(
        Capture(
            run.time_s,
            {
                "link_pos_rad": link[:, j],
                "motor_pos_rad": shaft[:, j],
                "motor_torque_nm": torque[:, j],
            },
            CaptureMeta(
                machine=robot.name,
                joint=spec.name,
                cycle=cycle,
                gear_ratio=spec.gear_ratio,
                sample_rate_hz=run.sample_rate_hz,
                extra=extra,
            ),
            source=f"<simulated {robot.name} {spec.name}>",
        )
        for j, spec in enumerate(robot.joints)
    )
