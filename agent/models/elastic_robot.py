"""Forward dynamics of a serial robot with elastic joints under joint-space PD control.

The model of paper 002 (Spong's reduced model, section 3): with theta the rotor angle seen from
the link (motor angle / gear ratio) and q the link angle,

    M(q) q'' + h(q, q')                         = K (theta - q)      link
    B theta'' + f(theta', ...) + K (theta - q)  = u                  rotor (B = Jm G^2)

u is a PD law on the motor side with a model-based feedforward (or, as in paper 002's [3],
gravity compensation only), clipped at the joint's torque limit. f is Coulomb + viscous friction
plus the part an identification model of that form does not contain (FrictionNonlinearity):
a Stribeck hump near zero speed, a strain-wave-like ripple twice per motor turn and a friction
share that grows with the transmitted torque.

Integration: Newmark's average acceleration (trapezoidal, 2nd order, unconditionally stable),
with the spring, the PD law and the friction taken implicitly (Newton on the friction law
where it bends, at reversals): the link-side mode of a light wrist behind a stiff gear rings at
kHz and would need a tiny explicit step. M, h and the slopes of h are evaluated, batched over
the whole run, along the previous pass's trajectory, and the run is repeated until it no
longer moves (waveform relaxation, Newton-like thanks to the slopes: two or three passes, the
first one along the reference). The recorded run satisfies the equations above to 1e-7 rad
(link) and 1e-4 N·m (friction law).

Measurement: encoder quantisation (counts per turn of the link, and of the motor shaft) and
Gaussian sensor noise at a given signal-to-noise ratio. Paper 002's SN values (20 ... 200) only
make sense in decibels: a linear ratio of 80 would bury the 0.1-0.4 degree deflections the
paper reports, yet it calls SN = 80 "comparable to the absence of noise". Noise std is
std(signal) * 10^(-SN/20).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.linalg.lapack import dgesv

from agent.capture import Capture, CaptureMeta
from agent.errors import EstimationError
from agent.models.regressor import ChainGeometry, chain_geometry
from agent.models.robot import InertiaTensor, LinkInertial, RobotDescription, link_parameters

Array = npt.NDArray[np.float64]

# ------------------------------------------------------------------------------- dynamics


def _body_parameters(robot: RobotDescription, geo: ChainGeometry) -> Array:
    """(n, 10) inertial parameters of every link in its body frame B_i (see ChainGeometry)."""
    return np.array([geo.to_body[i] @ link_parameters(j.link) for i, j in enumerate(robot.joints)])


def _cross(a: Array, b: Array) -> Array:
    return np.stack(
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    )


def _inertia_times(phi: Array, w: Array) -> Array:
    xx, xy, yy, xz, yz, zz = phi[4:10]
    return np.stack(
        [
            xx * w[0] + xy * w[1] + xz * w[2],
            xy * w[0] + yy * w[1] + yz * w[2],
            xz * w[0] + yz * w[1] + zz * w[2],
        ]
    )


def inverse_dynamics(
    robot: RobotDescription,
    q: npt.ArrayLike,
    qd: npt.ArrayLike,
    qdd: npt.ArrayLike,
    base_accel: npt.ArrayLike | None = None,
    geometry: ChainGeometry | None = None,
) -> Array:
    """Rigid-body joint torques (N, n) by Newton-Euler, batched over the samples.

    base_accel: (3,) or (N, 3) acceleration of the base in frame 0; default minus gravity (a
    robot at rest in gravity is a robot accelerating upwards). No rotor or friction terms.
    """
    geo = geometry if geometry is not None else chain_geometry(robot)
    phi = _body_parameters(robot, geo)
    qt, qdt, qddt = (np.atleast_2d(np.asarray(x, dtype=np.float64)).T for x in (q, qd, qdd))
    n, n_s = qt.shape
    if base_accel is None:
        base_accel = -np.asarray(robot.gravity_m_s2)
    acc = np.broadcast_to(np.asarray(base_accel, dtype=np.float64).T.reshape(3, -1), (3, n_s))
    w = np.zeros((3, n_s))
    dw = np.zeros((3, n_s))
    rots, forces, moments = [], [], []
    for i in range(n):
        c, s = np.cos(qt[i]), np.sin(qt[i])
        rp = geo.placement_rot[i]
        r = np.empty((3, 3, n_s))
        for row in range(3):
            r[row, 0] = rp[row, 0] * c + rp[row, 1] * s
            r[row, 1] = rp[row, 1] * c - rp[row, 0] * s
            r[row, 2] = rp[row, 2]
        p = geo.placement_pos[i][:, None]
        acc = np.einsum("jin,jn->in", r, acc + _cross(dw, p) + _cross(w, _cross(w, p)))
        w_in = np.einsum("jin,jn->in", r, w)
        dw = np.einsum("jin,jn->in", r, dw)
        dw[0] += w_in[1] * qdt[i]
        dw[1] -= w_in[0] * qdt[i]
        dw[2] += qddt[i]
        w = w_in
        w[2] += qdt[i]
        m, h = phi[i, 0], phi[i, 1:4, None]
        forces.append(m * acc + _cross(dw, h) + _cross(w, _cross(w, h)))
        moments.append(
            _inertia_times(phi[i], dw) + _cross(w, _inertia_times(phi[i], w)) + _cross(h, acc)
        )
        rots.append(r)
    tau = np.empty((n, n_s))
    f_next = np.zeros((3, n_s))
    n_next = np.zeros((3, n_s))
    for i in range(n - 1, -1, -1):
        f_i = forces[i] + f_next
        n_i = moments[i] + n_next
        tau[i] = n_i[2]
        if i > 0:
            f_next = np.einsum("ijn,jn->in", rots[i], f_i)
            n_next = np.einsum("ijn,jn->in", rots[i], n_i) + _cross(
                geo.placement_pos[i][:, None], f_next
            )
    return np.ascontiguousarray(tau.T)


def mass_matrix_and_bias(
    robot: RobotDescription, q: npt.ArrayLike, qd: npt.ArrayLike, geometry: ChainGeometry
) -> tuple[Array, Array]:
    """M(q) (N, n, n) and h(q, qd) = C qd + g (N, n) in one batched Newton-Euler pass."""
    q_ = np.atleast_2d(np.asarray(q, dtype=np.float64))
    qd_ = np.atleast_2d(np.asarray(qd, dtype=np.float64))
    n_s, n = q_.shape
    q_all = np.tile(q_, (n + 1, 1))
    qd_all = np.concatenate([qd_, np.zeros((n * n_s, n))])
    qdd_all = np.concatenate([np.zeros((n_s, n)), np.repeat(np.eye(n), n_s, axis=0)])
    g = -np.asarray(robot.gravity_m_s2, dtype=np.float64)
    base = np.concatenate([np.tile(g, (n_s, 1)), np.zeros((n * n_s, 3))])
    tau = inverse_dynamics(robot, q_all, qd_all, qdd_all, base, geometry)
    bias = tau[:n_s]
    mass = tau[n_s:].reshape(n, n_s, n).transpose(1, 2, 0)
    return np.ascontiguousarray(mass), bias


# ------------------------------------------------------------------------------- friction


@dataclass(frozen=True)
class FrictionNonlinearity:
    """Friction beyond Coulomb + viscous, per joint, link-side units, on the rotor coordinate.

    f = (Fc + S exp(-(v/vs)^2) + mu |tau_J|) tanh(v/eps) + Fv v + R sin(k G theta)
    with S the Stribeck excess of breakaway over Coulomb friction, vs the Stribeck speed, mu the
    load-dependent share (strain-wave gears: friction grows with the transmitted torque tau_J),
    R the ripple twice per turn of the wave generator (motor), eps a pre-sliding speed.
    """

    stribeck_nm: tuple[float, ...]
    ripple_nm: tuple[float, ...]
    stribeck_speed_rad_s: float = 0.02
    load_fraction: float = 0.0
    ripple_per_motor_turn: float = 2.0
    presliding_speed_rad_s: float = 1e-3

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
class _FrictionArrays:
    fc: Array
    fv: Array
    stribeck: Array
    inv_vs2: float
    load: float
    ripple: Array
    ripple_freq: Array  # ripple cycles per rad of theta
    eps: float

    @classmethod
    def of(cls, robot: RobotDescription, nl: FrictionNonlinearity, linear: bool) -> _FrictionArrays:
        n = robot.n_joints
        if len(nl.stribeck_nm) != n or len(nl.ripple_nm) != n:
            raise ValueError(f"friction nonlinearity needs {n} values per term")
        return cls(
            _vec(robot, "coulomb_nm") * float(linear),
            _vec(robot, "viscous_nm_s_rad") * float(linear),
            np.asarray(nl.stribeck_nm, dtype=np.float64),
            1.0 / nl.stribeck_speed_rad_s**2,
            nl.load_fraction,
            np.asarray(nl.ripple_nm, dtype=np.float64),
            nl.ripple_per_motor_turn * _vec(robot, "gear_ratio"),
            nl.presliding_speed_rad_s,
        )

    def __call__(self, speed: Array, theta: Array, transmitted: Array) -> tuple[Array, Array]:
        strib = self.stribeck * np.exp(-(speed * speed) * self.inv_vs2)
        level = self.fc + strib + self.load * np.abs(transmitted)
        th = np.tanh(speed / self.eps)
        f = level * th + self.fv * speed + self.ripple * np.sin(self.ripple_freq * theta)
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
    arrays = _FrictionArrays.of(robot, nl, linear)
    return arrays(*(np.asarray(x, dtype=np.float64) for x in (speed, theta, transmitted)))


# ------------------------------------------------------------------------------- control


@dataclass(frozen=True)
class PdController:
    """u = u_ff + Kp (theta_ref - theta) + Kd (theta'_ref - theta'), link-side units."""

    kp_nm_rad: tuple[float, ...]
    kd_nm_s_rad: tuple[float, ...]
    feedforward: bool = True  # False: gravity compensation only (paper 002's [3])


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


@dataclass(frozen=True)
class ElasticRun:
    """The true motion (link-side units); motor_* is theta = motor angle / gear ratio."""

    time_s: Array
    link_pos_rad: Array
    link_speed_rad_s: Array
    link_accel_rad_s2: Array
    motor_pos_rad: Array
    motor_speed_rad_s: Array
    motor_accel_rad_s2: Array
    motor_torque_nm: Array  # drive torque seen from the link (clipped at torque_max_nm)
    saturated: npt.NDArray[np.bool_]
    passes: int
    last_change_rad: float  # largest change of q in the last relaxation pass

    @property
    def sample_rate_hz(self) -> float:
        return float((self.time_s.size - 1) / (self.time_s[-1] - self.time_s[0]))


def _vec(robot: RobotDescription, attr: str) -> Array:
    return np.array([float(getattr(j, attr) or 0.0) for j in robot.joints])


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
    fc = _vec(model, "coulomb_nm")
    u = tau + _vec(model, "rotor_inertia_kg_m2") * qdd + fc * np.tanh(thd / 1e-3)
    return u + _vec(model, "viscous_nm_s_rad") * thd, q + tau / k, thd


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
    inertia_b = _vec(robot, "rotor_inertia_kg_m2")
    if np.any(inertia_b <= 0.0):
        raise EstimationError(f"{robot.source}: the elastic model needs rotor inertias > 0")
    u_max = _vec(robot, "torque_max_nm")
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
    fric = _FrictionArrays.of(robot, nl, linear=True)
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
            if np.max(np.abs(f_new - f_lin - slope * (w_new - w_lin))) < FRICTION_TOL_NM:
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


# ------------------------------------------------------------------------------- measurement


def add_noise_snr(x: npt.ArrayLike, snr_db: float, rng: np.random.Generator) -> Array:
    """x plus Gaussian noise of std(column) * 10^(-snr_db / 20) in every column (axis 0 time)."""
    a = np.asarray(x, dtype=np.float64)
    std = a.std(axis=0) * 10.0 ** (-snr_db / 20.0)
    return a + rng.standard_normal(a.shape) * std


def quantise(angle_rad: npt.ArrayLike, counts_per_turn: int) -> Array:
    """The angle an encoder with this many counts per turn reports (zero set mid-count)."""
    step = 2.0 * math.pi / counts_per_turn
    return np.round(np.asarray(angle_rad, dtype=np.float64) / step) * step


def measure(
    run: ElasticRun,
    robot: RobotDescription,
    *,
    counts_per_turn: int | None = None,
    snr_db: float | None = None,
    torque_noise_nm: npt.ArrayLike | None = None,
    seed: int = 0,
    cycle: str = "excitation",
) -> tuple[Capture, ...]:
    """One Capture per joint as the two encoders and the drive report the run.

    Link and motor shaft are each read by an encoder of counts_per_turn (default the robot's;
    None there too: no quantisation); snr_db adds sensor noise to every channel;
    torque_noise_nm (per joint, link side) adds drive torque noise on top.
    """
    rng = np.random.default_rng(seed)
    counts = counts_per_turn or robot.encoder_counts_per_turn
    ratio = _vec(robot, "gear_ratio")
    link = run.link_pos_rad
    shaft = run.motor_pos_rad * ratio
    torque = run.motor_torque_nm / ratio
    if counts:
        link, shaft = quantise(link, counts), quantise(shaft, counts)
    if snr_db is not None:
        link, shaft, torque = (add_noise_snr(x, snr_db, rng) for x in (link, shaft, torque))
    if torque_noise_nm is not None:
        std = np.broadcast_to(np.asarray(torque_noise_nm, dtype=np.float64), (robot.n_joints,))
        torque = torque + rng.standard_normal(torque.shape) * (std / ratio)
    extra = {"counts_per_turn": counts, "snr_db": snr_db}
    return tuple(
        Capture(
            run.time_s,
            {
                "link_pos_rad": link[:, j],
                "motor_pos_rad": shaft[:, j],
                "motor_torque_nm": torque[:, j],
            },
            CaptureMeta(
                machine=robot.name,
                joint=spec.name,
                cycle=cycle,
                gear_ratio=spec.gear_ratio,
                sample_rate_hz=run.sample_rate_hz,
                extra=extra,
            ),
            source=f"<simulated {robot.name} {spec.name}>",
        )
        for j, spec in enumerate(robot.joints)
    )


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
    absolute) error. The CAD model of paper 004 is the file; this is the robot it describes."""
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
