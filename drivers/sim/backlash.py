"""Simulated backlash captures of configured joints: agent.models.joint packaged as a driver would.

Shared by the simulated fake controller (drivers.sim.driver) and the simulation-sweep calibration
(agent.kinds.backlash.calibration), so both see exactly the same joint. A joint is anything with
a gear ratio and a `model:` section (agent.config.model.JointSettings is one); the driver layer
does not import the config.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from agent.capture.encoder import angle_to_counts, unwrap_counts
from agent.capture.model import Capture
from agent.models.joint import (
    ConstantSpeedTest,
    JointModelSettings,
    JointPhysics,
    simulate_constant_speed,
)
from drivers.base import BacklashCycle


class ModelledJoint(Protocol):
    """What the simulation reads of a configured joint."""

    @property
    def gear_ratio(self) -> float: ...

    @property
    def model(self) -> JointModelSettings: ...


def joint_physics(joint: ModelledJoint, backlash_rad: float) -> JointPhysics:
    """The physics of a configured joint with a given backlash (shared with calibration)."""
    m = joint.model
    return JointPhysics(
        gear_ratio=joint.gear_ratio,
        backlash_rad=backlash_rad,
        motor_inertia_kg_m2=m.motor_inertia_kg_m2,
        load_inertia_kg_m2=m.load_inertia_kg_m2,
        stiffness_nm_rad=m.stiffness_nm_rad,
        damping_nm_s_rad=m.damping_nm_s_rad,
        load_mass_kg=m.load_mass_kg,
        load_arm_m=m.load_arm_m,
        motor_viscous_nm_s_rad=m.motor_viscous_nm_s_rad,
        load_viscous_nm_s_rad=m.load_viscous_nm_s_rad,
        speed_loop_hz=m.speed_loop_hz,
        position_loop_hz=m.position_loop_hz,
        smoothing_alpha_per_rad=m.smoothing_alpha_per_rad,
        encoder_eccentricity_rad=m.encoder_eccentricity_rad,
        cogging_torque_nm=m.cogging_torque_nm,
        cogging_periods_per_turn=m.cogging_periods_per_turn,
    )


def simulate_backlash_capture(
    joint: ModelledJoint,
    cycle: BacklashCycle,
    backlash_rad: float,
    *,
    noise_counts: float,
    seed: int,
    machine: str = "sim",
) -> Capture:
    """Run the constant-speed test on the joint model and package it as a driver would."""
    run = simulate_constant_speed(
        joint_physics(joint, backlash_rad),
        ConstantSpeedTest(
            motor_speed_rad_s=cycle.motor_speed_rad_s,
            duration_s=cycle.duration_s,
            sample_rate_hz=cycle.sample_rate_hz,
            settle_s=cycle.settle_s,
            start_angle_rad=cycle.test_pose_rad,
        ),
        encoder_bits=cycle.encoder_bits,
        encoder_noise_counts=noise_counts,
        seed=seed,
    )
    link_counts = angle_to_counts(run.load_angle_rad, cycle.encoder_bits)
    link_pos = unwrap_counts(link_counts, cycle.encoder_bits) + float(
        np.floor(run.load_angle_rad[0] / (2 * math.pi)) * 2 * math.pi
    )
    return Capture(
        time_s=run.time_s,
        channels={
            "motor_counts": run.motor_counts.astype(np.float64),
            "motor_pos_rad": unwrap_counts(run.motor_counts, cycle.encoder_bits),
            "link_pos_rad": link_pos,
            "current_a": run.current_a,
        },
        meta=cycle.capture_meta(machine, {"driver": "sim", "seed": seed}),
        source=f"sim:{machine}/{cycle.joint}",
    )
