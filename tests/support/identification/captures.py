"""The planar two-link robot (config/robots/planar2.yaml) on the simulated controller, for the
identification cycle's tests: its joints, the cycle's settings, a sim driver with its robot
truth (wear per joint), and one guarded identification cycle through it."""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.config.identification import ExcitationDesignSettings, IdentificationCycleSettings
from agent.config.model import (
    BacklashCycleSettings,
    ControllerSettings,
    InterlockSettings,
    JointSettings,
)
from agent.models.robot.description import load_robot
from agent.service.interlocks import run_guarded_cycle
from drivers.base import (
    ExcitationCycle,
)
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointWear, SimRobotSettings, SimSettings
from tests.support.paths import ROBOTS

PLANAR = str(ROBOTS / "planar2.yaml")


@dataclasses.dataclass(frozen=True)
class RobotSimSettings(SimSettings):
    """SimSettings with the `robot:` section the lead hooks into SimSettings."""

    robot: SimRobotSettings | None = None


# The sim routes an ExcitationCycle to its robot simulation itself.
ExcitingSim = SimDriver


def joints_of(robot_file: str) -> tuple[JointSettings, ...]:
    robot = load_robot(robot_file)
    return tuple(
        JointSettings(
            name=j.name,
            index=i + 1,
            gear_ratio=j.gear_ratio,
            backlash_cycle=BacklashCycleSettings(motor_speed_rps=1.0),
        )
        for i, j in enumerate(robot.joints)
    )


def cycle_settings(**kw: Any) -> IdentificationCycleSettings:
    design = ExcitationDesignSettings(period_s=4.0, harmonics=4, periods=2, hold_s=0.45, maxiter=40)
    return IdentificationCycleSettings(robot=PLANAR, trajectory=design, **kw)


def controller(**kw: Any) -> ControllerSettings:
    return ControllerSettings(
        name="cell1",
        driver="sim",
        joints=joints_of(PLANAR),
        identification=cycle_settings(**kw),
    )


def sim_driver(
    wear: dict[str, SimJointWear] | None = None, time_scale: float = 0.0, seed: int = 3
) -> ExcitingSim:
    truth = SimRobotSettings(robot=PLANAR, wear=wear or {}, torque_noise_nm=0.2)
    settings = RobotSimSettings(seed=seed, time_scale=time_scale, robot=truth)
    return ExcitingSim("cell1", settings, joints_of(PLANAR))


async def run_identification_cycle(driver: ExcitingSim, cycle: ExcitationCycle) -> Any:
    await driver.connect()
    for name, pose in cycle.start_pose_rad.items():  # the plant moved it there
        driver.inject_pose(name, pose)
    try:
        return await run_guarded_cycle(driver, cycle, InterlockSettings(), None)
    finally:
        await driver.close()
