"""servoj tracking and joint currents of a rigid UR5e, for the emulator's excitation cycle.

`ServoTracker`: URScript servoj moves the arm towards the latest target through the controller's
position loop. Modelled as a critically damped second-order lag per joint,
    q'' = gain (target - q) - 2 sqrt(gain) q'
(the servoj gain is the loop's stiffness per unit inertia, 100..2000 1/s^2: natural frequency
sqrt(gain) rad/s), integrated in substeps of the controller cycle. lookahead_time is accepted and
not modelled.

`RigidDynamics`: the motor currents a rigid arm needs for the realised motion: the Newton-Euler
inverse dynamics of the robot file (agent.models.robot.newton_euler), the rotor inertia Ia q'', and
Coulomb + viscous friction per joint that the emulator is configured with (the truth an
identification must recover), over gear ratio and torque constant, plus Gaussian noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.models.robot.description import RobotDescription, load_robot
from agent.models.robot.newton_euler import _body_parameters
from agent.models.robot.regressor import chain_geometry

_SUBSTEPS = 8


class ServoTracker:
    """All six joints following the latest servoj target."""

    def __init__(self, q: list[float], qd: list[float]) -> None:
        self.q = np.array(q, dtype=np.float64)
        self.qd = np.array(qd, dtype=np.float64)
        self.target = self.q.copy()
        self.gain = 300.0

    def command(self, target: list[float], gain: float) -> None:
        self.target = np.array(target, dtype=np.float64)
        self.gain = min(max(gain, 100.0), 2000.0)  # URScript clamps the gain to its range

    def step(self, dt_s: float) -> tuple[list[float], list[float]]:
        h = dt_s / _SUBSTEPS
        k, c = self.gain, 2.0 * math.sqrt(self.gain)
        for _ in range(_SUBSTEPS):
            # semi-implicit Euler: stable at h * sqrt(gain) << 1
            self.qd += h * (k * (self.target - self.q) - c * self.qd)
            self.q += h * self.qd
        return self.q.tolist(), self.qd.tolist()


Vec = tuple[float, float, float]


def _cross(a: Vec, b: Vec) -> Vec:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _add(*vs: Vec) -> Vec:
    return (sum(v[0] for v in vs), sum(v[1] for v in vs), sum(v[2] for v in vs))


class ScalarNewtonEuler:
    """agent.models.robot.newton_euler.inverse_dynamics for one sample, on Python floats.

    The same recursion statement for statement (tests check the two agree): the batched numpy
    version costs about 1 ms a call for one sample, half of the emulator's 2 ms cycle.
    """

    def __init__(self, robot: RobotDescription) -> None:
        geo = chain_geometry(robot)
        self.rot = [[[float(x) for x in row] for row in r] for r in geo.placement_rot]
        self.pos: list[Vec] = [(float(p[0]), float(p[1]), float(p[2])) for p in geo.placement_pos]
        self.phi = [[float(x) for x in row] for row in _body_parameters(robot, geo)]
        g = robot.gravity_m_s2
        self.base_acc: Vec = (-float(g[0]), -float(g[1]), -float(g[2]))

    @staticmethod
    def _inertia(phi: list[float], w: Vec) -> Vec:
        xx, xy, yy, xz, yz, zz = phi[4:10]
        return (
            xx * w[0] + xy * w[1] + xz * w[2],
            xy * w[0] + yy * w[1] + yz * w[2],
            xz * w[0] + yz * w[1] + zz * w[2],
        )

    def torques(self, q: list[float], qd: list[float], qdd: list[float]) -> list[float]:
        n = len(q)
        acc, w, dw = self.base_acc, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)
        rots: list[list[list[float]]] = []
        forces: list[Vec] = []
        moments: list[Vec] = []
        for i in range(n):
            c, s = math.cos(q[i]), math.sin(q[i])
            rp = self.rot[i]
            r = [
                [rp[k][0] * c + rp[k][1] * s, rp[k][1] * c - rp[k][0] * s, rp[k][2]]
                for k in range(3)
            ]
            p = self.pos[i]

            def rt(v: Vec, r: list[list[float]] = r) -> Vec:  # r transposed times v
                return (
                    r[0][0] * v[0] + r[1][0] * v[1] + r[2][0] * v[2],
                    r[0][1] * v[0] + r[1][1] * v[1] + r[2][1] * v[2],
                    r[0][2] * v[0] + r[1][2] * v[1] + r[2][2] * v[2],
                )

            acc = rt(_add(acc, _cross(dw, p), _cross(w, _cross(w, p))))
            w_in = rt(w)
            dw0 = rt(dw)
            dw = (dw0[0] + w_in[1] * qd[i], dw0[1] - w_in[0] * qd[i], dw0[2] + qdd[i])
            w = (w_in[0], w_in[1], w_in[2] + qd[i])
            phi = self.phi[i]
            m, h = phi[0], (phi[1], phi[2], phi[3])
            mass_acc: Vec = (m * acc[0], m * acc[1], m * acc[2])
            forces.append(_add(mass_acc, _cross(dw, h), _cross(w, _cross(w, h))))
            moments.append(
                _add(self._inertia(phi, dw), _cross(w, self._inertia(phi, w)), _cross(h, acc))
            )
            rots.append(r)
        tau = [0.0] * n
        f_next: Vec = (0.0, 0.0, 0.0)
        n_next: Vec = (0.0, 0.0, 0.0)
        for i in range(n - 1, -1, -1):
            f_i = _add(forces[i], f_next)
            n_i = _add(moments[i], n_next)
            tau[i] = n_i[2]
            if i > 0:
                r = rots[i]

                def rv(v: Vec, r: list[list[float]] = r) -> Vec:
                    return (
                        r[0][0] * v[0] + r[0][1] * v[1] + r[0][2] * v[2],
                        r[1][0] * v[0] + r[1][1] * v[1] + r[1][2] * v[2],
                        r[2][0] * v[0] + r[2][1] * v[1] + r[2][2] * v[2],
                    )

                f_next = rv(f_i)
                n_next = _add(rv(n_i), _cross(self.pos[i], f_next))
        return tau


@dataclass(frozen=True)
class DynamicsConfig:
    """The truth of the rigid arm: robot file, friction and torque constants, current noise."""

    robot_path: str
    coulomb_nm: tuple[float, ...]  # link side, per joint
    viscous_nm_s_rad: tuple[float, ...]
    torque_constants_nm_a: tuple[float, ...]  # motor shaft torque per A
    current_noise_a: float
    seed: int


class RigidDynamics:
    def __init__(self, cfg: DynamicsConfig) -> None:
        self.robot = load_robot(cfg.robot_path)
        self.ne = ScalarNewtonEuler(self.robot)
        n = self.robot.n_joints
        for name in ("coulomb_nm", "viscous_nm_s_rad", "torque_constants_nm_a"):
            if len(getattr(cfg, name)) != n:
                raise ValueError(f"dynamics: {name} needs {n} values, one per joint")
        self.fc = [float(x) for x in cfg.coulomb_nm]
        self.fv = [float(x) for x in cfg.viscous_nm_s_rad]
        self.ia = [j.rotor_inertia_kg_m2 for j in self.robot.joints]
        # link-side torque per A
        self.per_amp = [
            j.gear_ratio * k
            for j, k in zip(self.robot.joints, cfg.torque_constants_nm_a, strict=True)
        ]
        self.noise = cfg.current_noise_a
        self.rng = np.random.default_rng(cfg.seed)

    def currents(self, q: list[float], qd: list[float], qdd: list[float]) -> list[float]:
        """Motor currents for one sample of motion (link side q, q', q'')."""
        rigid = self.ne.torques(q, qd, qdd)
        noise = self.rng.normal(0.0, self.noise, len(q)) if self.noise > 0 else [0.0] * len(q)
        return [
            (rigid[j] + ia * qdd[j] + fc * math.copysign(1.0, qd[j]) * (qd[j] != 0.0) + fv * qd[j])
            / k
            + float(noise[j])
            for j, (ia, fc, fv, k) in enumerate(
                zip(self.ia, self.fc, self.fv, self.per_amp, strict=True)
            )
        ]
