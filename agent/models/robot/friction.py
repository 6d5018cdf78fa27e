"""Joint friction on the rotor coordinate: Coulomb + viscous and what such a model lacks.

The friction law of agent.models.robot.elastic's simulation (FrictionNonlinearity: Stribeck
hump, strain-wave ripple, load-dependent share, and the position-dependent torques a drive
carries besides friction: motor cogging and a cable dress pack's spring) and friction_torque(),
which identification also uses as a prior model for the rotor-side compensation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agent.models.robot.description import RobotDescription

Array = npt.NDArray[np.float64]


def joint_values(robot: RobotDescription, attr: str) -> Array:
    """One float per joint of a joint attribute (an unset one counts as 0)."""
    return np.array([float(getattr(j, attr) or 0.0) for j in robot.joints])


@dataclass(frozen=True)
class FrictionNonlinearity:
    """Friction beyond Coulomb + viscous, per joint, link-side units, on the rotor coordinate.

    f = (Fc + S exp(-(v/vs)^2) + mu |tau_J|) tanh(v/eps) + Fv v + R sin(k G theta)
        + C sin(kc G theta + phi_c) + Kc (theta - theta_c)
    with S the Stribeck excess of breakaway over Coulomb friction, vs the Stribeck speed, mu the
    load-dependent share (strain-wave gears: friction grows with the transmitted torque tau_J),
    R the ripple twice per turn of the wave generator (motor), eps a pre-sliding speed.
    C is the motor's cogging (kc periods per motor turn); Kc the spring of a cable dress pack
    that is relaxed at theta_c. Neither is friction, but both are torques on the rotor
    coordinate that a rigid-body-plus-friction model does not contain.
    """

    stribeck_nm: tuple[float, ...]
    ripple_nm: tuple[float, ...]
    stribeck_speed_rad_s: float = 0.02
    load_fraction: float = 0.0
    ripple_per_motor_turn: float = 2.0
    presliding_speed_rad_s: float = 1e-3
    cogging_nm: tuple[float, ...] = ()  # empty: none
    # Cogging proper repeats LCM(slots, poles) times a turn (often 36-72); at the 1 kHz grid of
    # the simulation that aliases, so the default is the lower harmonic current-sensor offsets
    # and pole-pair ripple give (6 a turn), which the integrator resolves for the speeds of an
    # excitation.
    cogging_per_motor_turn: float = 6.0
    cogging_phase_rad: float = 0.0
    cable_nm_rad: tuple[float, ...] = ()  # empty: none
    cable_neutral_rad: tuple[float, ...] = ()  # empty: relaxed at 0

    @classmethod
    def none(cls, n_joints: int) -> FrictionNonlinearity:
        return cls((0.0,) * n_joints, (0.0,) * n_joints)

    @classmethod
    def typical(
        cls,
        robot: RobotDescription,
        stribeck: float = 0.5,
        ripple: float = 0.05,
        load_fraction: float = 0.0,
    ) -> FrictionNonlinearity:
        """Excess and ripple as fractions of each joint's Coulomb friction."""
        fc = [j.coulomb_nm for j in robot.joints]
        return cls(
            tuple(stribeck * c for c in fc),
            tuple(ripple * c for c in fc),
            load_fraction=load_fraction,
        )


@dataclass(frozen=True)
class FrictionArrays:
    fc: Array
    fv: Array
    stribeck: Array
    inv_vs2: float
    load: float
    ripple: Array
    ripple_freq: Array  # ripple cycles per rad of theta
    eps: float
    cogging: Array
    cogging_freq: Array
    cogging_phase: float
    cable: Array
    cable_neutral: Array
    # Which optional terms are present, decided once: the simulators call this at every step of
    # a 20,000-step integration, where testing each array again cost a tenth of the run.
    has_load: bool = field(init=False)
    has_cogging: bool = field(init=False)
    has_cable: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "has_load", self.load != 0.0)
        object.__setattr__(self, "has_cogging", bool(self.cogging.any()))
        object.__setattr__(self, "has_cable", bool(self.cable.any()))

    @classmethod
    def of(cls, robot: RobotDescription, nl: FrictionNonlinearity, linear: bool) -> FrictionArrays:
        n = robot.n_joints
        if len(nl.stribeck_nm) != n or len(nl.ripple_nm) != n:
            raise ValueError(f"friction nonlinearity needs {n} values per term")
        optional = (nl.cogging_nm, nl.cable_nm_rad, nl.cable_neutral_rad)
        if any(len(v) not in (0, n) for v in optional):
            raise ValueError(f"cogging and cable terms need {n} values each, or none")

        def per_joint(values: tuple[float, ...]) -> Array:
            return np.asarray(values, dtype=np.float64) if values else np.zeros(n)

        return cls(
            joint_values(robot, "coulomb_nm") * float(linear),
            joint_values(robot, "viscous_nm_s_rad") * float(linear),
            np.asarray(nl.stribeck_nm, dtype=np.float64),
            1.0 / nl.stribeck_speed_rad_s**2,
            nl.load_fraction,
            np.asarray(nl.ripple_nm, dtype=np.float64),
            nl.ripple_per_motor_turn * joint_values(robot, "gear_ratio"),
            nl.presliding_speed_rad_s,
            per_joint(nl.cogging_nm),
            nl.cogging_per_motor_turn * joint_values(robot, "gear_ratio"),
            nl.cogging_phase_rad,
            per_joint(nl.cable_nm_rad),
            per_joint(nl.cable_neutral_rad),
        )

    def __call__(self, speed: Array, theta: Array, transmitted: Array) -> tuple[Array, Array]:
        strib = self.stribeck * np.exp(-(speed * speed) * self.inv_vs2)
        level = self.fc + strib
        if self.has_load:
            level = level + self.load * np.abs(transmitted)
        th = np.tanh(speed / self.eps)
        f = level * th + self.fv * speed + self.ripple * np.sin(self.ripple_freq * theta)
        if self.has_cogging:
            f = f + self.cogging * np.sin(self.cogging_freq * theta + self.cogging_phase)
        if self.has_cable:
            f = f + self.cable * (theta - self.cable_neutral)
        slope = level * (1.0 - th * th) / self.eps - 2.0 * self.inv_vs2 * speed * strib * th
        return f, slope + self.fv


def friction_torque(
    robot: RobotDescription,
    nl: FrictionNonlinearity,
    speed: npt.ArrayLike,
    theta: npt.ArrayLike,
    transmitted: npt.ArrayLike,
    *,
    linear: bool = True,
) -> tuple[Array, Array]:
    """Friction on the rotor coordinate and its slope d f / d speed (arrays (..., n)).

    speed and theta are the rotor's, seen from the link; transmitted is the gear torque K delta.
    linear=False leaves out Coulomb + viscous: what remains is the part a Coulomb + viscous
    identification model does not contain (a prior model for the rotor-side compensation).
    """
    arrays = FrictionArrays.of(robot, nl, linear)
    return arrays(*(np.asarray(x, dtype=np.float64) for x in (speed, theta, transmitted)))
