"""The robot as it runs, not as it is modelled: what separates a real identification capture from
a simulator that is the fitted model itself.

`Conditions` bundle the true robot, the torques beyond a rigid-body-plus-friction model
(FrictionNonlinearity) and the drive's torque-constant error, in two settings:

- `paper_like`: what the papers' own simulations had. Zollo, Lopez et al. 2014 (Fig. 3) add a
  Stribeck hump to Coulomb + viscous friction; for Madsen et al. 2020 the robot is "as built"
  (every mass, centre of mass, inertia and friction coefficient off the CAD file), with a
  strain-wave ripple and a 2 % load-dependent friction share.
- `realistic`: besides that, what real drives have: friction that depends on temperature (the
  robot file's friction was measured cold, the capture is taken warm and each later run at
  another temperature), a torque-constant error per joint (the torque is current times a
  nominal constant), cogging, a payload the CAD file does not know and a cable dress pack's
  spring on the first joints.

The magnitudes are the order of what datasheets and the identification literature give, not
one robot's: torque-constant tolerance +-5 % (servo motor datasheets give +-5 to +-10 %),
strain-wave no-load running torque falling ~1.5 %/K (viscous) and ~0.5 %/K (Coulomb) between
20 and 40 degC, cogging 0.5 % of the joint's peak torque, a 0.5-1.5 kg payload, a cable spring
of 1 % of peak torque per radian on the first three joints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from agent.models.robot.description import (
    InertiaTensor,
    LinkInertial,
    RobotDescription,
    link_parameters,
    skew,
)
from agent.models.robot.elastic import perturbed
from agent.models.robot.friction import FrictionNonlinearity

VISCOUS_PER_K = -0.015
COULOMB_PER_K = -0.005
TORQUE_CONSTANT_TOLERANCE = 0.05
COGGING_OF_PEAK = 0.005
CABLE_OF_PEAK_PER_RAD = 0.01


@dataclass(frozen=True)
class Conditions:
    """A simulated robot and what its drives report, under one named setting."""

    name: str
    truth: RobotDescription  # at the temperature of the identification capture
    friction: FrictionNonlinearity
    # measured torque / true torque - 1, per joint (the drive's current times a nominal Kt)
    torque_constant_error: tuple[float, ...]
    # temperature of each later (validation) run against the identification capture's, K
    later_runs_delta_k: tuple[float, ...] = ()

    def truth_at(self, run: int) -> RobotDescription:
        """The true robot during later run `run` (0-based); its friction moved with the heat."""
        if not self.later_runs_delta_k:
            return self.truth
        delta = self.later_runs_delta_k[run % len(self.later_runs_delta_k)]
        return at_temperature(self.truth, delta)


def at_temperature(
    robot: RobotDescription,
    delta_k: float,
    *,
    viscous_per_k: float = VISCOUS_PER_K,
    coulomb_per_k: float = COULOMB_PER_K,
) -> RobotDescription:
    """The robot's friction delta_k kelvin warmer (negative: colder) than its file's values.

    Linear in temperature, as over the 20-40 degC a joint sees in service; a factor never
    goes below a tenth (colder than the linear range, grease stiffens, it does not vanish)."""
    fv = max(1.0 + viscous_per_k * delta_k, 0.1)
    fc = max(1.0 + coulomb_per_k * delta_k, 0.1)
    joints = tuple(
        replace(j, viscous_nm_s_rad=j.viscous_nm_s_rad * fv, coulomb_nm=j.coulomb_nm * fc)
        for j in robot.joints
    )
    return replace(robot, joints=joints, source=f"{robot.source} ({delta_k:+.1f} K)")


def with_payload(
    robot: RobotDescription, mass_kg: float, com_m: tuple[float, float, float]
) -> RobotDescription:
    """The robot carrying a point mass at com_m in the last DH frame (rigidly on the flange)."""
    if mass_kg < 0:
        raise ValueError(f"payload mass must be >= 0, got {mass_kg}")
    last = robot.joints[-1]
    link = last.link
    p = np.asarray(com_m, dtype=np.float64)
    total = link.mass_kg + mass_kg
    if total <= 0:
        return robot
    com = (link.mass_kg * np.asarray(link.com_m) + mass_kg * p) / total
    # Everything about the frame origin in the frame's axes, then back to the new centre.
    params = link_parameters(link)
    xx, xy, yy, xz, yz, zz = params[4:]
    i_o = np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]]) + mass_kg * (skew(p).T @ skew(p))
    i_c = i_o - total * (skew(com).T @ skew(com))
    new_link = LinkInertial(  # tensor in the frame's own axes: inertia_rpy_rad is zero
        mass_kg=total,
        com_m=(float(com[0]), float(com[1]), float(com[2])),
        inertia_com_kg_m2=InertiaTensor(
            float(i_c[0, 0]),
            float(i_c[1, 1]),
            float(i_c[2, 2]),
            float(i_c[0, 1]),
            float(i_c[0, 2]),
            float(i_c[1, 2]),
        ),
    )
    joints = (*robot.joints[:-1], replace(last, link=new_link))
    return replace(robot, joints=joints, source=f"{robot.source} (+{mass_kg:g} kg payload)")


def paper_like(robot: RobotDescription, seed: int, *, as_built: bool = True) -> Conditions:
    """The papers' simulated conditions (module docstring); as_built=False keeps the file's
    values as the truth (Zollo, Lopez et al. 2014 simulate their own model)."""
    if not as_built:
        nl = FrictionNonlinearity.typical(robot, stribeck=0.5, ripple=0.0)
        return Conditions("paper-like", robot, nl, (0.0,) * robot.n_joints)
    truth = perturbed(robot, seed=seed)
    nl = FrictionNonlinearity.typical(truth, stribeck=0.5, ripple=0.05, load_fraction=0.02)
    return Conditions("paper-like", truth, nl, (0.0,) * robot.n_joints)


def realistic(
    robot: RobotDescription,
    seed: int,
    *,
    as_built: bool = True,
    later_runs: int = 3,
    torque_constant_tolerance: float = TORQUE_CONSTANT_TOLERANCE,
) -> Conditions:
    """The paper-like conditions and what real drives add (module docstring), drawn at random
    from `seed`: each call is another robot on another day."""
    rng = np.random.default_rng(seed)
    n = robot.n_joints
    truth = perturbed(robot, seed=seed) if as_built else robot
    payload = float(rng.uniform(0.5, 1.5))
    offset = rng.uniform(-0.03, 0.03, 3)
    truth = with_payload(truth, payload, (float(offset[0]), float(offset[1]), 0.05))
    capture_delta_k = float(rng.uniform(5.0, 15.0))  # the file's friction was taken cold
    truth = at_temperature(truth, capture_delta_k)
    peak = np.array([j.torque_max_nm for j in robot.joints])
    cable = np.where(np.arange(n) < 3, CABLE_OF_PEAK_PER_RAD * peak, 0.0)
    nl = replace(
        FrictionNonlinearity.typical(truth, stribeck=0.5, ripple=0.05, load_fraction=0.02),
        cogging_nm=tuple(float(v) for v in COGGING_OF_PEAK * peak),
        cogging_phase_rad=float(rng.uniform(0.0, 2 * np.pi)),
        cable_nm_rad=tuple(float(v) for v in cable),
        cable_neutral_rad=tuple(float(v) for v in rng.uniform(-0.5, 0.5, n)),
    )
    kt = rng.uniform(-torque_constant_tolerance, torque_constant_tolerance, n)
    later = rng.uniform(-5.0, 5.0, later_runs)
    return Conditions(
        "realistic",
        truth,
        nl,
        tuple(float(v) for v in kt),
        tuple(float(v) for v in later),
    )
