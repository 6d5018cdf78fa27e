"""The samples a peer controller publishes for one cycle: the simulated fake's physics.

`cycle_samples` calls drivers.sim.backlash.simulate_backlash_capture (the function the simulated
fake uses) with the same seed rule as drivers.sim.driver (seed * 1000 + cycles run), so a cycle
through a peer and the same cycle on the simulated fake see identical physics. For long benchmark
captures it can simulate a shorter window and repeat it, continuing time and encoder counts, so the
peer does not spend minutes integrating before it streams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from agent.capture.encoder import angle_to_counts, counts_per_turn
from agent.config.model import JointSettings
from drivers.base import BacklashCycle
from drivers.sim.backlash import simulate_backlash_capture


@dataclass(frozen=True)
class Samples:
    time_s: npt.NDArray[np.float64]
    motor_counts: npt.NDArray[np.int64]
    link_counts: npt.NDArray[np.int64]
    current_a: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.time_s.size)


def peer_cycle(
    joint: JointSettings, speed: float, settle: float, duration: float, rate: float
) -> BacklashCycle:
    """The cycle a peer runs for StartBacklashCycle(joint, speed, settle, duration, rate)."""
    return BacklashCycle(
        controller="peer",
        joint=joint.name,
        joint_index=joint.index,
        motor_speed_rad_s=speed,
        gear_ratio=joint.gear_ratio,
        duration_s=duration,
        settle_s=settle,
        sample_rate_hz=rate,
        encoder_bits=joint.encoder_bits,
        test_pose_rad=joint.test_pose_rad,
    )


def cycle_samples(
    joint: JointSettings,
    cycle: BacklashCycle,
    backlash_rad: float,
    *,
    noise_counts: float,
    seed: int,
    max_physics_s: float | None = None,
) -> Samples:
    n_out = round(cycle.duration_s * cycle.sample_rate_hz) + 1
    sim_cycle = cycle
    if max_physics_s is not None and cycle.duration_s > max_physics_s:
        sim_cycle = replace(cycle, duration_s=max_physics_s)
    cap = simulate_backlash_capture(
        joint, sim_cycle, backlash_rad, noise_counts=noise_counts, seed=seed, machine="peer"
    )
    bits = cycle.encoder_bits
    motor = cap.channels["motor_counts"].astype(np.int64)
    link = angle_to_counts(cap.channels["link_pos_rad"], bits)
    current = np.asarray(cap.channels["current_a"], dtype=np.float64)
    t = np.asarray(cap.time_s, dtype=np.float64)
    if len(t) >= n_out:
        return Samples(t[:n_out], motor[:n_out], link[:n_out], current[:n_out])
    # Repeat the window: time and counts continue from where the previous copy ended.
    cpt = counts_per_turn(bits)
    reps = math.ceil(n_out / len(t))
    dt = 1.0 / cycle.sample_rate_hz
    span = len(t)
    idx = np.arange(reps)[:, None]
    motor_step = (int(motor[-1]) - int(motor[0]) + int(motor[-1]) - int(motor[-2])) % cpt
    link_step = (int(link[-1]) - int(link[0]) + int(link[-1]) - int(link[-2])) % cpt
    time_all = (t[None, :] + idx * span * dt).ravel()[:n_out]
    motor_all = ((motor[None, :] + idx * motor_step) % cpt).ravel()[:n_out]
    link_all = ((link[None, :] + idx * link_step) % cpt).ravel()[:n_out]
    current_all = np.tile(current, reps)[:n_out]
    return Samples(time_all, motor_all, link_all, current_all)
