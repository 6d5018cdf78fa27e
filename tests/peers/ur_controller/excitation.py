"""The UR excitation setup the fault tests share with the agent_client process: the config of a
UR5e with an identification section, a short random Fourier excitation, and the emulator's
rigid arm started at that excitation's q0.

The same short trajectory as tests/drivers/ur_rtde/test_excitation.py (2 periods of 2 s, 3
harmonics, seed 3): long enough to fault it mid-motion, short enough to stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.config.travel_limits import joint_travel
from agent.estimation.identification.excitation import ExcitationSettings, random_excitation
from agent.models.robot.description import load_robot
from drivers.base import ExcitationCycle
from tests.peers.ur_controller import REPO_ROOT

ROBOT = str(REPO_ROOT / "config/robots/ur5e.yaml")
COULOMB_NM = (5.0, 7.0, 4.0, 1.5, 1.2, 1.0)
VISCOUS_NM_S_RAD = (6.0, 9.0, 5.0, 2.0, 1.5, 1.2)
KT_NM_A = (0.125, 0.125, 0.125, 0.092, 0.092, 0.092)
NOISE_A = 0.02
SETTLE_S = 0.2
HOLD_S = 0.3
PERIOD_S = 2.0
PERIODS = 2


def csv(values: tuple[float, ...] | list[float]) -> str:
    return ",".join(f"{v:.10g}" for v in values)


def write_config(tmp_path: Path, host: str, **settings: Any) -> Path:
    """The agent config of one UR controller `ur5e` able to run the excitation."""
    robot = load_robot(ROBOT)
    joints = "".join(
        f"""\
      - name: {j.name}
        index: {i + 1}
        gear_ratio: {j.gear_ratio:g}
        encoder_bits: 19
        test_pose_rad: 0.0
        backlash_cycle:
          motor_speed_rps: 10
          sample_rate_hz: 500
"""
        for i, j in enumerate(robot.joints)
    )
    base = {
        "host": host,
        "rt_priority": 20,
        "reconnect_backoff_s": 0.2,
        "torque_constants_nm_a": f"[{csv(KT_NM_A)}]",
        **settings,
    }
    lines = "".join(f"      {k}: {v}\n" for k, v in base.items())
    text = f"""\
controllers:
  - name: ur5e
    driver: ur_rtde
    settings:
{lines}    identification:
      robot: {ROBOT}
      model: rigid
      method: ols
      sample_rate_hz: 500
      settle_s: {SETTLE_S}
      decimation: 10
      max_condition_number: 1.0e6
      trajectory:
        period_s: {PERIOD_S}
        harmonics: 3
        periods: {PERIODS}
        hold_s: {HOLD_S}
    joints:
{joints}"""
    path = tmp_path / "ur_excite.yaml"
    path.write_text(text)
    return path


def controller(path: Path) -> ControllerSettings:
    return load_config(path).controllers[0]


def excitation_cycle(ctrl: ControllerSettings) -> ExcitationCycle:
    """A random (not optimised: SLSQP takes too long for a test) Fourier excitation."""
    robot = load_robot(ROBOT)
    s = ctrl.identification
    if s is None:
        raise ValueError(f"{ctrl.name}: no identification section, expected one for an excitation")
    design = ExcitationSettings(
        period_s=PERIOD_S, harmonics=3, position_halfrange_rad=0.8, speed_fraction=0.6, seed=3
    )
    traj = random_excitation(robot, design)
    return ExcitationCycle(
        controller=ctrl.name,
        robot=robot.name,
        joints=robot.joint_names,
        period_s=traj.period_s,
        q0_rad=traj.q0_rad,
        a=traj.a,
        b=traj.b,
        periods=s.trajectory.periods,
        hold_s=s.trajectory.hold_s,
        settle_s=s.settle_s,
        sample_rate_hz=s.sample_rate_hz,
        gear_ratios=tuple(j.gear_ratio for j in robot.joints),
        # Each joint's limits as the agent resolves them from the config (the robot file).
        travel_limits=tuple(joint_travel(ctrl, j) for j in ctrl.joints),
    )


def emulator_args(cycle: ExcitationCycle) -> list[str]:
    """The rigid UR5e standing at the excitation's q0, real-time controller cycle."""
    return emulator_args_at(list(cycle.trajectory().start_rad()))


def emulator_args_at(q0_rad: list[float]) -> list[str]:
    """The rigid UR5e standing at `q0_rad`, real-time controller cycle."""
    return [
        f"--q0={csv(q0_rad)}",
        *("--robot", ROBOT, "--rt-priority", "30", "--seed", "5"),
        f"--coulomb-nm={csv(COULOMB_NM)}",
        f"--viscous-nm-s-rad={csv(VISCOUS_NM_S_RAD)}",
        f"--torque-constants-nm-a={csv(KT_NM_A)}",
        f"--current-noise-a={NOISE_A}",
    ]
