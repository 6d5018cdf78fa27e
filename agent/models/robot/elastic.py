"""Forward dynamics of a serial robot with elastic joints under joint-space PD control.

The model of Zollo, Lopez et al. 2014 (Spong's reduced model, section 3): with theta the rotor angle
seen from the link (motor angle / gear ratio) and q the link angle,

    M(q) q'' + h(q, q')                         = K (theta - q)      link
    B theta'' + f(theta', ...) + K (theta - q)  = u                  rotor (B = Jm G^2)

u is a PD law on the motor side with a model-based feedforward (or, as in Zollo, Lopez et al. 2014's
[3], gravity compensation only), clipped at the joint's torque limit. f is Coulomb + viscous
friction plus the part an identification model of that form does not contain (FrictionNonlinearity):
a Stribeck hump near zero speed, a strain-wave-like ripple twice per motor turn and a friction share
that grows with the transmitted torque.

Integration: Newmark's average acceleration (trapezoidal, 2nd order, unconditionally stable),
with the spring, the PD law and the friction taken implicitly (Newton on the friction law
where it bends, at reversals): the link-side mode of a light wrist behind a stiff gear rings at
kHz and would need a tiny explicit step. M, h and the slopes of h are evaluated, batched over
the whole run, along the previous pass's trajectory, and the run is repeated until it no
longer moves (waveform relaxation, Newton-like thanks to the slopes: two or three passes, the
first one along the reference). The recorded run satisfies the equations above to 1e-7 rad
(link) and 1e-4 N·m (friction law).

Measurement: encoder quantisation (counts per turn of the link, and of the motor shaft) and
Gaussian sensor noise at a given signal-to-noise ratio. The SN values of Zollo, Lopez et al. 2014
(20 ... 200) only make sense in decibels: a linear ratio of 80 would bury the 0.1-0.4 degree
deflections the paper reports, yet it calls SN = 80 "comparable to the absence of noise". Noise std
is std(signal) * 10^(-SN/20).

The rigid-body part is agent.models.robot.newton_euler, the friction law
agent.models.robot.friction and the sensors agent.models.robot.elastic_measure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.linalg.lapack import dgesv

from agent.errors import EstimationError
from agent.models.robot.description import InertiaTensor, LinkInertial, RobotDescription
from agent.models.robot.elastic_measure import ElasticRun
from agent.models.robot.friction import (
    FrictionArrays,
    FrictionNonlinearity,
    joint_values,
)
from agent.models.robot.newton_euler import inverse_dynamics, mass_matrix_and_bias
from agent.models.robot.regressor import ChainGeometry, chain_geometry

Array = npt.NDArray[np.float64]

# ------------------------------------------------------------------------------- control


@dataclass(frozen=True)
class PdController:
    """u = u_ff + Kp (theta_ref - theta) + Kd (theta'_ref - theta'), link-side units."""

    kp_nm_rad: tuple[float, ...]
    kd_nm_s_rad: tuple[float, ...]
    feedforward: bool = True  # False: gravity compensation only (Zollo, Lopez et al. 2014's [3])


def pd_gains(
    robot: RobotDescription, q_rad: npt.ArrayLike, bandwidth_hz: float = 8.0, damping: float = 1.0
) -> PdController:
    """Gains giving each rotor + its link (inertia at pose q) the given bandwidth."""
    geo = chain_geometry(robot)
    q = np.asarray(q_rad, dtype=np.float64)
    mass, _ = mass_matrix_and_bias(robot, q[None], np.zeros((1, robot.n_joints)), geo)
    inertia = np.diag(mass[0]) + np.array([j.rotor_inertia_kg_m2 for j in robot.joints])
    w = 2.0 * math.pi * bandwidth_hz
    return PdController(tuple(inertia * w * w), tuple(2.0 * damping * inertia * w))


# ------------------------------------------------------------------------------- simulation

MAX_FRICTION_ITERATIONS = 12
FRICTION_TOL_NM = 1e-4


def _stiffness(robot: RobotDescription) -> Array:
    k = [j.stiffness_nm_rad for j in robot.joints]
    if any(v is None for v in k):
        missing = [j.name for j in robot.joints if j.stiffness_nm_rad is None]
        raise EstimationError(f"{robot.source}: no stiffness_nm_rad for {', '.join(missing)}")
    return np.array(k, dtype=np.float64)


def _feedforward(
    model: RobotDescription, ctrl: PdController, t: Array, q: Array, qd: Array, qdd: Array
) -> tuple[Array, Array, Array]:
    """u_ff, theta_ref, theta'_ref from the controller's model of the robot."""
    geo = chain_geometry(model)
    k = _stiffness(model)
    if not ctrl.feedforward:
        g = inverse_dynamics(model, q, np.zeros_like(q), np.zeros_like(q), geometry=geo)
        return g, q + g / k, qd
    tau = inverse_dynamics(model, q, qd, qdd, geometry=geo)
    # The rotor leads the link by the gear's twist tau / K; its rate enters the D term. Its
    # acceleration is taken as the link's: the twist's second derivative (tau'' / K) is tiny and
    # a numerical one would turn any kink of the reference into torque spikes.
    thd = qd + np.gradient(tau, t, axis=0) / k
    fc = joint_values(model, "coulomb_nm")
    u = tau + joint_values(model, "rotor_inertia_kg_m2") * qdd + fc * np.tanh(thd / 1e-3)
    return u + joint_values(model, "viscous_nm_s_rad") * thd, q + tau / k, thd


def simulate(
    robot: RobotDescription,
    time_s: npt.ArrayLike,
    q_ref: npt.ArrayLike,
    qd_ref: npt.ArrayLike,
    qdd_ref: npt.ArrayLike,
    *,
    friction: FrictionNonlinearity | None = None,
    controller: PdController | None = None,
    model: RobotDescription | None = None,
    record_every: int = 1,
    max_passes: int = 12,
    tol_rad: float = 1e-7,
) -> ElasticRun:
    """Run the reference through the PD-controlled elastic robot, starting at rest.

    `robot` is the truth; `model` (default the same) is what the controller believes. The
    reference grid is the integration grid; every record_every-th point is returned.
    """
    t = np.asarray(time_s, dtype=np.float64)
    qr, qdr, qddr = (np.asarray(x, dtype=np.float64) for x in (q_ref, qd_ref, qdd_ref))
    n = robot.n_joints
    if qr.shape != (t.size, n) or qdr.shape != qr.shape or qddr.shape != qr.shape:
        raise ValueError(f"reference must be ({t.size}, {n}) arrays")
    dt_all = np.diff(t)
    dt = float(dt_all.mean())
    if np.max(np.abs(dt_all - dt)) > 1e-9 * max(dt, 1.0):
        raise ValueError("the reference grid must be uniform")
    if max_passes < 1 or record_every < 1:
        raise ValueError("max_passes and record_every must be at least 1")
    nl = friction or FrictionNonlinearity.none(n)
    ctrl = controller or pd_gains(robot, qr[0])
    u_ff, th_r, thd_r = _feedforward(model or robot, ctrl, t, qr, qdr, qddr)
    geo = chain_geometry(robot)
    k = _stiffness(robot)
    inertia_b = joint_values(robot, "rotor_inertia_kg_m2")
    if np.any(inertia_b <= 0.0):
        raise EstimationError(f"{robot.source}: the elastic model needs rotor inertias > 0")
    u_max = joint_values(robot, "torque_max_nm")
    kp, kd = np.asarray(ctrl.kp_nm_rad), np.asarray(ctrl.kd_nm_s_rad)
    q_bar, qd_bar = qr, qdr
    change = math.inf
    passes = 0
    while passes < max_passes and change > tol_rad:
        lin = _linearise(robot, q_bar, qd_bar, geo)
        states, sat = _newmark(
            robot, nl, qr[0], dt, lin, k, inertia_b, kp, kd, u_ff, th_r, thd_r, u_max
        )
        change = float(np.max(np.abs(states[0] - q_bar)))
        q_bar, qd_bar = states[0], states[1]
        passes += 1
    sl = slice(None, None, record_every)
    q, qd, qdd, th, thd, thdd, u = (x[sl] for x in states)
    return ElasticRun(t[sl], q, qd, qdd, th, thd, thdd, u, sat[sl], passes, change)


@dataclass(frozen=True)
class _Linearised:
    """h(q, q') ~ bias + grad_q (q - q_bar) + grad_qd (q' - qd_bar) along the last pass."""

    q_bar: Array
    qd_bar: Array
    mass: Array
    bias: Array
    grad_q: Array
    grad_qd: Array


def _linearise(
    robot: RobotDescription, q_bar: Array, qd_bar: Array, geo: ChainGeometry
) -> _Linearised:
    """M and h along the last pass, with the slopes of h: feeding them back makes each pass a
    Newton step for the gravity and velocity terms, so a soft joint (K = 2000 N·m/rad, where
    gravity stiffness is a fair share of the servo's) still settles in a few passes."""
    n_s, n = q_bar.shape
    mass, bias = mass_matrix_and_bias(robot, q_bar, qd_bar, geo)
    step = 1e-6
    eye = np.repeat(np.eye(n), n_s, axis=0) * step
    q_all = np.concatenate([np.tile(q_bar, (n, 1)) + eye, np.tile(q_bar, (n, 1))])
    qd_all = np.concatenate([np.tile(qd_bar, (n, 1)), np.tile(qd_bar, (n, 1)) + eye])
    h = inverse_dynamics(robot, q_all, qd_all, np.zeros_like(q_all), geometry=geo)
    grads = (h.reshape(2, n, n_s, n) - bias) / step  # [which, column k, sample, row]
    grad_q, grad_qd = (np.ascontiguousarray(g.transpose(1, 2, 0)) for g in grads)
    return _Linearised(q_bar, qd_bar, mass, bias, grad_q, grad_qd)


def _newmark(
    robot: RobotDescription,
    nl: FrictionNonlinearity,
    q0: Array,
    dt: float,
    lin: _Linearised,
    k: Array,
    inertia_b: Array,
    kp: Array,
    kd: Array,
    u_ff: Array,
    th_r: Array,
    thd_r: Array,
    u_max: Array,
) -> tuple[list[Array], npt.NDArray[np.bool_]]:
    mass, bias, q_bar, qd_bar = lin.mass, lin.bias, lin.q_bar, lin.qd_bar
    n_s, n = bias.shape
    c, e = dt * dt / 4.0, dt / 2.0
    out = [np.zeros((n_s, n)) for _ in range(7)]
    sat = np.zeros((n_s, n), dtype=bool)
    q_, v_, a_, th_, w_, b_, u_ = out
    # start at rest in static equilibrium: K delta = h(q, 0) and M q'' = 0
    q = q0.copy()
    v = np.zeros(n)
    th = q + bias[0] / k
    w = np.zeros(n)
    a = np.linalg.solve(mass[0], k * (th - q) - bias[0])
    fric = FrictionArrays.of(robot, nl, linear=True)
    f0, _ = fric(w, th, k * (th - q))
    u0 = np.clip(u_ff[0] + kp * (th_r[0] - th) + kd * (thd_r[0] - w), -u_max, u_max)
    b = (u0 - f0 - k * (th - q)) / inertia_b
    q_[0], v_[0], a_[0], th_[0], w_[0], b_[0], u_[0] = q, v, a, th, w, b, u0
    ck = c * k
    ck2 = ck * ck
    gain = c * kp + e * kd
    d0 = inertia_b + ck + gain
    mass_ck = mass + np.diag(ck) + c * lin.grad_q + e * lin.grad_qd
    grad_q, grad_qd = lin.grad_q, lin.grad_qd
    diag = np.arange(n) * (n + 1)

    def solve(mat: Array, rhs: Array) -> Array:
        # LAPACK directly: numpy's solve costs 4x more in wrapper overhead at this size
        _, _, x, info = dgesv(mat, rhs)
        if info != 0:
            raise EstimationError(f"simulation step {i}: singular step matrix")
        return np.asarray(x)

    for i in range(1, n_s):
        qt = q + dt * v + c * a
        vt = v + e * a
        tht = th + dt * w + c * b
        wt = w + e * b
        dlt = tht - qt
        ut = u_ff[i] + kp * (th_r[i] - tht) + kd * (thd_r[i] - wt)
        g_i = gain
        # Newton on the friction law: linearise where the last solve ended until the law and
        # its linearisation agree (one pass away from zero speed; a few at reversals)
        w_lin = wt
        f_lin, slope = fric(wt, tht, k * dlt)
        h_i = bias[i] + grad_q[i] @ (qt - q_bar[i]) + grad_qd[i] @ (vt - qd_bar[i])
        for _ in range(MAX_FRICTION_ITERATIONS):
            d = d0 - gain + g_i + e * slope
            r_th = ut - (f_lin + slope * (wt - w_lin)) - k * dlt
            mat = mass_ck[i].copy()
            mat.flat[diag] -= ck2 / d
            a = solve(mat, k * dlt - h_i + ck * r_th / d)
            b = (r_th + ck * a) / d
            u = ut - g_i * b
            if g_i is gain and (np.abs(u) > u_max).any():
                over = np.abs(u) > u_max
                ut = np.where(over, np.sign(u) * u_max, ut)
                g_i = np.where(over, 0.0, gain)
                sat[i] = over
                continue
            w_new = wt + e * b
            f_new, slope_new = fric(w_new, tht + c * b, k * (dlt + c * (b - a)))
            if np.abs(f_new - f_lin - slope * (w_new - w_lin)).max() < FRICTION_TOL_NM:
                break
            w_lin, f_lin, slope = w_new, f_new, slope_new
        q = qt + c * a
        v = vt + e * a
        th = tht + c * b
        w = wt + e * b
        q_[i] = q
        v_[i] = v
        a_[i] = a
        th_[i] = th
        w_[i] = w
        b_[i] = b
        u_[i] = u
    return out, sat


# ------------------------------------------------------------------------------- as built


def perturbed(
    robot: RobotDescription,
    seed: int,
    *,
    mass: float = 0.1,
    com_m: float = 0.01,
    inertia: float = 0.2,
    friction: float = 0.3,
) -> RobotDescription:
    """The robot as built rather than as drawn: every link mass, centre of mass, principal
    moment and friction coefficient off by a uniform relative (or, for the centre of mass,
    absolute) error. The CAD model of Madsen et al. 2020 is the file; this is the robot it
    describes."""
    rng = np.random.default_rng(seed)
    joints = []
    for j in robot.joints:
        link = j.link
        for _ in range(100):
            t = link.inertia_com_kg_m2
            f = 1.0 + rng.uniform(-inertia, inertia, 3)
            com = np.asarray(link.com_m) + rng.uniform(-com_m, com_m, 3) * (link.mass_kg > 0)
            candidate = LinkInertial(
                mass_kg=link.mass_kg * (1.0 + rng.uniform(-mass, mass)),
                com_m=(float(com[0]), float(com[1]), float(com[2])),
                inertia_com_kg_m2=InertiaTensor(
                    t.xx * f[0], t.yy * f[1], t.zz * f[2], t.xy, t.xz, t.yz
                ),
                inertia_rpy_rad=link.inertia_rpy_rad,
            )
            if not candidate.check():
                break
        else:  # pragma: no cover - only a degenerate tensor gets here
            raise EstimationError(f"cannot perturb link {j.name} into a valid body")
        joints.append(
            replace(
                j,
                link=candidate,
                coulomb_nm=j.coulomb_nm * (1.0 + rng.uniform(-friction, friction)),
                viscous_nm_s_rad=j.viscous_nm_s_rad * (1.0 + rng.uniform(-friction, friction)),
            )
        )
    return replace(robot, joints=tuple(joints), source=f"{robot.source} (perturbed, seed {seed})")
