"""The simulated controller's excitation cycle: a robot with elastic joints.

The elastic joint model is that of Zollo, Lopez et al. 2014. SimDriver routes an ExcitationCycle
here (SimDriver._run_excitation). The truth is a robot file (config/robots/*.yaml) worn as
SimRobotSettings says: per joint, friction (Coulomb, viscous and the nonlinear part) and
stiffness scaled. agent.models.robot.elastic integrates it under joint-space PD control with the
nominal robot as the controller's model (the controller does not know the wear), friction with
a Stribeck hump the identification model does not contain, quantised encoders and sensor
noise. The driver computes the run in a thread and paces it like a backlash cycle.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from typing import Any

import numpy as np

from agent.capture.multi import MultiCapture
from agent.errors import DriverError
from agent.models.robot.description import RobotDescription, load_robot
from drivers.base import ExcitationCycle
from drivers.sim.settings import SimJointWear, SimRobotSettings

# A real controller refuses to start a trajectory away from its first point.
START_POSE_TOLERANCE_RAD = 0.01


@functools.lru_cache(maxsize=8)
def _robot(path: str, mtime_ns: int) -> RobotDescription:
    return load_robot(path)


def worn_robot(robot: RobotDescription, settings: SimRobotSettings) -> RobotDescription:
    """The robot as the simulation has it: friction and stiffness scaled per joint."""
    unknown = sorted(set(settings.wear) - set(robot.joint_names))
    if unknown:
        raise DriverError(
            f"sim: wear given for {', '.join(unknown)}, not joints of {robot.source} "
            f"({', '.join(robot.joint_names)})"
        )
    joints = []
    for j in robot.joints:
        w = settings.wear.get(j.name, SimJointWear())
        k = None if j.stiffness_nm_rad is None else j.stiffness_nm_rad * w.stiffness_scale
        joints.append(
            replace(
                j,
                coulomb_nm=j.coulomb_nm * w.friction_scale,
                viscous_nm_s_rad=j.viscous_nm_s_rad * w.friction_scale,
                stiffness_nm_rad=k,
            )
        )
    return replace(robot, joints=tuple(joints), source=f"{robot.source} (simulated wear)")


def reference(cycle: ExcitationCycle) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(t, q, q', q'') of the whole cycle on its sample grid: settle + hold at the start pose,
    the periods of motion, hold; t = 0 where the capture starts (the settle part is < 0)."""
    rate = cycle.sample_rate_hz
    n_settle = round(cycle.settle_s * rate)
    n_hold = round(cycle.hold_s * rate)
    n_move = round(cycle.periods * cycle.period_s * rate)
    k = np.arange(n_settle + 2 * n_hold + n_move + 1)
    t = (k - n_settle) / rate
    tau = np.clip((k - n_settle - n_hold) / rate, 0.0, n_move / rate)
    q, qd, qdd = cycle.trajectory().evaluate(tau)
    moving = ((k >= n_settle + n_hold) & (k <= n_settle + n_hold + n_move))[:, None]
    return t, q, qd * moving, qdd * moving


def simulate_excitation(
    cycle: ExcitationCycle, settings: SimRobotSettings, seed: int, machine: str
) -> MultiCapture:
    """The capture of one excitation cycle on the simulated robot (CPU-bound, pure)."""
    # here, not at the top: the driver imports this module, and loading a config (which finds
    # the sim's settings through the driver package) should not load scipy
    from agent.models.robot import elastic as er
    from agent.models.robot.elastic_measure import measure
    from agent.models.robot.friction import FrictionNonlinearity

    try:
        nominal = _robot(settings.robot, os.stat(settings.robot).st_mtime_ns)
    except OSError as e:
        raise DriverError(f"sim: cannot read robot file {settings.robot!r}: {e}") from None
    if cycle.joints != nominal.joint_names:
        raise DriverError(
            f"sim: the cycle drives joints {', '.join(cycle.joints)}, the simulated robot "
            f"{nominal.source} has {', '.join(nominal.joint_names)}"
        )
    truth = worn_robot(nominal, settings)
    nl = FrictionNonlinearity.typical(
        truth,
        stribeck=settings.stribeck_fraction,
        ripple=settings.ripple_fraction,
        load_fraction=settings.load_fraction,
    )
    t, q, qd, qdd = reference(cycle)
    ctrl = er.pd_gains(nominal, q[0], bandwidth_hz=settings.control_bandwidth_hz)
    run = er.simulate(truth, t, q, qd, qdd, friction=nl, controller=ctrl, model=nominal)
    counts = settings.counts_per_turn or truth.encoder_counts_per_turn
    per_joint = measure(
        run,
        truth,
        counts_per_turn=counts,
        snr_db=settings.snr_db,
        torque_noise_nm=settings.torque_noise_nm if settings.torque_noise_nm > 0 else None,
        seed=seed,
    )
    start = int(np.searchsorted(t, 0.0 - 0.5 / cycle.sample_rate_hz, side="right"))
    extra: dict[str, Any] = {
        "counts_per_turn": counts,
        "snr_db": settings.snr_db,
        "simulated": True,
        "saturated_samples": int(run.saturated[start:].sum()),
    }
    return MultiCapture(
        t[start:],
        cycle.joints,
        {
            name: np.stack([c.channels[name][start:] for c in per_joint], axis=1)
            for name in per_joint[0].channels
        },
        cycle.capture_meta(machine, extra),
        gear_ratios=cycle.gear_ratios,
        source=f"<sim {machine} identification>",
    )


def check_start_pose(controller: str, cycle: ExcitationCycle, poses: dict[str, float]) -> None:
    """Refuse, as a real controller does, a trajectory whose first point is not where the joints
    stand (joints the simulation does not track are not checked)."""
    for joint, pose in cycle.start_pose_rad.items():
        at = poses.get(joint)
        if at is not None and abs(at - pose) > START_POSE_TOLERANCE_RAD:
            raise DriverError(
                f"{controller}: joint {joint} stands at {at:.4f} rad, the excitation "
                f"starts at {pose:.4f} rad"
            )
