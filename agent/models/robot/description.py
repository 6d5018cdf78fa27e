"""Robot description: a serial chain of revolute joints from a DH table, with link inertias,
rotors, friction, joint stiffness and limits. Loaded from `config/robots/*.yaml`.

Conventions (the regressor and every estimator rely on them):
  * `convention: standard` (Denavit-Hartenberg 1955, Spong/Corke): row i holds a_i, alpha_i,
    d_i, theta_i; frame i sits at the far end of link i and joint i turns about z_{i-1}.
  * `convention: modified` (Craig): row i holds a_{i-1}, alpha_{i-1}, d_i, theta_i; frame i sits
    on joint i and joint i turns about z_i.
  * theta_i = q_i + theta_offset_rad.
  * The inertial data of link i are written in DH frame i: centre of mass, and the inertia
    tensor about the centre of mass (matrix entries, so ixy = -integral(x y dm), as in URDF),
    with axes rotated by `inertia_rpy_rad` (URDF roll-pitch-yaw) from the axes of frame i.
  * Rotor and friction data are per joint: motor-side rotor inertia and gear ratio (the
    link-side rotor inertia is Ia = Jm * G^2); Coulomb and viscous friction are link-side.
  * Closed chains written as serial ones (the IRB 6660 parallelogram, Prod. Eng. 2023, eq. 7):
    the DH angle of a joint may move with other joints, theta_i = q_i + sum(factor * q_j) +
    offset, with q the actuated joint angles (`dh_coupling`). Only agent.models.robot.kinematics
    and the compliance model apply it; the rigid-body regressor sees the serial chain of the DH
    table.
  * `tool` places the tool centre point (TCP) in the last DH frame (the flange).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
Convention = Literal["standard", "modified"]

STANDARD_GRAVITY_M_S2 = 9.80665


@dataclass(frozen=True)
class InertiaTensor:
    """Inertia tensor entries in kg·m² (about the centre of mass unless said otherwise)."""

    xx: float = field(metadata={"ge": 0.0})
    yy: float = field(metadata={"ge": 0.0})
    zz: float = field(metadata={"ge": 0.0})
    xy: float = 0.0
    xz: float = 0.0
    yz: float = 0.0

    def matrix(self) -> Array:
        return np.array(
            [[self.xx, self.xy, self.xz], [self.xy, self.yy, self.yz], [self.xz, self.yz, self.zz]]
        )


@dataclass(frozen=True)
class LinkInertial:
    """Mass properties of one link (with whatever is rigidly fixed to it: stator, covers)."""

    mass_kg: float = field(metadata={"ge": 0.0})
    com_m: tuple[float, float, float] = field(metadata={"doc": "centre of mass in DH frame i"})
    inertia_com_kg_m2: InertiaTensor = field(metadata={"doc": "about the centre of mass"})
    inertia_rpy_rad: tuple[float, float, float] = field(
        default=(0.0, 0.0, 0.0),
        metadata={"doc": "axes of the tensor relative to DH frame i (URDF roll, pitch, yaw)"},
    )

    def check(self) -> list[tuple[str, str]]:
        """Only positive semi-definiteness is required: published "effective" inertias (the
        PUMA 560 set among them) break the triangle inequality of a real body."""
        eig = np.linalg.eigvalsh(self.inertia_com_kg_m2.matrix())
        scale = max(float(np.max(np.abs(eig))), 1e-300)
        found = []
        if eig[0] < -1e-9 * scale:
            found.append(
                (
                    "inertia_com_kg_m2",
                    "expected a positive semi-definite tensor, found principal moments "
                    + ", ".join(f"{v:.6g}" for v in eig),
                )
            )
        if self.mass_kg == 0.0 and any(c != 0.0 for c in self.com_m):
            found.append(("com_m", "a link of mass 0 cannot have its centre of mass off origin"))
        return found


@dataclass(frozen=True)
class JointCoupling:
    """One term of a closed-chain coupling: this joint's DH angle moves `factor` times `joint`."""

    joint: str = field(metadata={"min_len": 1, "doc": "name of the driving joint"})
    factor: float


@dataclass(frozen=True)
class ToolFrame:
    """Pose of the tool centre point in the last DH frame (URDF roll-pitch-yaw)."""

    xyz_m: tuple[float, float, float]
    rpy_rad: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass(frozen=True)
class JointSpec:
    """One revolute joint, the link it moves, its drive and its limits."""

    name: str = field(metadata={"min_len": 1})
    a_m: float
    alpha_rad: float
    d_m: float
    link: LinkInertial
    position_min_rad: float
    position_max_rad: float
    speed_max_rad_s: float = field(metadata={"gt": 0.0})
    accel_max_rad_s2: float = field(metadata={"gt": 0.0})
    torque_max_nm: float = field(metadata={"gt": 0.0})
    theta_offset_rad: float = 0.0
    motor_inertia_kg_m2: float = field(default=0.0, metadata={"ge": 0.0, "doc": "rotor"})
    gear_ratio: float = field(default=1.0, metadata={"gt": 0.0, "doc": "motor turns per link turn"})
    coulomb_nm: float = field(default=0.0, metadata={"ge": 0.0, "doc": "link side"})
    viscous_nm_s_rad: float = field(default=0.0, metadata={"ge": 0.0, "doc": "link side"})
    stiffness_nm_rad: float | None = field(default=None, metadata={"gt": 0.0})
    dh_coupling: tuple[JointCoupling, ...] = field(
        default=(), metadata={"doc": "closed chain: DH angle = q + sum(factor * q_joint)"}
    )
    dh_range_rad: tuple[float, float] | None = field(
        default=None, metadata={"doc": "limits of the coupled angle q + sum(factor * q_joint)"}
    )

    def check(self) -> list[tuple[str, str]]:
        found = []
        if self.position_min_rad >= self.position_max_rad:
            msg = (
                f"expected more than position_min_rad ({self.position_min_rad:g}), "
                f"found {self.position_max_rad:g}"
            )
            found.append(("position_max_rad", msg))
        if self.dh_range_rad is not None and self.dh_range_rad[0] >= self.dh_range_rad[1]:
            lo, hi = self.dh_range_rad
            msg = f"expected [min, max] with min < max, found [{lo:g}, {hi:g}]"
            found.append(("dh_range_rad", msg))
        return found

    @property
    def rotor_inertia_kg_m2(self) -> float:
        """Rotor inertia seen from the link side, Ia = Jm * G^2."""
        return self.motor_inertia_kg_m2 * self.gear_ratio**2


@dataclass(frozen=True)
class RobotDescription:
    """A serial robot with revolute joints; gravity is written in the base frame (frame 0)."""

    name: str = field(metadata={"min_len": 1})
    convention: Convention
    joints: tuple[JointSpec, ...] = field(metadata={"min_len": 1})
    gravity_m_s2: tuple[float, float, float] = (0.0, 0.0, -STANDARD_GRAVITY_M_S2)
    encoder_counts_per_turn: int | None = field(
        default=None, metadata={"gt": 0, "doc": "both encoders of a joint, per turn of its shaft"}
    )
    tool: ToolFrame | None = field(default=None, metadata={"doc": "TCP in the last DH frame"})
    source: str = field(default="<memory>", metadata={"internal": True})

    def check(self) -> list[tuple[str, str]]:
        seen: dict[str, int] = {}
        found = []
        for i, j in enumerate(self.joints):
            if j.name in seen:
                found.append((f"joints[{i}].name", f"duplicate name (see joints[{seen[j.name]}])"))
            seen.setdefault(j.name, i)
        names = [j.name for j in self.joints]
        for i, j in enumerate(self.joints):
            for c, term in enumerate(j.dh_coupling):
                where = f"joints[{i}].dh_coupling[{c}].joint"
                if term.joint == j.name:
                    found.append((where, "a joint cannot be coupled to itself"))
                elif term.joint not in names:
                    found.append((where, f"no joint {term.joint!r}; known: {', '.join(names)}"))
        return found

    @property
    def n_joints(self) -> int:
        return len(self.joints)

    @property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints)

    def with_gravity(self, gravity_m_s2: tuple[float, float, float]) -> RobotDescription:
        """The same robot mounted differently (a tilted base shows up as a tilted gravity)."""
        g = tuple(float(v) for v in gravity_m_s2)
        if len(g) != 3:
            raise ValueError(f"gravity_m_s2 needs 3 components, got {len(g)}")
        return replace(self, gravity_m_s2=(g[0], g[1], g[2]))

    def standard_parameters(self) -> Array:
        """(n_joints, 10) inertial parameters, one row per link, in DH frame i.

        Order: m, m·cx, m·cy, m·cz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz with the inertia taken about
        the origin of frame i (the order pinocchio uses, so its regressor maps one to one).
        """
        return np.array([link_parameters(j.link) for j in self.joints])

    def position_limits_rad(self) -> Array:
        return np.array([[j.position_min_rad, j.position_max_rad] for j in self.joints])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


INERTIAL_NAMES = ("m", "mx", "my", "mz", "xx", "xy", "yy", "xz", "yz", "zz")


def rpy_matrix(rpy: tuple[float, float, float] | Array) -> Array:
    """URDF fixed-axis roll-pitch-yaw: R = Rz(yaw) Ry(pitch) Rx(roll)."""
    r, p, y = (float(v) for v in rpy)
    cr, sr = math.cos(r), math.sin(r)
    cp, sp = math.cos(p), math.sin(p)
    cy, sy = math.cos(y), math.sin(y)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def skew(v: Array) -> Array:
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def link_parameters(link: LinkInertial) -> Array:
    """The 10 standard parameters of a link about its DH frame origin (order: INERTIAL_NAMES)."""
    m = link.mass_kg
    c = np.asarray(link.com_m, dtype=np.float64)
    rot = rpy_matrix(link.inertia_rpy_rad)
    i_com = rot @ link.inertia_com_kg_m2.matrix() @ rot.T
    # Steiner: about the frame origin, I_O = I_C + m S(c)^T S(c)
    i_o = i_com + m * (skew(c).T @ skew(c))
    inertia = [i_o[0, 0], i_o[0, 1], i_o[1, 1], i_o[0, 2], i_o[1, 2], i_o[2, 2]]
    return np.array([m, *(m * c), *inertia])


def load_robot(path: str | Path) -> RobotDescription:
    """Read and validate one robot file; every mistake raises ConfigError naming file:line."""
    from agent.schema import validate as schema

    robot = schema.load(RobotDescription, path)
    return replace(robot, source=str(path))
