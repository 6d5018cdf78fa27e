"""The emulated arm: six joints following their targets, one of them with Giovannitti et al. 2022's
physics.

`PhysicsJoint` is `agent.models.joint.simulate_constant_speed` cut into one call per controller
cycle, so a joint can be driven in real time by speedj/stopj commands that arrive over RTDE. The
arithmetic is the same statement for statement (same substeps, same noise stream drawn in
per-sample chunks, same float accumulation of t), so a run started at the same pose with the same
seed reproduces the simulated fake's capture sample for sample; tests check this. After the
reference has ramped up it can also ramp down (stopj), which the batch simulation never needs.

`Arm` holds the six joints: kinematic joints follow their motion profile exactly (movej with a
trapezoid on the leading joint, speedj and stopj with linear speed ramps); the physics joint, when
configured, switches to its `PhysicsJoint` when a speedj sets it moving from rest and back to a
kinematic hold once it has stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.capture.encoder import counts_per_turn
from agent.models.joint import GRAVITY_M_S2, JointPhysics
from tests.peers.ur_controller.rigid_arm import DynamicsConfig, RigidDynamics, ServoTracker

N_JOINTS = 6
AMBIENT_C = 30.0
_HEAT_C_PER_A2 = 0.4  # steady-state temperature rise per A^2 of joint current
_HEAT_TAU_S = 300.0
_SETTLE_AFTER_STOP_S = 0.05


@dataclass(frozen=True)
class JointSample:
    """What one joint reports in one controller cycle (link side, as RTDE does)."""

    q: float
    qd: float
    target_q: float
    target_qd: float
    current_a: float
    target_current_a: float


class PhysicsJoint:
    """One constant-speed run of the two-inertia joint with backlash, one sample per `step()`."""

    def __init__(
        self,
        joint: JointPhysics,
        *,
        start_angle_rad: float,
        motor_speed_rad_s: float,
        motor_accel_rad_s2: float,
        sample_rate_hz: float,
        encoder_bits: int,
        noise_counts: float,
        seed: int,
        min_physics_hz: float = 10_000.0,
    ) -> None:
        cpt = counts_per_turn(encoder_bits)
        self.rad_per_count = 2.0 * math.pi / cpt
        self.substeps = max(1, math.ceil(min_physics_hz / sample_rate_hz))
        self.dt = 1.0 / (sample_rate_hz * self.substeps)
        self.v_cmd = motor_speed_rad_s
        self.ramp_s = abs(self.v_cmd) / motor_accel_rad_s2
        self.accel = math.copysign(motor_accel_rad_s2, self.v_cmd)
        self.rng = np.random.default_rng(seed)
        self.noise_counts = noise_counts
        self.joint = joint
        n = joint.gear_ratio
        self.n = n
        self.mgr = joint.load_mass_kg * GRAVITY_M_S2 * joint.load_arm_m
        w_c = 2.0 * math.pi * joint.speed_loop_hz
        self.kv = joint.reflected_inertia_kg_m2 * w_c
        self.ki = self.kv * w_c / 4.0
        self.kp = 2.0 * math.pi * joint.position_loop_hz
        self.speed_filter = 1.0 - math.exp(-2.0 * math.pi * 1000.0 * self.dt)
        # Start at rest, teeth loaded by gravity (as simulate_constant_speed does).
        self.theta_l = start_angle_rad
        tau_g0 = self.mgr * math.cos(self.theta_l)
        side = 1.0 if tau_g0 >= 0 else -1.0
        dth0 = side * joint.backlash_rad + tau_g0 / joint.stiffness_nm_rad
        self.theta_m = n * (self.theta_l + dth0)
        self.omega_m = 0.0
        self.omega_l = 0.0
        self.theta_m0 = self.theta_m
        self.integ = tau_g0 / n
        self.meas_prev = math.floor(self.theta_m / self.rad_per_count) * self.rad_per_count
        self.speed_meas = 0.0
        self.t = 0.0
        self.tau_m = 0.0
        self.tau_cmd = 0.0
        self.counts = math.floor(self.theta_m / self.rad_per_count)
        self.v_ref = 0.0
        self.p_ref = self.theta_m0
        # Ramp-down after stop(): (start time, speed, position, signed deceleration).
        self._stop: tuple[float, float, float, float] | None = None

    def _reference(self, t: float) -> tuple[float, float]:
        if self._stop is not None:
            t0, v0, p0, dec = self._stop
            tau = min(t - t0, v0 / dec) if dec != 0.0 else 0.0
            return v0 - dec * tau, p0 + v0 * tau - 0.5 * dec * tau * tau
        # The same two expressions as simulate_constant_speed, so runs agree bit for bit.
        if t < self.ramp_s:
            return self.accel * t, self.theta_m0 + 0.5 * self.accel * t * t
        return self.v_cmd, (
            self.theta_m0
            + 0.5 * self.accel * self.ramp_s * self.ramp_s
            + self.v_cmd * (t - self.ramp_s)
        )

    def stop(self, motor_decel_rad_s2: float) -> None:
        """Ramp the speed reference down to zero from where it is now (stopj)."""
        if self._stop is not None and self._stop[1] == 0.0:
            return
        v0, p0 = self._reference(self.t)
        dec = math.copysign(abs(motor_decel_rad_s2), v0) if v0 != 0.0 else 0.0
        self._stop = (self.t, v0, p0, dec)

    @property
    def stopped(self) -> bool:
        """The reference has reached zero speed and the motor has come to rest."""
        if self._stop is None:
            return False
        t0, v0, _, dec = self._stop
        ramp_end = t0 + (v0 / dec if dec != 0.0 else 0.0)
        # The encoder dither keeps the measured speed noisy: rest is the reference at zero for
        # a few speed-loop time constants.
        return self.t - ramp_end >= _SETTLE_AFTER_STOP_S

    def step(self) -> None:
        """Integrate one sample period (statement for statement the simulation's inner loop)."""
        j = self.joint
        n = self.n
        jm, jl = j.motor_inertia_kg_m2, j.load_inertia_kg_m2
        ks, ds = j.stiffness_nm_rad, j.damping_nm_s_rad
        delta, alpha = j.backlash_rad, j.smoothing_alpha_per_rad
        bm, bl = j.motor_viscous_nm_s_rad, j.load_viscous_nm_s_rad
        tau_max = j.motor_torque_limit_nm
        mgr, kv, ki, kp = self.mgr, self.kv, self.ki, self.kp
        dt, rpc, speed_filter = self.dt, self.rad_per_count, self.speed_filter
        noise = self.rng.uniform(-self.noise_counts, self.noise_counts, self.substeps)
        inv_pi = 1.0 / math.pi
        atan, cos, floor = math.atan, math.cos, math.floor
        theta_m, theta_l = self.theta_m, self.theta_l
        omega_m, omega_l = self.omega_m, self.omega_l
        integ, meas_prev, speed_meas, t = self.integ, self.meas_prev, self.speed_meas, self.t
        tau_m = tau_cmd = 0.0
        v_ref = p_ref = 0.0
        for k in range(self.substeps):
            v_ref, p_ref = self._reference(t)
            meas = floor(theta_m / rpc + noise[k]) * rpc
            speed_meas += speed_filter * ((meas - meas_prev) / dt - speed_meas)
            meas_prev = meas
            w_err = v_ref + kp * (p_ref - meas) - speed_meas
            tau_m = tau_cmd = kv * w_err + integ
            if tau_m > tau_max:
                tau_m = tau_max
            elif tau_m < -tau_max:
                tau_m = -tau_max
            else:
                integ += ki * w_err * dt
            dth = theta_m / n - theta_l
            dom = omega_m / n - omega_l
            k_bl = (
                ks * inv_pi * (math.pi + atan(alpha * (dth - delta)) - atan(alpha * (dth + delta)))
            )
            sgn = 1.0 if dth > 0 else (-1.0 if dth < 0 else 0.0)
            tau_c = (dth - delta * sgn + ds / ks * dom) * k_bl
            omega_m += dt * (tau_m - tau_c / n - bm * omega_m) / jm
            omega_l += dt * (tau_c - mgr * cos(theta_l) - bl * omega_l) / jl
            theta_m += dt * omega_m
            theta_l += dt * omega_l
            t += dt
        self.theta_m, self.theta_l, self.omega_m, self.omega_l = theta_m, theta_l, omega_m, omega_l
        self.integ, self.meas_prev, self.speed_meas, self.t = integ, meas_prev, speed_meas, t
        self.tau_m, self.tau_cmd, self.v_ref, self.p_ref = tau_m, tau_cmd, v_ref, p_ref
        self.counts = floor(theta_m / rpc + noise[self.substeps - 1])

    def sample(self) -> JointSample:
        """The joint as the controller reports it: motor encoder and drive speed over the gear."""
        n, kt = self.n, self.joint.torque_constant_nm_a
        return JointSample(
            q=self.counts * self.rad_per_count / n,
            qd=self.speed_meas / n,
            target_q=self.p_ref / n,
            target_qd=self.v_ref / n,
            current_a=self.tau_m / kt,
            target_current_a=self.tau_cmd / kt,
        )


class _Profile:
    """A kinematic motion of all six joints: q(t), qd(t) from its start."""

    duration_s: float = 0.0

    def at(self, t: float) -> tuple[list[float], list[float]]:
        raise NotImplementedError


class _Hold(_Profile):
    def __init__(self, q: list[float]) -> None:
        self.q = list(q)

    def at(self, t: float) -> tuple[list[float], list[float]]:
        return list(self.q), [0.0] * N_JOINTS


class _MoveJ(_Profile):
    """URScript movej: the leading joint on a trapezoid (v, a), the others arriving with it."""

    def __init__(self, q0: list[float], q1: list[float], v: float, a: float) -> None:
        self.q0, self.dq = list(q0), [b - c for b, c in zip(q1, q0, strict=True)]
        self.dist = max(abs(d) for d in self.dq)
        v, a = abs(v), abs(a)
        if self.dist == 0.0 or v == 0.0 or a == 0.0:
            self.t_acc, self.v_peak, self.duration_s = 0.0, 0.0, 0.0
            return
        t_acc = v / a
        if a * t_acc * t_acc >= self.dist:  # triangle: never reaches v
            t_acc = math.sqrt(self.dist / a)
            v = a * t_acc
        self.t_acc, self.v_peak, self.a = t_acc, v, a
        self.duration_s = 2.0 * t_acc + (self.dist - a * t_acc * t_acc) / v

    def _s(self, t: float) -> tuple[float, float]:
        if self.duration_s == 0.0 or t >= self.duration_s:
            return self.dist, 0.0
        a, ta, vp, total = self.a, self.t_acc, self.v_peak, self.duration_s
        if t < ta:
            return 0.5 * a * t * t, a * t
        if t < total - ta:
            return 0.5 * a * ta * ta + vp * (t - ta), vp
        rem = total - t
        return self.dist - 0.5 * a * rem * rem, a * rem

    def at(self, t: float) -> tuple[list[float], list[float]]:
        s, sd = self._s(t)
        f = 0.0 if self.dist == 0.0 else 1.0 / self.dist
        return (
            [q + d * s * f for q, d in zip(self.q0, self.dq, strict=True)],
            [d * sd * f for d in self.dq],
        )


class _SpeedRamp(_Profile):
    """speedj / stopj: every joint's speed goes linearly to its target, all arriving together."""

    def __init__(self, q0: list[float], v0: list[float], v1: list[float], a: float) -> None:
        self.q0, self.v0, self.v1 = list(q0), list(v0), list(v1)
        dv = max(abs(b - c) for b, c in zip(v1, v0, strict=True))
        self.duration_s = dv / abs(a) if a != 0.0 and dv > 0.0 else 0.0

    def at(self, t: float) -> tuple[list[float], list[float]]:
        T = self.duration_s
        if T == 0.0:
            return [q + v * t for q, v in zip(self.q0, self.v1, strict=True)], list(self.v1)
        tr = min(t, T)
        if tr == T:
            # Exactly the target speed at the end: v0 + (v1 - v0) * T / T can miss it by an
            # ulp, and a stop that never reaches 0.0 would keep the arm "moving" for ever.
            qd = list(self.v1)
        else:
            qd = [v0 + (v1 - v0) * tr / T for v0, v1 in zip(self.v0, self.v1, strict=True)]
        q = [
            q0 + v0 * tr + 0.5 * (v1 - v0) / T * tr * tr + v1 * (t - tr)
            for q0, v0, v1 in zip(self.q0, self.v0, self.v1, strict=True)
        ]
        return q, qd


@dataclass(frozen=True)
class PhysicsConfig:
    """Which joint carries the physics, and how it is measured."""

    index: int  # 0-based joint number on the arm
    physics: JointPhysics
    encoder_bits: int
    noise_counts: float
    seed: int
    sample_rate_hz: float


class Arm:
    """Six joints stepped once per controller cycle.

    With `dynamics` (a rigid arm's truth, tests.peers.ur_controller.rigid_arm) the joints report
    the currents of the realised motion while servoj runs; otherwise kinematic joints draw none.
    """

    def __init__(
        self,
        q0: list[float],
        dt_s: float,
        physics: PhysicsConfig | None,
        dynamics: DynamicsConfig | None = None,
    ) -> None:
        self.dt_s = dt_s
        self.dynamics = None if dynamics is None else RigidDynamics(dynamics)
        self.servo: ServoTracker | None = None
        self.servo_runs = 0  # servoj streams started (the "servo" trigger counts them)
        self.movej_runs = 0  # movej commands (the "movej" trigger counts them)
        self.physics_cfg = physics
        self.physics: PhysicsJoint | None = None
        self.physics_runs = 0
        self._profile: _Profile = _Hold(q0)
        self._t = 0.0
        self.q, self.qd = list(q0), [0.0] * N_JOINTS
        self.target_q, self.target_qd = list(q0), [0.0] * N_JOINTS
        self.current = [0.0] * N_JOINTS
        self.target_current = [0.0] * N_JOINTS
        self.temperature_c = [AMBIENT_C + 0.5 * i for i in range(N_JOINTS)]

    # Commands -----------------------------------------------------------------------------
    def _start(self, profile: _Profile) -> None:
        self._release_physics()
        self.servo = None
        self._profile, self._t = profile, 0.0

    def servoj(self, q: list[float], gain: float) -> None:
        """URScript servoj: track the latest target (the physics joint stays kinematic)."""
        if self.servo is None:
            self._release_physics()
            self.servo = ServoTracker(self.q, self.qd)
            self.servo_runs += 1
            self._profile, self._t = _Hold(self.q), 0.0
        self.servo.command(q, gain)

    def _release_physics(self) -> None:
        """Hand the physics joint back to the kinematic model where it stands."""
        if self.physics is not None and self.physics_cfg is not None:
            i = self.physics_cfg.index
            s = self.physics.sample()
            self.q[i], self.target_q[i] = s.q, s.q
            self.qd[i], self.target_qd[i] = 0.0, 0.0
            self.physics = None
            self._profile, self._t = _Hold(self.q), 0.0

    def movej(self, q1: list[float], v: float, a: float) -> None:
        self.movej_runs += 1
        self._start(_MoveJ(self.q, q1, v, a))

    def speedj(self, qd: list[float], a: float) -> None:
        self.servo = None
        cfg = self.physics_cfg
        if cfg is not None and self.physics is None and qd[cfg.index] != 0.0 and not self.moving:
            n = cfg.physics.gear_ratio
            self.physics = PhysicsJoint(
                cfg.physics,
                start_angle_rad=self.q[cfg.index],
                motor_speed_rad_s=qd[cfg.index] * n,
                motor_accel_rad_s2=abs(a) * n,
                sample_rate_hz=cfg.sample_rate_hz,
                encoder_bits=cfg.encoder_bits,
                noise_counts=cfg.noise_counts,
                seed=cfg.seed * 1000 + self.physics_runs,
            )
            self.physics_runs += 1
            others = list(qd)
            others[cfg.index] = 0.0
            self._profile, self._t = _SpeedRamp(self.q, self.qd, others, a), 0.0
            return
        if self.physics is not None and cfg is not None:
            # Already running: the physics joint keeps its reference, the others follow.
            others = list(qd)
            others[cfg.index] = 0.0
            self._profile, self._t = _SpeedRamp(self.q, self.qd, others, a), 0.0
            return
        self._start(_SpeedRamp(self.q, self.qd, list(qd), a))

    def stopj(self, a: float) -> None:
        self.servo = None
        if self.physics is not None and self.physics_cfg is not None:
            self.physics.stop(abs(a) * self.physics_cfg.physics.gear_ratio)
        self._profile, self._t = _SpeedRamp(self.q, self.qd, [0.0] * N_JOINTS, a), 0.0

    def halt(self) -> None:
        """Brakes in (power off, emergency stop): every joint stands still where it is."""
        self._release_physics()
        self.servo = None
        self._profile, self._t = _Hold(self.q), 0.0
        self.qd = [0.0] * N_JOINTS

    @property
    def moving(self) -> bool:
        if self.servo is not None:
            return True
        if self.physics is not None:
            return not self.physics.stopped
        return any(v != 0.0 for v in self.qd) or self._t < self._profile.duration_s

    @property
    def profile_done(self) -> bool:
        """The commanded kinematic motion has reached its end (movej arrived, ramp finished)."""
        return self._t >= self._profile.duration_s

    # Time ---------------------------------------------------------------------------------
    def step(self) -> None:
        if self.servo is not None:
            self._step_servo()
            return
        self._t += self.dt_s
        q, qd = self._profile.at(self._t)
        if isinstance(self._profile, _SpeedRamp) and all(v == 0.0 for v in qd):
            # A finished stop holds exactly where it ended.
            self._profile, self._t = _Hold(q), 0.0
        self.q, self.qd, self.target_q, self.target_qd = q, qd, list(q), list(qd)
        self.current = [0.0] * N_JOINTS
        self.target_current = [0.0] * N_JOINTS
        if self.physics is not None and self.physics_cfg is not None:
            i = self.physics_cfg.index
            self.physics.step()
            s = self.physics.sample()
            self.q[i], self.qd[i], self.target_q[i], self.target_qd[i] = (
                s.q,
                s.qd,
                s.target_q,
                s.target_qd,
            )
            self.current[i], self.target_current[i] = s.current_a, s.target_current_a
            if self.physics.stopped and self.profile_done:
                self._release_physics()
        self._heat()

    def _step_servo(self) -> None:
        assert self.servo is not None
        qd_before = list(self.qd)
        self.q, self.qd = self.servo.step(self.dt_s)
        self.target_q, self.target_qd = self.servo.target.tolist(), list(self.qd)
        if self.dynamics is not None:
            # the mean acceleration over the cycle, from the integrated speeds
            qdd = [(b - a) / self.dt_s for a, b in zip(qd_before, self.qd, strict=True)]
            self.current = self.dynamics.currents(self.q, self.qd, qdd)
            self.target_current = list(self.current)
        self._heat()

    def _heat(self) -> None:
        k = self.dt_s / _HEAT_TAU_S
        self.temperature_c = [
            t + k * (AMBIENT_C + 0.5 * i + _HEAT_C_PER_A2 * c * c - t)
            for i, (t, c) in enumerate(zip(self.temperature_c, self.current, strict=True))
        ]
