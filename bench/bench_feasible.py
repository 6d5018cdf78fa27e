"""The physically consistent estimate (`jha identify --feasible`) as a semidefinite program
(cvxpy + Clarabel; issue 30, point 5): its solve time, status and cost on the planar arm, the
UR5e and the two 7-joint arms, each from a simulated excitation with friction beyond the model
(a Stribeck hump), against the unconstrained fit's time in the same run. Goal: <= 2 s for 7
joints.
"""

from __future__ import annotations

import time
from dataclasses import replace

from agent.estimation.identification.excitation import ExcitationSettings, design_excitation
from agent.estimation.identification.fit import identify
from agent.estimation.identification.model import IdentificationSettings
from agent.models.robot import elastic as er
from agent.models.robot.description import load_robot
from agent.models.robot.elastic_measure import measure
from agent.models.robot.friction import FrictionNonlinearity
from tests.support.paths import ROBOTS

ROBOTS_BENCHED = ("planar2.yaml", "ur5e.yaml", "panda.yaml", "iiwa14.yaml")


def main(quick: bool = False) -> None:
    rigid = IdentificationSettings(model="rigid", model_check=False)
    print(f"{'robot':<10} {'joints':>6} {'fit s':>7} {'+ feasible s':>13} {'status':<12} "
          f"{'cost %':>8}  violations")  # fmt: skip
    for name in ROBOTS_BENCHED[:2] if quick else ROBOTS_BENCHED:
        robot = load_robot(ROBOTS / name)
        design = design_excitation(
            robot, ExcitationSettings(period_s=6.0, harmonics=4, maxiter=20 if quick else 60)
        )
        t, q, qd, qdd = design.trajectory.sample(1000.0, 2, 0.3)
        nl = FrictionNonlinearity.typical(robot, stribeck=0.5, ripple=0.0)
        captures = measure(er.simulate(robot, t, q, qd, qdd, friction=nl), robot, seed=1)
        started = time.perf_counter()
        identify(captures, robot, rigid)
        fit_s = time.perf_counter() - started
        started = time.perf_counter()
        result = identify(captures, robot, replace(rigid, feasible=True))
        both_s = time.perf_counter() - started
        f = result.feasible
        assert f is not None
        print(
            f"{robot.name:<10} {robot.n_joints:>6} {fit_s:>7.2f} {both_s - fit_s:>13.2f} "
            f"{f.message.split(': ')[-1]:<12} {f.cost_pct:>8.3g}  {len(f.violations)}"
        )
