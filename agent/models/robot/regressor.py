"""Rigid-body regressor of a serial robot: joint torques = Y(q, qd, qdd) @ pi.

Batched over the samples of a capture: q, qd, qdd are (N, n) arrays and Y is (N, n, P). The
Newton-Euler recursion runs once per link over all samples at a time (vectorised in N), with
the per-link wrench written as a 6x10 matrix that is linear in the link's inertial parameters
and carried back down the chain as a block of columns.

Parameters per joint j, in this order (see ParameterLayout):
  m, mx, my, mz, xx, xy, yy, xz, yz, zz   link j in its DH frame (inertia about the frame origin)
  Ia                                      rotor inertia seen from the link side (optional)
  fc, fv                                  Coulomb and viscous friction (optional)
Rotor model of Madsen et al. 2020, assumption (iii): a rotor only spins about its own axis, so it
adds Ia * (rotor acceleration) to its own joint and nothing else. Friction acts where the motion is
measured: the rotor coordinate when the motor encoder is given, the link otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.models.robot.description import INERTIAL_NAMES, RobotDescription, skew

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ParameterLayout:
    """Which parameters a regressor carries and where each one is in pi."""

    n_joints: int
    rotor: bool = False
    friction: bool = False

    @property
    def per_joint(self) -> int:
        return 10 + int(self.rotor) + 2 * int(self.friction)

    @property
    def size(self) -> int:
        return self.n_joints * self.per_joint

    @property
    def names(self) -> tuple[str, ...]:
        local = list(INERTIAL_NAMES)
        if self.rotor:
            local.append("Ia")
        if self.friction:
            local += ["fc", "fv"]
        return tuple(f"{p}{j + 1}" for j in range(self.n_joints) for p in local)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no parameter {name!r}; known: {', '.join(self.names)}") from None

    def inertial_columns(self) -> npt.NDArray[np.intp]:
        """Columns of the 10 inertial parameters of every link, link after link."""
        return (np.arange(self.n_joints)[:, None] * self.per_joint + np.arange(10)).ravel()

    def rotor_columns(self) -> npt.NDArray[np.intp]:
        if not self.rotor:
            return np.zeros(0, dtype=np.intp)
        return np.arange(self.n_joints) * self.per_joint + 10

    def friction_columns(self) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """(Coulomb columns, viscous columns)."""
        if not self.friction:
            empty = np.zeros(0, dtype=np.intp)
            return empty, empty
        first = np.arange(self.n_joints) * self.per_joint + 10 + int(self.rotor)
        return first, first + 1


@dataclass(frozen=True)
class ChainGeometry:
    """Constants of the recursion, derived once from the DH table.

    Link i moves with a body frame B_i whose z axis is the axis of joint i; B_i is the DH
    frame for the modified convention and F_{i-1} turned by theta_i for the standard one.
    B_i = B_{i-1} * (placement_rot[i], placement_pos[i]) * Rz(q_i); `to_body[i]` maps the 10
    parameters written in DH frame i to the same body's parameters in B_i.
    """

    placement_rot: Array  # (n, 3, 3)
    placement_pos: Array  # (n, 3)
    to_body: Array  # (n, 10, 10)


def _rx(alpha: float) -> Array:
    c, s = np.cos(alpha), np.sin(alpha)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _rz(theta: float) -> Array:
    c, s = np.cos(theta), np.sin(theta)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def transform_parameters(rot: Array, pos: Array) -> Array:
    """10x10 map of a body's parameters from frame F to frame B, F having pose (rot, pos) in B.

    m' = m;  h' = R h + m p;  I'_B = R I_F R^T + m S(p)^T S(p) + S(Rh)^T S(p) + S(p)^T S(Rh),
    which is Steiner's theorem applied twice, written so that it stays linear in (m, h, I_F).
    """
    out = np.zeros((10, 10))
    sp = skew(pos)
    for k in range(10):
        phi = np.zeros(10)
        phi[k] = 1.0
        m, h = phi[0], phi[1:4]
        inertia = _sym(phi[4:])
        rh = rot @ h
        srh = skew(rh)
        i_b = rot @ inertia @ rot.T + m * (sp.T @ sp) + srh.T @ sp + sp.T @ srh
        h_b = rh + m * pos
        out[:, k] = [m, *h_b, i_b[0, 0], i_b[0, 1], i_b[1, 1], i_b[0, 2], i_b[1, 2], i_b[2, 2]]
    return out


def _sym(v: Array) -> Array:
    xx, xy, yy, xz, yz, zz = v
    return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])


def chain_geometry(robot: RobotDescription) -> ChainGeometry:
    n = robot.n_joints
    rots = np.zeros((n, 3, 3))
    poss = np.zeros((n, 3))
    to_body = np.zeros((n, 10, 10))
    for i, j in enumerate(robot.joints):
        if robot.convention == "modified":
            # F_i = F_{i-1} Rx(alpha_{i-1}) Tx(a_{i-1}) Rz(theta_i) Tz(d_i); Tz and Rz commute
            rx = _rx(j.alpha_rad)
            rots[i] = rx @ _rz(j.theta_offset_rad)
            poss[i] = np.array([j.a_m, 0.0, 0.0]) + rx @ np.array([0.0, 0.0, j.d_m])
            to_body[i] = np.eye(10)
        else:
            # F_i = F_{i-1} Rz(theta_i) Tz(d_i) Tx(a_i) Rx(alpha_i) = B_i X_i
            if i > 0:
                prev = robot.joints[i - 1]
                rots[i] = _rx(prev.alpha_rad) @ _rz(j.theta_offset_rad)
                poss[i] = np.array([prev.a_m, 0.0, prev.d_m])
            else:
                rots[i] = _rz(j.theta_offset_rad)
            to_body[i] = transform_parameters(_rx(j.alpha_rad), np.array([j.a_m, 0.0, j.d_m]))
    return ChainGeometry(rots, poss, to_body)


def parameter_vector(robot: RobotDescription, layout: ParameterLayout) -> Array:
    """The robot file's values of every parameter of `layout` (pi with Y @ pi = torque)."""
    if layout.n_joints != robot.n_joints:
        raise ValueError(f"layout has {layout.n_joints} joints, {robot.name} has {robot.n_joints}")
    pi = np.zeros(layout.size)
    pi[layout.inertial_columns()] = robot.standard_parameters().ravel()
    if layout.rotor:
        pi[layout.rotor_columns()] = [j.rotor_inertia_kg_m2 for j in robot.joints]
    if layout.friction:
        fc, fv = layout.friction_columns()
        pi[fc] = [j.coulomb_nm for j in robot.joints]
        pi[fv] = [j.viscous_nm_s_rad for j in robot.joints]
    return pi


def _as_samples(name: str, x: npt.ArrayLike, n: int) -> Array:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != n:
        raise ValueError(f"{name} must have shape (N, {n}) or ({n},), got {np.shape(x)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds values that are not finite")
    return a


def _same_samples(name: str, a: Array, n_s: int) -> None:
    if a.shape[0] != n_s:
        raise ValueError(f"{name} has {a.shape[0]} samples, q has {n_s}")


# Inside the recursion the sample axis is last: every operation below is an elementwise
# product of long contiguous rows, which is several times faster in numpy than batched 3x3
# matrix products over a leading sample axis.


def _rot_t_apply(r: Array, v: Array) -> Array:
    """R^T v for r (3,3,N) and v (3,N)."""
    return np.einsum("jin,jn->in", r, v)


def _cross(a: Array, b: Array) -> Array:
    """a x b for (3, ...) stacks (a may be a constant (3,) broadcast against b)."""
    return np.stack(
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    )


def _link_wrench_matrix(w: Array, dw: Array, acc: Array) -> Array:
    """(6,10,N): wrench [f; n] about the body origin = A @ (m, h, I) (Newton-Euler, linear form).

    f = m a + (S(dw) + S(w) S(w)) h;   n = (L(dw) + S(w) L(w)) I - S(a) h,
    with I w = L(w) [xx, xy, yy, xz, yz, zz] and S(w) S(w) = w w^T - |w|^2 1.
    """
    n_s = w.shape[1]
    a_mat = np.zeros((6, 10, n_s))
    wx, wy, wz = w
    dx, dy, dz = dw
    ax, ay, az = acc
    ww = wx * wx + wy * wy + wz * wz
    a_mat[0:3, 0] = acc
    # f from h: S(dw) + w w^T - |w|^2 1
    a_mat[0, 1], a_mat[0, 2], a_mat[0, 3] = wx * wx - ww, wx * wy - dz, wx * wz + dy
    a_mat[1, 1], a_mat[1, 2], a_mat[1, 3] = wy * wx + dz, wy * wy - ww, wy * wz - dx
    a_mat[2, 1], a_mat[2, 2], a_mat[2, 3] = wz * wx - dy, wz * wy + dx, wz * wz - ww
    # n from h: -S(a)
    a_mat[3, 2], a_mat[3, 3] = az, -ay
    a_mat[4, 1], a_mat[4, 3] = -az, ax
    a_mat[5, 1], a_mat[5, 2] = ay, -ax
    # n from I: L(dw) + S(w) L(w); columns xx, xy, yy, xz, yz, zz
    lw = np.zeros((3, 6, n_s))
    lw[0, 0], lw[0, 1], lw[0, 3] = wx, wy, wz
    lw[1, 1], lw[1, 2], lw[1, 4] = wx, wy, wz
    lw[2, 3], lw[2, 4], lw[2, 5] = wx, wy, wz
    swl = _cross(w[:, None, :], lw)
    a_mat[3, 4:10] = swl[0]
    a_mat[4, 4:10] = swl[1]
    a_mat[5, 4:10] = swl[2]
    a_mat[3, 4] += dx
    a_mat[3, 5] += dy
    a_mat[3, 7] += dz
    a_mat[4, 5] += dx
    a_mat[4, 6] += dy
    a_mat[4, 8] += dz
    a_mat[5, 7] += dx
    a_mat[5, 8] += dy
    a_mat[5, 9] += dz
    return a_mat


def _add_cross_const(p: Array, f: Array, out: Array) -> None:
    """out += p x f for a constant p (3,) and blocks f (3,K,N), skipping zero components."""
    for i, j, k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        if p[j] != 0.0:
            out[i] += p[j] * f[k]
        if p[k] != 0.0:
            out[i] -= p[k] * f[j]


def regressor(
    robot: RobotDescription,
    q: npt.ArrayLike,
    qd: npt.ArrayLike,
    qdd: npt.ArrayLike,
    *,
    rotor: bool = False,
    friction: bool = False,
    gravity_m_s2: npt.ArrayLike | None = None,
    motor_qd: npt.ArrayLike | None = None,
    motor_qdd: npt.ArrayLike | None = None,
    geometry: ChainGeometry | None = None,
) -> Array:
    """Y with torques = Y @ pi for every sample: shape (N, n_joints, layout.size).

    q, qd, qdd are link-side joint positions, speeds and accelerations, (N, n) or (n,).
    motor_qd / motor_qdd (link-side units: motor angle / gear ratio) feed the rotor and
    friction columns when a second encoder gives them; the link values are used otherwise.
    gravity_m_s2 overrides the robot's gravity vector (base frame); `geometry` is
    chain_geometry(robot), passed in to skip recomputing it on repeated calls.
    """
    n = robot.n_joints
    q_ = _as_samples("q", q, n)
    qd_ = _as_samples("qd", qd, n)
    qdd_ = _as_samples("qdd", qdd, n)
    if not q_.shape == qd_.shape == qdd_.shape:
        raise ValueError(f"q, qd, qdd shapes differ: {q_.shape}, {qd_.shape}, {qdd_.shape}")
    n_s = q_.shape[0]
    geo = geometry if geometry is not None else chain_geometry(robot)
    g = np.asarray(robot.gravity_m_s2 if gravity_m_s2 is None else gravity_m_s2, dtype=np.float64)
    if g.shape != (3,) or not np.all(np.isfinite(g)):
        raise ValueError(f"gravity_m_s2 must be 3 finite components, got {g!r}")
    layout = ParameterLayout(n, rotor=rotor, friction=friction)
    qt, qdt, qddt = q_.T, qd_.T, qdd_.T

    # forward: velocities and accelerations of every body frame, in that frame
    w = np.zeros((3, n_s))
    dw = np.zeros((3, n_s))
    acc = np.repeat(-g[:, None], n_s, axis=1)  # gravity as an upward acceleration of the base
    rots = []
    link_mats = []
    for i in range(n):
        c, s = np.cos(qt[i]), np.sin(qt[i])
        rp = geo.placement_rot[i]
        r = np.empty((3, 3, n_s))
        for row in range(3):
            r[row, 0] = rp[row, 0] * c + rp[row, 1] * s
            r[row, 1] = rp[row, 1] * c - rp[row, 0] * s
            r[row, 2] = rp[row, 2]
        rots.append(r)
        p = geo.placement_pos[i][:, None]
        acc = _rot_t_apply(r, acc + _cross(dw, p) + _cross(w, _cross(w, p)))
        w_in = _rot_t_apply(r, w)
        dw = _rot_t_apply(r, dw)
        dw[0] += w_in[1] * qdt[i]
        dw[1] -= w_in[0] * qdt[i]
        dw[2] += qddt[i]
        w = w_in
        w[2] += qdt[i]
        a_mat = _link_wrench_matrix(w, dw, acc)
        if not np.array_equal(geo.to_body[i], np.eye(10)):
            # columns in DH-frame parameters: A_dh[r] = T^T A_body[r]. einsum, not matmul:
            # a threaded BLAS call stalls for tenths of a second when the other core is busy
            a_mat = np.einsum("kl,rkn->rln", geo.to_body[i], a_mat)
        link_mats.append(a_mat)

    # backward: wrenches of links i..n-1 carried to body frame i; joint torque is the z moment.
    # Two buffers take turns so that each rotation writes straight into its destination.
    yt = np.zeros((n, layout.size, n_s))
    cols = layout.inertial_columns()
    wrench = np.zeros((6, 10 * n, n_s))
    spare = np.zeros((6, 10 * n, n_s))
    for i in range(n - 1, -1, -1):
        wrench[:, 10 * i : 10 * i + 10] = link_mats[i]
        tail = slice(10 * i, 10 * n)
        yt[i, cols[tail]] = wrench[5, tail]
        if i > 0:
            np.einsum("ijn,jkn->ikn", rots[i], wrench[0:3, tail], out=spare[0:3, tail])
            np.einsum("ijn,jkn->ikn", rots[i], wrench[3:6, tail], out=spare[3:6, tail])
            _add_cross_const(geo.placement_pos[i], spare[0:3, tail], spare[3:6, tail])
            wrench, spare = spare, wrench

    joints = np.arange(n)
    if rotor:
        rotor_acc = qdd_ if motor_qdd is None else _as_samples("motor_qdd", motor_qdd, n)
        _same_samples("motor_qdd", rotor_acc, n_s)
        yt[joints, layout.rotor_columns()] = rotor_acc.T
    if friction:
        speed = qd_ if motor_qd is None else _as_samples("motor_qd", motor_qd, n)
        _same_samples("motor_qd", speed, n_s)
        fc, fv = layout.friction_columns()
        yt[joints, fc] = np.sign(speed).T
        yt[joints, fv] = speed.T
    return np.ascontiguousarray(yt.transpose(2, 0, 1))


def torques(
    robot: RobotDescription,
    q: npt.ArrayLike,
    qd: npt.ArrayLike,
    qdd: npt.ArrayLike,
    *,
    rotor: bool = False,
    friction: bool = False,
    gravity_m_s2: npt.ArrayLike | None = None,
) -> Array:
    """Inverse dynamics with the robot file's parameters: (N, n) joint torques in N·m."""
    layout = ParameterLayout(robot.n_joints, rotor=rotor, friction=friction)
    y = regressor(robot, q, qd, qdd, rotor=rotor, friction=friction, gravity_m_s2=gravity_m_s2)
    return np.einsum("njp,p->nj", y, parameter_vector(robot, layout))
