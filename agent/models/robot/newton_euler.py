"""Rigid-body inverse dynamics of a serial robot by recursive Newton-Euler, batched over samples.

The link side of agent.models.robot.elastic's model: joint torques, the mass matrix and the
Coriolis + gravity bias, with no rotor or friction terms.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from agent.models.robot.description import RobotDescription, link_parameters
from agent.models.robot.regressor import ChainGeometry, chain_geometry

Array = npt.NDArray[np.float64]


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
