"""Forward kinematics and the TCP position Jacobian of a robot file, batched over poses.

Built on the body frames of agent.models.robot.regressor.chain_geometry (one DH implementation for
the whole project): B_i = B_{i-1} * (placement_rot[i], placement_pos[i]) * Rz(q~_i), where
B_i's z axis is the axis of joint i. The flange is B_n for the modified convention and
B_n * (Rx(alpha_n), [a_n, 0, d_n]) for the standard one; the TCP is the flange times the
robot file's `tool` frame.

q are the actuated joint angles. Closed chains written as serial ones (the IRB 6660
parallelogram, Prod. Eng. 2023, eq. 7) turn them into the DH joint variables q~ = C q
(`coupling_matrix`); by virtual work the actuated torques are C^T times the DH ones and the
Jacobian with respect to q is the DH one times C.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.models.robot.description import RobotDescription, rpy_matrix
from agent.models.robot.regressor import ChainGeometry, chain_geometry, torques

Array = npt.NDArray[np.float64]


def coupling_matrix(robot: RobotDescription) -> Array:
    """C with q~ = C q: identity plus each joint's `dh_coupling` terms."""
    names = robot.joint_names
    c = np.eye(robot.n_joints)
    for i, joint in enumerate(robot.joints):
        for term in joint.dh_coupling:
            c[i, names.index(term.joint)] += term.factor
    return c


@dataclass(frozen=True)
class Chain:
    """What forward kinematics needs from a robot file, computed once."""

    robot: RobotDescription
    geometry: ChainGeometry
    coupling: Array  # (n, n), q~ = C q
    placement: Array  # (n, 4, 4) body frame i-1 to body frame i before Rz(q~_i)
    tip: Array  # (4, 4) last body frame to the TCP (flange, then tool)
    flange: Array  # (4, 4) last body frame to the flange
    identity_coupling: bool
    mass: Array  # (n,) link masses
    com_body: Array  # (n, 3) link centres of mass in the body frames

    @property
    def n_joints(self) -> int:
        return self.robot.n_joints


def _homogeneous(rot: Array, pos: Array) -> Array:
    t = np.eye(4)
    t[:3, :3] = rot
    t[:3, 3] = pos
    return t


def make_chain(robot: RobotDescription) -> Chain:
    geo = chain_geometry(robot)
    last = robot.joints[-1]
    if robot.convention == "standard":
        c, s = np.cos(last.alpha_rad), np.sin(last.alpha_rad)
        flange_rot = np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])
        flange = _homogeneous(flange_rot, np.array([last.a_m, 0.0, last.d_m]))
    else:
        flange = np.eye(4)
    tool = robot.tool
    tool_t = (
        np.eye(4)
        if tool is None
        else _homogeneous(rpy_matrix(tool.rpy_rad), np.asarray(tool.xyz_m, dtype=np.float64))
    )
    placement = np.stack(
        [_homogeneous(r, p) for r, p in zip(geo.placement_rot, geo.placement_pos, strict=True)]
    )
    coupling = coupling_matrix(robot)
    # centres of mass are given in DH frame i: that is body frame i for the modified
    # convention; for the standard one body frame i sees it at (Rx(alpha_i), [a_i, 0, d_i])
    com_body = np.array([j.link.com_m for j in robot.joints], dtype=np.float64)
    if robot.convention == "standard":
        for i, j in enumerate(robot.joints):
            c, s = np.cos(j.alpha_rad), np.sin(j.alpha_rad)
            rx = np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])
            com_body[i] = rx @ com_body[i] + np.array([j.a_m, 0.0, j.d_m])
    return Chain(
        robot,
        geo,
        coupling,
        placement,
        flange @ tool_t,
        flange,
        bool(np.array_equal(coupling, np.eye(robot.n_joints))),
        np.array([j.link.mass_kg for j in robot.joints], dtype=np.float64),
        com_body,
    )


@dataclass(frozen=True)
class ChainPose:
    """Joint axes and the TCP of a batch of poses, in the base frame."""

    axis_dir: Array  # (B, n, 3) unit vector of joint i's axis
    axis_point: Array  # (B, n, 3) a point on joint i's axis (origin of body frame i)
    flange_pos: Array  # (B, 3)
    tcp_pos: Array  # (B, 3)
    tcp_rot: Array  # (B, 3, 3) columns: TCP frame axes; column 2 is the tool axis


def as_poses(q: npt.ArrayLike, n: int, name: str = "q") -> Array:
    a = np.asarray(q, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != n:
        raise ValueError(f"{name} must have shape (B, {n}) or ({n},), got {np.shape(q)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds values that are not finite")
    return a


def _frames(chain: Chain, qa: Array) -> Array:
    """(B, n, 4, 4) body frames T_i = T_{i-1} P_i Rz(q~_i)."""
    n = chain.n_joints
    qt = qa if chain.identity_coupling else qa @ chain.coupling.T
    c, s = np.cos(qt), np.sin(qt)
    p = chain.placement  # (n, 4, 4)
    # P Rz(t): columns 0 and 1 of P turn by t, columns 2 and 3 stay
    step = np.empty((*qt.shape, 4, 4))
    step[..., :, 0] = p[None, :, :, 0] * c[..., None] + p[None, :, :, 1] * s[..., None]
    step[..., :, 1] = p[None, :, :, 1] * c[..., None] - p[None, :, :, 0] * s[..., None]
    step[..., :, 2:] = p[None, :, :, 2:]
    frames = np.empty_like(step)
    frames[:, 0] = step[:, 0]
    for i in range(1, n):
        np.matmul(frames[:, i - 1], step[:, i], out=frames[:, i])
    return frames


def body_frames(chain: Chain, q: npt.ArrayLike) -> Array:
    """(B, n, 4, 4) body frames of the actuated angles q: z is joint i's axis, x and y turn
    with link i (the compliance errors tilt links about them)."""
    return _frames(chain, as_poses(q, chain.n_joints))


def forward(chain: Chain, q: npt.ArrayLike) -> ChainPose:
    """Forward kinematics of the actuated angles q, (B, n) or (n,).

    Body frame i is T_i = T_{i-1} P_i Rz(q~_i); its z axis and origin are those of joint i
    (Rz(q~_i) moves neither). All P_i Rz(q~_i) are built at once, then chained.
    """
    frames = _frames(chain, as_poses(q, chain.n_joints))
    tcp = frames[:, -1] @ chain.tip
    flange = frames[:, -1] @ chain.flange
    return ChainPose(
        axis_dir=frames[:, :, :3, 2],
        axis_point=frames[:, :, :3, 3],
        flange_pos=flange[:, :3, 3],
        tcp_pos=tcp[:, :3, 3],
        tcp_rot=tcp[:, :3, :3],
    )


def position_jacobian(chain: Chain, pose: ChainPose) -> Array:
    """(B, 3, n): d(TCP position)/dq for the actuated angles, columns z_i x (p - o_i) times C."""
    z = pose.axis_dir
    r = pose.tcp_pos[:, None, :] - pose.axis_point
    j_dh = np.empty((z.shape[0], 3, z.shape[1]))
    j_dh[:, 0] = z[..., 1] * r[..., 2] - z[..., 2] * r[..., 1]
    j_dh[:, 1] = z[..., 2] * r[..., 0] - z[..., 0] * r[..., 2]
    j_dh[:, 2] = z[..., 0] * r[..., 1] - z[..., 1] * r[..., 0]
    if chain.identity_coupling:
        return j_dh
    return j_dh @ chain.coupling


def gravity_torques(chain: Chain, q: npt.ArrayLike) -> Array:
    """(B, n) actuated joint torques that hold the robot still against gravity.

    From the link centres of mass placed by `forward`: the DH joint i holds
    -z_i . sum_{j >= i} (c_j - o_i) x m_j g, and the actuated torques are C^T times those
    (virtual work). The experiment design evaluates this for thousands of poses per step,
    where the general rigid-body regressor (agent.models.robot.regressor.torques, which gives the
    same numbers, see tests/models/test_compliance.py) is an order of magnitude slower.
    """
    qa = as_poses(q, chain.n_joints)
    frames = _frames(chain, qa)
    com = np.einsum("bnij,nj->bni", frames[:, :, :3, :3], chain.com_body) + frames[:, :, :3, 3]
    moment = chain.mass[None, :, None] * com
    # suffix sums over the links beyond each joint
    first = np.cumsum(moment[:, ::-1], axis=1)[:, ::-1]
    mass_beyond = np.cumsum(chain.mass[::-1])[::-1]
    lever = first - mass_beyond[None, :, None] * frames[:, :, :3, 3]
    g = np.asarray(chain.robot.gravity_m_s2, dtype=np.float64)
    tau_dh = -np.einsum("bni,bni->bn", frames[:, :, :3, 2], np.cross(lever, g))
    if chain.identity_coupling:
        return np.asarray(tau_dh)
    return np.asarray(tau_dh @ chain.coupling)


def gravity_torques_regressor(robot: RobotDescription, q: npt.ArrayLike, coupling: Array) -> Array:
    """The same torques from the rigid-body regressor at q~ = C q (reference for tests)."""
    qa = as_poses(q, robot.n_joints)
    qt = qa @ coupling.T
    zero = np.zeros_like(qt)
    return np.asarray(torques(robot, qt, zero, zero) @ coupling)
