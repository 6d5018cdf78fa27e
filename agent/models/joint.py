"""Two-inertia robot joint with backlash (Giovannitti et al. 2022, fig. 8, eqs. 8-9), under servo
control.

Motor inertia J_m and load inertia J_l coupled through a gear of ratio N and an elastic shaft
(K_s, D_s, load side) with a dead zone of total backlash delta (gap 2*delta, paper's convention),
smoothed by the arctan stiffness of eq. 8 so the integration never meets a discontinuity. Gravity
acts on the load with the joint axis horizontal: tau_g = m g r cos(theta_l). A cascaded P position
/ PI speed loop runs on the quantised motor encoder, as a servo drive does.

The constant-speed test of the paper then shows the backlash signature by itself: twice per load
turn gravity changes sign, the load crosses the gap and strikes the other tooth flank; the impact
excites the joint's resonance, seen as a damped oscillation on the motor speed with alternating
sign, larger for a larger gap (the load falls longer before it strikes).

Two disturbances real drives add, both locked to the motor's rotation, can be switched on:
encoder eccentricity (a reading error of e sin(theta_m + phi), once per motor revolution: the
code disc's centre is off the shaft's axis) and cogging (a torque c sin(p theta_m) on the motor,
p times per revolution). The servo loop acts on the eccentric reading, as a real one does.

The integrator is a plain-Python symplectic Euler loop at >= 10 kHz: the contact mode near 40 Hz
is resolved with a phase error below 1e-4 per period, and 12 s of a 2 kHz capture take about
half a second (numpy per-step overhead would be slower for one joint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agent.capture.encoder import counts_per_turn

Array = npt.NDArray[np.float64]
GRAVITY_M_S2 = 9.80665


@dataclass(frozen=True)
class JointModelSettings:
    """The `model:` section of a configured joint: the two-inertia joint of Giovannitti et al. 2022
    (fig. 8), load-side quantities unless named motor_. JointPhysics adds the gear ratio and
    backlash."""

    motor_inertia_kg_m2: float = field(default=1.2e-4, metadata={"gt": 0.0})
    load_inertia_kg_m2: float = field(default=0.06, metadata={"gt": 0.0})
    stiffness_nm_rad: float = field(default=6000.0, metadata={"gt": 0.0})
    damping_nm_s_rad: float = field(default=1.5, metadata={"ge": 0.0})
    load_mass_kg: float = field(default=5.0, metadata={"ge": 0.0})
    load_arm_m: float = field(default=0.1, metadata={"ge": 0.0})
    motor_viscous_nm_s_rad: float = field(default=2e-5, metadata={"ge": 0.0})
    load_viscous_nm_s_rad: float = field(default=0.0, metadata={"ge": 0.0})
    speed_loop_hz: float = field(default=25.0, metadata={"gt": 0.0})
    position_loop_hz: float = field(default=4.0, metadata={"ge": 0.0})
    smoothing_alpha_per_rad: float = field(default=2e5, metadata={"gt": 0.0, "doc": "eq. 8 alpha"})
    encoder_eccentricity_rad: float = field(
        default=0.0, metadata={"ge": 0.0, "doc": "motor encoder reading error, once per turn"}
    )
    cogging_torque_nm: float = field(default=0.0, metadata={"ge": 0.0})
    cogging_periods_per_turn: int = field(default=6, metadata={"ge": 1, "le": 1000})


@dataclass(frozen=True)
class JointPhysics:
    """Parameters of one joint; load-side quantities unless named motor_."""

    gear_ratio: float
    backlash_rad: float = 0.0  # delta of eq. 8 (load side); the gap is 2*delta
    motor_inertia_kg_m2: float = 1.2e-4
    load_inertia_kg_m2: float = 0.06
    stiffness_nm_rad: float = 6000.0
    damping_nm_s_rad: float = 1.5
    load_mass_kg: float = 5.0
    load_arm_m: float = 0.1
    motor_viscous_nm_s_rad: float = 2e-5
    load_viscous_nm_s_rad: float = 0.0
    speed_loop_hz: float = 25.0
    position_loop_hz: float = 4.0
    smoothing_alpha_per_rad: float = 2e5
    torque_constant_nm_a: float = 0.5
    motor_torque_limit_nm: float = 10.0
    encoder_eccentricity_rad: float = 0.0  # amplitude of the once-per-revolution reading error
    encoder_eccentricity_phase_rad: float = 0.3
    cogging_torque_nm: float = 0.0  # amplitude of the cogging torque on the motor
    cogging_periods_per_turn: int = 6

    def __post_init__(self) -> None:
        positive = {
            "gear_ratio": self.gear_ratio,
            "motor_inertia_kg_m2": self.motor_inertia_kg_m2,
            "load_inertia_kg_m2": self.load_inertia_kg_m2,
            "stiffness_nm_rad": self.stiffness_nm_rad,
            "speed_loop_hz": self.speed_loop_hz,
            "smoothing_alpha_per_rad": self.smoothing_alpha_per_rad,
            "torque_constant_nm_a": self.torque_constant_nm_a,
            "motor_torque_limit_nm": self.motor_torque_limit_nm,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("backlash_rad", "encoder_eccentricity_rad", "cogging_torque_nm"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if self.cogging_periods_per_turn < 1:
            raise ValueError(
                f"cogging_periods_per_turn must be >= 1, got {self.cogging_periods_per_turn!r}"
            )

    @property
    def reflected_inertia_kg_m2(self) -> float:
        """Total inertia seen by the motor with the gear engaged."""
        return self.motor_inertia_kg_m2 + self.load_inertia_kg_m2 / self.gear_ratio**2

    @property
    def resonance_hz(self) -> float:
        """Locked-rotor-free resonance of the two-mass system (teeth in contact)."""
        jm_load_side = self.motor_inertia_kg_m2 * self.gear_ratio**2
        j_eff = self.load_inertia_kg_m2 * jm_load_side / (self.load_inertia_kg_m2 + jm_load_side)
        return math.sqrt(self.stiffness_nm_rad / j_eff) / (2.0 * math.pi)


@dataclass(frozen=True)
class ConstantSpeedTest:
    """The test cycle of Giovannitti et al. 2022: ramp up, settle, capture at constant motor
    speed."""

    motor_speed_rad_s: float
    duration_s: float
    sample_rate_hz: float
    settle_s: float = 0.5
    start_angle_rad: float = 0.0  # load angle at start, 0 = arm horizontal
    motor_accel_rad_s2: float = 4000.0

    def __post_init__(self) -> None:
        for name in ("motor_speed_rad_s", "duration_s", "sample_rate_hz", "motor_accel_rad_s2"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value != 0) or (
                name != "motor_speed_rad_s" and value < 0
            ):
                raise ValueError(f"{name} must be a finite non-zero number, got {value!r}")
        if self.settle_s < 0:
            raise ValueError("settle_s must be >= 0")


@dataclass(frozen=True)
class JointRun:
    """What a simulated cycle yields, sampled at the capture rate (capture window only)."""

    time_s: Array
    motor_counts: npt.NDArray[np.int64]  # what the absolute encoder reports (with noise)
    motor_angle_rad: Array  # true motor angle, for tests
    load_angle_rad: Array  # true load angle (what a link-side encoder would see)
    motor_torque_nm: Array
    current_a: Array
    encoder_bits: int


def simulate_constant_speed(
    joint: JointPhysics,
    test: ConstantSpeedTest,
    *,
    encoder_bits: int = 19,
    encoder_noise_counts: float = 1.0,
    seed: int = 0,
    min_physics_hz: float = 10_000.0,
) -> JointRun:
    """Integrate the joint through the test and return the capture-window samples."""
    cpt = counts_per_turn(encoder_bits)
    rad_per_count = 2.0 * math.pi / cpt
    substeps = max(1, math.ceil(min_physics_hz / test.sample_rate_hz))
    dt = 1.0 / (test.sample_rate_hz * substeps)
    n_out = round(test.duration_s * test.sample_rate_hz) + 1
    v_cmd = test.motor_speed_rad_s
    ramp_s = abs(v_cmd) / test.motor_accel_rad_s2
    start_s = ramp_s + test.settle_s
    n_pre = math.ceil(start_s * test.sample_rate_hz)
    n_total = n_pre + n_out
    rng = np.random.default_rng(seed)
    # Uniform dither of the encoder reading (electrical noise, interpolation error), in counts.
    noise = rng.uniform(-encoder_noise_counts, encoder_noise_counts, n_total * substeps)

    n = joint.gear_ratio
    jm, jl = joint.motor_inertia_kg_m2, joint.load_inertia_kg_m2
    ks, ds = joint.stiffness_nm_rad, joint.damping_nm_s_rad
    delta, alpha = joint.backlash_rad, joint.smoothing_alpha_per_rad
    mgr = joint.load_mass_kg * GRAVITY_M_S2 * joint.load_arm_m
    bm, bl = joint.motor_viscous_nm_s_rad, joint.load_viscous_nm_s_rad
    tau_max = joint.motor_torque_limit_nm
    # Speed loop: PI with crossover w_c on the engaged inertia, integral zero at w_c / 4.
    w_c = 2.0 * math.pi * joint.speed_loop_hz
    kv = joint.reflected_inertia_kg_m2 * w_c
    ki = kv * w_c / 4.0
    kp = 2.0 * math.pi * joint.position_loop_hz
    # Drives low-pass the differentiated encoder; 1 kHz first order, discretised exactly.
    speed_filter = 1.0 - math.exp(-2.0 * math.pi * 1000.0 * dt)
    inv_pi = 1.0 / math.pi
    atan = math.atan
    cos = math.cos
    sin = math.sin
    floor = math.floor
    ecc, ecc_phase = joint.encoder_eccentricity_rad, joint.encoder_eccentricity_phase_rad
    cog, cog_periods = joint.cogging_torque_nm, float(joint.cogging_periods_per_turn)

    # Start at rest, teeth loaded by gravity: solve K_s (dth - delta*sign) = tau_g for dth.
    theta_l = test.start_angle_rad
    tau_g0 = mgr * cos(theta_l)
    side = 1.0 if tau_g0 >= 0 else -1.0
    dth0 = side * delta + tau_g0 / ks
    theta_m = n * (theta_l + dth0)
    omega_m = 0.0
    omega_l = 0.0
    theta_m0 = theta_m
    integ = tau_g0 / n  # integrator pre-loaded with the holding torque: no sag at start
    reading = theta_m + ecc * sin(theta_m + ecc_phase)
    meas_prev = floor(reading / rad_per_count) * rad_per_count
    speed_meas = 0.0

    out_t = np.empty(n_out)
    out_counts = np.empty(n_out, dtype=np.int64)
    out_motor = np.empty(n_out)
    out_load = np.empty(n_out)
    out_tau = np.empty(n_out)
    accel = math.copysign(test.motor_accel_rad_s2, v_cmd)
    t = 0.0
    k_noise = 0
    tau_m = 0.0
    for i in range(n_total):
        for _ in range(substeps):
            # Reference: constant-acceleration ramp, then constant speed.
            if t < ramp_s:
                v_ref = accel * t
                p_ref = theta_m0 + 0.5 * accel * t * t
            else:
                v_ref = v_cmd
                p_ref = theta_m0 + 0.5 * accel * ramp_s * ramp_s + v_cmd * (t - ramp_s)
            reading = theta_m + ecc * sin(theta_m + ecc_phase) if ecc else theta_m
            meas = floor(reading / rad_per_count + noise[k_noise]) * rad_per_count
            k_noise += 1
            speed_meas += speed_filter * ((meas - meas_prev) / dt - speed_meas)
            meas_prev = meas
            w_err = v_ref + kp * (p_ref - meas) - speed_meas
            tau_m = kv * w_err + integ
            if tau_m > tau_max:
                tau_m = tau_max
            elif tau_m < -tau_max:
                tau_m = -tau_max
            else:
                integ += ki * w_err * dt  # anti-windup: integrate only when unsaturated
            # Coupling torque on the load, eqs. 8-9 (dth is the load-side shaft twist).
            dth = theta_m / n - theta_l
            dom = omega_m / n - omega_l
            k_bl = (
                ks * inv_pi * (math.pi + atan(alpha * (dth - delta)) - atan(alpha * (dth + delta)))
            )
            sgn = 1.0 if dth > 0 else (-1.0 if dth < 0 else 0.0)
            tau_c = (dth - delta * sgn + ds / ks * dom) * k_bl
            # Symplectic Euler: speeds first, then positions with the new speeds.
            tau_cog = cog * sin(cog_periods * theta_m) if cog else 0.0
            omega_m += dt * (tau_m - tau_cog - tau_c / n - bm * omega_m) / jm
            omega_l += dt * (tau_c - mgr * cos(theta_l) - bl * omega_l) / jl
            theta_m += dt * omega_m
            theta_l += dt * omega_l
            t += dt
        j = i - n_pre
        if j >= 0:
            out_t[j] = j / test.sample_rate_hz
            # the encoder read now (the controller's last reading is older than this sample)
            now_reading = theta_m + ecc * sin(theta_m + ecc_phase) if ecc else theta_m
            out_counts[j] = floor(now_reading / rad_per_count + noise[k_noise - 1])
            out_motor[j] = theta_m
            out_load[j] = theta_l
            out_tau[j] = tau_m
    return JointRun(
        time_s=out_t,
        motor_counts=np.mod(out_counts, cpt),
        motor_angle_rad=out_motor,
        load_angle_rad=out_load,
        motor_torque_nm=out_tau,
        current_a=out_tau / joint.torque_constant_nm_a,
        encoder_bits=encoder_bits,
    )
