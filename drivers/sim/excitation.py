"""The simulated controller's excitation cycle: a robot with elastic joints (paper 002).

SimDriver routes an ExcitationCycle here. The truth is a robot file (config/robots/*.yaml)
worn as SimRobotSettings says: per joint, friction (Coulomb, viscous and the nonlinear part)
and stiffness scaled. agent.models.robot.elastic integrates it under joint-space PD control
with the nominal robot as the controller's model (the controller does not know the wear),
friction with a Stribeck hump the identification model does not contain, quantised encoders
and sensor noise. The run is computed in a thread and paced like SimDriver.run_cycle: with
time_scale > 0 it takes (settle + duration) * time_scale of wall time, and stop_motion ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.capture.multi import MultiCapture
from agent.errors import CycleAborted, DriverError
from agent.models.robot.description import RobotDescription, load_robot
from drivers.base import ExcitationCycle, within

if TYPE_CHECKING:
    from drivers.sim.driver import SimDriver

# A real controller refuses to start a trajectory away from its first point.
START_POSE_TOLERANCE_RAD = 0.01


@dataclass(frozen=True)
class SimJointWear:
    """How far one joint of the simulated robot is from its robot file."""

    friction_scale: float = field(
        default=1.0, metadata={"gt": 0.0, "le": 100.0, "doc": "Coulomb, viscous and Stribeck"}
    )
    stiffness_scale: float = field(default=1.0, metadata={"gt": 0.0, "le": 100.0})


@dataclass(frozen=True)
class SimRobotSettings:
    """The simulated robot's truth for the identification cycle (`settings.robot:` of sim)."""

    robot: str = field(metadata={"min_len": 1, "doc": "robot description file"})
    wear: dict[str, SimJointWear] = field(default_factory=dict)
    stribeck_fraction: float = field(
        default=0.5, metadata={"ge": 0.0, "le": 5.0, "doc": "breakaway excess / Coulomb"}
    )
    ripple_fraction: float = field(
        default=0.0, metadata={"ge": 0.0, "le": 1.0, "doc": "strain-wave ripple / Coulomb"}
    )
    load_fraction: float = field(
        default=0.0, metadata={"ge": 0.0, "le": 0.5, "doc": "friction share of gear torque"}
    )
    torque_noise_nm: float = field(
        default=0.0, metadata={"ge": 0.0, "doc": "drive torque noise std, link side"}
    )
    snr_db: float | None = field(
        default=None, metadata={"gt": 0.0, "doc": "sensor noise on every channel (paper 002)"}
    )
    counts_per_turn: int | None = field(
        default=None, metadata={"gt": 0, "doc": "encoders (default: the robot file's)"}
    )
    control_bandwidth_hz: float = field(default=8.0, metadata={"gt": 0.0, "le": 100.0})

    def check(self) -> list[tuple[str, str]]:
        if not os.path.isfile(self.robot):
            return [("robot", f"no robot description file {self.robot!r}")]
        return []


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
    # here, not at the top: SimSettings imports this module, and loading a config should not
    # load scipy
    from agent.models.robot.description import elastic as er
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
    nl = er.FrictionNonlinearity.typical(
        truth,
        stribeck=settings.stribeck_fraction,
        ripple=settings.ripple_fraction,
        load_fraction=settings.load_fraction,
    )
    t, q, qd, qdd = reference(cycle)
    ctrl = er.pd_gains(nominal, q[0], bandwidth_hz=settings.control_bandwidth_hz)
    run = er.simulate(truth, t, q, qd, qdd, friction=nl, controller=ctrl, model=nominal)
    counts = settings.counts_per_turn or truth.encoder_counts_per_turn
    per_joint = er.measure(
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


async def run_excitation(driver: SimDriver, cycle: ExcitationCycle) -> MultiCapture:
    """SimDriver.run_cycle for an ExcitationCycle (needs `robot:` in the sim settings).

    Uses the driver's connection state, stop request, pacing, seed and poses (SimDriver's
    _connected_at, _stop_requested, _moving, _seed_base, _cycles_run, _poses).
    """
    if driver._connected_at is None:
        raise DriverError(f"{driver.controller}: not connected")
    settings = getattr(driver.settings, "robot", None)
    if not isinstance(settings, SimRobotSettings):
        raise DriverError(
            f"{driver.controller}: the sim has no `robot:` settings (SimRobotSettings), so it "
            "cannot run an identification cycle"
        )
    for joint, pose in cycle.start_pose_rad.items():
        at = driver._poses.get(joint)
        if at is not None and abs(at - pose) > START_POSE_TOLERANCE_RAD:
            raise DriverError(
                f"{driver.controller}: joint {joint} stands at {at:.4f} rad, the excitation "
                f"starts at {pose:.4f} rad"
            )
    driver._stop_requested.clear()
    driver._moving = True
    try:
        seed = driver._seed_base * 1000 + driver._cycles_run
        driver._cycles_run += 1
        capture = await asyncio.to_thread(
            simulate_excitation, cycle, settings, seed, driver.controller
        )
        wall_s = (cycle.settle_s + cycle.duration_s) * driver._settings.time_scale
        deadline = time.monotonic() + wall_s
        while True:
            if driver._stop_requested.is_set():
                raise CycleAborted(f"{driver.controller}/all: motion stopped on request")
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await within(driver._stop_requested.wait(), min(left, 0.05))
        link = capture.channel("link_pos_rad")[-1]
        for j, joint in enumerate(cycle.joints):
            if joint in driver._poses:
                driver._poses[joint] = float(link[j])
        return capture
    finally:
        driver._moving = False
