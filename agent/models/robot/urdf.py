"""A robot description (modified DH, agent.models.robot.description) from a URDF file: the
serial chain of revolute joints from a base link, each link's inertial moved into its DH frame.

Robots arrive as URDF (vendors' ROS packages, identification toolboxes); the estimators need a
DH table. The DH frames are derived from the joint axes at q = 0 (Craig's convention: frame i
on joint i's axis, x_i along the common normal to the next axis), so that the DH angle of
joint i is the URDF angle plus a constant offset, turning the same way. URDF links rigidly
attached by fixed joints are merged into their parent (mass, centre of mass and inertia).
Checked in tests by comparing both chains' frames and gravity torques at random poses.

Not in a URDF, so left at neutral values the caller may replace: rotor inertia 0, gear ratio 1,
the acceleration limit (10x the speed limit per second). `<dynamics friction damping>` become
the Coulomb and viscous friction when they are >= 0 (identification toolboxes write signed
offsets there: a negative value is kept out, and said in `notes`).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.errors import ConfigError
from agent.models.robot.description import (
    STANDARD_GRAVITY_M_S2,
    InertiaTensor,
    JointSpec,
    LinkInertial,
    RobotDescription,
    rpy_matrix,
)

Array = npt.NDArray[np.float64]
_PARALLEL = 1e-9  # |u_i x u_j| below this: parallel axes


@dataclass(frozen=True)
class UrdfJoint:
    name: str
    kind: str
    parent: str
    child: str
    origin: Array  # 4x4, child frame in the parent's at q = 0
    axis: Array  # unit, in the child frame
    lower: float
    upper: float
    velocity: float
    effort: float
    friction: float
    damping: float


@dataclass(frozen=True)
class UrdfInertial:
    mass: float
    com: Array  # in the link frame
    inertia: Array  # 3x3 about the centre of mass, link-frame axes


@dataclass(frozen=True)
class UrdfRobot:
    description: RobotDescription
    base_link: str
    joints: tuple[UrdfJoint, ...]  # the revolute joints, base to tip
    notes: tuple[str, ...]


def _floats(text: str | None, n: int, where: str) -> Array:
    try:
        values = [float(v) for v in (text or " ".join(["0"] * n)).split()]
    except ValueError:
        raise ConfigError(f"{where}: expected {n} numbers, found {text!r}") from None
    if len(values) != n:
        raise ConfigError(f"{where}: expected {n} numbers, found {text!r}")
    return np.array(values)


def _pose(element: ET.Element | None, where: str) -> Array:
    t = np.eye(4)
    if element is not None:
        t[:3, :3] = rpy_matrix(_floats(element.get("rpy"), 3, f"{where} origin rpy"))
        t[:3, 3] = _floats(element.get("xyz"), 3, f"{where} origin xyz")
    return t


def _inertial(link: ET.Element) -> UrdfInertial:
    node = link.find("inertial")
    name = link.get("name", "?")
    if node is None:
        return UrdfInertial(0.0, np.zeros(3), np.zeros((3, 3)))
    origin = _pose(node.find("origin"), f"link {name} inertial")
    mass_node, inertia_node = node.find("mass"), node.find("inertia")
    if mass_node is None or inertia_node is None:
        raise ConfigError(f"link {name}: expected <mass> and <inertia> in <inertial>")
    mass = float(mass_node.get("value", "nan"))
    k = {
        key: float(inertia_node.get(key, "0")) for key in ("ixx", "iyy", "izz", "ixy", "ixz", "iyz")
    }
    tensor = np.array(
        [
            [k["ixx"], k["ixy"], k["ixz"]],
            [k["ixy"], k["iyy"], k["iyz"]],
            [k["ixz"], k["iyz"], k["izz"]],
        ]
    )
    rot = origin[:3, :3]
    return UrdfInertial(mass, origin[:3, 3], rot @ tensor @ rot.T)


def _joint(node: ET.Element) -> UrdfJoint:
    name = node.get("name", "?")
    parent, child = node.find("parent"), node.find("child")
    if parent is None or child is None:
        raise ConfigError(f"joint {name}: expected <parent> and <child>")
    axis_node = node.find("axis")  # an Element without children is falsy: compared to None
    axis = _floats("1 0 0" if axis_node is None else axis_node.get("xyz"), 3, f"joint {name} axis")
    norm = float(np.linalg.norm(axis))
    if norm == 0.0:
        raise ConfigError(f"joint {name}: axis of zero length")
    limit = node.find("limit")
    dyn = node.find("dynamics")

    def attr(el: ET.Element | None, key: str, default: float) -> float:
        return float(el.get(key, default)) if el is not None else default

    return UrdfJoint(
        name,
        node.get("type", ""),
        parent.get("link", ""),
        child.get("link", ""),
        _pose(node.find("origin"), f"joint {name}"),
        axis / norm,
        attr(limit, "lower", -math.pi),
        attr(limit, "upper", math.pi),
        attr(limit, "velocity", 1.0),
        attr(limit, "effort", 1.0),
        attr(dyn, "friction", 0.0),
        attr(dyn, "damping", 0.0),
    )


def _merge(a: UrdfInertial, b: UrdfInertial, pose: Array) -> UrdfInertial:
    """`a` plus `b` (given in a frame at `pose` in a's frame), in a's frame."""
    rot, shift = pose[:3, :3], pose[:3, 3]
    b_com = rot @ b.com + shift
    b_inertia = rot @ b.inertia @ rot.T
    mass = a.mass + b.mass
    if mass == 0.0:
        return a
    com = (a.mass * a.com + b.mass * b_com) / mass

    def about(inertia: Array, m: float, c: Array) -> Array:
        d = c - com
        return inertia + m * (float(d @ d) * np.eye(3) - np.outer(d, d))

    return UrdfInertial(
        mass, com, about(a.inertia, a.mass, a.com) + about(b_inertia, b.mass, b_com)
    )


def read_urdf(path: str | Path, base_link: str, name: str | None = None) -> UrdfRobot:
    """The serial chain of revolute joints from `base_link` to the tip, as a RobotDescription
    in modified DH; gravity along the base link's -z."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ConfigError(f"{path}: expected a URDF file: {exc}") from None
    links = {link.get("name", ""): link for link in root.findall("link")}
    if base_link not in links:
        raise ConfigError(f"{path}: no link {base_link!r}; links: {', '.join(sorted(links))}")
    by_parent: dict[str, list[UrdfJoint]] = {}
    for node in root.findall("joint"):
        j = _joint(node)
        by_parent.setdefault(j.parent, []).append(j)
    chain: list[UrdfJoint] = []
    inertials: list[UrdfInertial] = []  # of each revolute joint's child, fixed children merged
    notes: list[str] = []
    link, to_moving = base_link, np.eye(4)  # pose of `link` in the current moving body's frame
    while by_parent.get(link):
        children = by_parent[link]
        if len(children) > 1:
            raise ConfigError(
                f"{path}: link {link} has {len(children)} child joints: expected a serial chain"
            )
        j = children[0]
        if j.kind in ("revolute", "continuous"):
            chain.append(j)
            inertials.append(_inertial(links[j.child]))
            to_moving = np.eye(4)
        elif j.kind == "fixed":
            to_moving = to_moving @ j.origin
            if chain:
                inertials[-1] = _merge(inertials[-1], _inertial(links[j.child]), to_moving)
        else:
            raise ConfigError(f"{path}: joint {j.name} is {j.kind!r}: expected revolute or fixed")
        link = j.child
    if not chain:
        raise ConfigError(f"{path}: no revolute joint below {base_link}")
    axes = _axes_at_zero(chain)
    frames = _dh_frames(axes)
    specs = []
    for i, j in enumerate(chain):
        a, alpha, d, offset = _modified_dh(frames, i)
        # The URDF child frame of joint i and DH frame i move with the same body.
        to_dh = np.linalg.inv(frames[i + 1]) @ axes[i].pose
        inertial = inertials[i]
        rot = to_dh[:3, :3]
        com = rot @ inertial.com + to_dh[:3, 3]
        t = rot @ inertial.inertia @ rot.T
        moments = np.linalg.eigvalsh(t)
        if moments[0] < -1e-9 * max(float(np.max(np.abs(moments))), 1e-300):
            notes.append(
                f"{j.name} (link {j.child}): inertia tensor not positive semi-definite "
                "(principal moments "
                + ", ".join(f"{m:.4g}" for m in moments)
                + "): published identified values can be; a robot file refuses them"
            )
        if j.friction < 0 or j.damping < 0:
            notes.append(
                f"{j.name}: friction {j.friction:g}, damping {j.damping:g} in the URDF: a "
                "negative value is not a friction coefficient, left at 0"
            )
        specs.append(
            JointSpec(
                name=j.name,
                a_m=a,
                alpha_rad=alpha,
                d_m=d,
                theta_offset_rad=offset,
                link=LinkInertial(
                    inertial.mass,
                    (float(com[0]), float(com[1]), float(com[2])),
                    InertiaTensor(t[0, 0], t[1, 1], t[2, 2], t[0, 1], t[0, 2], t[1, 2]),
                ),
                position_min_rad=j.lower,
                position_max_rad=j.upper,
                speed_max_rad_s=j.velocity,
                accel_max_rad_s2=10.0 * j.velocity,
                torque_max_nm=j.effort,
                coulomb_nm=max(j.friction, 0.0),
                viscous_nm_s_rad=max(j.damping, 0.0),
            )
        )
    robot = RobotDescription(
        name=name or root.get("name") or Path(path).stem,
        convention="modified",
        joints=tuple(specs),
        gravity_m_s2=(0.0, 0.0, -STANDARD_GRAVITY_M_S2),
        source=str(path),
    )
    return UrdfRobot(robot, base_link, tuple(chain), tuple(notes))


@dataclass(frozen=True)
class _Axis:
    pose: Array  # 4x4: the joint's child frame in the base link's frame at q = 0
    point: Array
    direction: Array


def _axes_at_zero(chain: list[UrdfJoint]) -> list[_Axis]:
    out, pose = [], np.eye(4)
    for j in chain:
        pose = pose @ j.origin
        out.append(_Axis(pose.copy(), pose[:3, 3].copy(), pose[:3, :3] @ j.axis))
    return out


def _dh_frames(axes: list[_Axis]) -> list[Array]:
    """Frames 0..n (4x4 in the base link's frame): frame 0 the base link's own (joint 1's axis
    must be its z axis, through its origin), frame i on axis i with z_i along it and x_i along
    the common normal to axis i+1."""
    first = axes[0]
    if not np.allclose(first.direction, [0, 0, 1], atol=1e-9) or not np.allclose(
        first.point[:2], 0.0, atol=1e-9
    ):
        raise ConfigError(
            f"the first joint's axis must be the base link's z axis through its origin, found "
            f"direction {first.direction.round(6).tolist()} through {first.point.round(6).tolist()}"
        )
    frames = [np.eye(4)]
    n = len(axes)
    for i in range(n):
        z = axes[i].direction
        p = axes[i].point
        prev = frames[-1]
        if i + 1 < n:
            x, origin = _common_normal(p, z, axes[i + 1].point, axes[i + 1].direction, prev)
        else:  # the last frame: on its axis, x as the previous one's where possible
            origin = p
            x = prev[:3, 0] - (prev[:3, 0] @ z) * z
            if np.linalg.norm(x) < 1e-9:
                x = prev[:3, 1] - (prev[:3, 1] @ z) * z
            x = x / np.linalg.norm(x)
        frame = np.eye(4)
        frame[:3, 0], frame[:3, 2] = x, z
        frame[:3, 1] = np.cross(z, x)
        frame[:3, 3] = origin
        frames.append(frame)
    return frames


def _common_normal(p1: Array, z1: Array, p2: Array, z2: Array, prev: Array) -> tuple[Array, Array]:
    """x along the common normal from axis 1 to axis 2, and its foot on axis 1."""
    cross = np.cross(z1, z2)
    if np.linalg.norm(cross) > _PARALLEL:
        x = cross / np.linalg.norm(cross)
        # Foot on axis 1 of the common normal: solve p1 + s z1 + t x = p2 + r z2.
        m = np.column_stack([z1, x, -z2])
        s, t, _ = np.linalg.solve(m, p2 - p1)
        if t < 0:  # point x from axis 1 towards axis 2
            x = -x
        return x, p1 + s * z1
    # Parallel: the normal through the previous frame's origin, or x kept when they coincide.
    foot = p1 + ((prev[:3, 3] - p1) @ z1) * z1
    gap = p2 - foot
    gap = gap - (gap @ z1) * z1
    if np.linalg.norm(gap) > 1e-9:
        return gap / np.linalg.norm(gap), foot
    x = prev[:3, 0] - (prev[:3, 0] @ z1) * z1
    return x / np.linalg.norm(x), foot


def _modified_dh(frames: list[Array], i: int) -> tuple[float, float, float, float]:
    """(a_{i-1}, alpha_{i-1}, d_i, theta offset_i) from frame i to frame i+1 in `frames`."""
    prev, cur = frames[i], frames[i + 1]
    x0, z0, o0 = prev[:3, 0], prev[:3, 2], prev[:3, 3]
    x1, z1, o1 = cur[:3, 0], cur[:3, 2], cur[:3, 3]
    a = float((o1 - o0) @ x0)
    alpha = math.atan2(float(np.cross(z0, z1) @ x0), float(z0 @ z1))
    d = float((o1 - (o0 + a * x0)) @ z1)
    offset = math.atan2(float(np.cross(x0, x1) @ z1), float(x0 @ x1))
    return a, alpha, d, offset
