"""What the compliance model of Prod. Eng. 2023 leaves out, and measurements simulated with it:
links that tilt, a geometry off its DH table, a laser frame and a force sensor that are not the
robot's (the paper assumes rigid links, a calibrated geometry and sensors in the base frame).

For a measurement at pose q under the force F that the force sensor reads:
  * force sensor scale: the sensor reads (1 + s) times the force applied;
  * geometry: the deviation is that of a robot whose DH lengths (a, d, tool offset) and angles
    (alpha, theta offset) differ from the file's by small errors, at the same q;
  * link compliance: link i bends about x and y of its body frame (perpendicular to joint i's
    axis) by c (e x r) . F, moving the TCP by that times e x r (r to the TCP from the middle
    of the link): a deflection linear in the force that no joint stiffness reproduces;
  * laser frame: the lasers read the deviation in a frame turned by a small angle from the base.
Then the sensor noise of eq. 8. `simulate_tcp_mismatch` applies them exactly (the perturbed
kinematics, the exact rotation); the estimator that allows for them
(agent.estimation.stiffness.tcp_errors) uses first-order forms, and tilts at both ends of each
link (`tilt_columns`), which span any bending of a straight link.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from agent.models.robot.compliance import ComplianceModel, compliance_model, tcp_deviation
from agent.models.robot.compliance_measurements import TcpMeasurements
from agent.models.robot.description import RobotDescription, ToolFrame
from agent.models.robot.kinematics import Chain, body_frames, forward

Array = npt.NDArray[np.float64]

GEOMETRY_FIELDS = ("a_m", "alpha_rad", "d_m", "theta_offset_rad")


def geometry_names(robot: RobotDescription) -> tuple[str, ...]:
    """The geometric parameters an error can sit in: 4 per joint, then the tool offset."""
    per_joint = [f"{j.name}.{f}" for j in robot.joints for f in GEOMETRY_FIELDS]
    return (*per_joint, "tool.x_m", "tool.y_m", "tool.z_m")


def geometry_is_length(robot: RobotDescription) -> npt.NDArray[np.bool_]:
    """Which of `geometry_names` are lengths (the others are angles)."""
    return np.array([name.endswith("_m") for name in geometry_names(robot)])


def with_geometry_errors(robot: RobotDescription, delta: npt.ArrayLike) -> RobotDescription:
    """The robot with `delta` (in the order of `geometry_names`) added to its geometry."""
    d = np.asarray(delta, dtype=np.float64)
    n = robot.n_joints
    if d.shape != (4 * n + 3,):
        raise ValueError(f"delta must have {4 * n + 3} values, got shape {d.shape}")
    rows = d[: 4 * n].reshape(n, 4)
    joints = tuple(
        replace(
            j,
            a_m=j.a_m + float(r[0]),
            alpha_rad=j.alpha_rad + float(r[1]),
            d_m=j.d_m + float(r[2]),
            theta_offset_rad=j.theta_offset_rad + float(r[3]),
        )
        for j, r in zip(robot.joints, rows, strict=True)
    )
    tool = robot.tool or ToolFrame((0.0, 0.0, 0.0))
    xyz = np.asarray(tool.xyz_m) + d[4 * n :]
    moved = ToolFrame((float(xyz[0]), float(xyz[1]), float(xyz[2])), tool.rpy_rad)
    return replace(robot, joints=joints, tool=moved)


def tilt_columns(chain: Chain, q: npt.ArrayLike, force_n: Array) -> Array:
    """(B, 3, 4n): TCP deflection per unit tilt compliance (rad/(N·m)) of each link about x and
    y of its body frame, through the link's first end (its joint), then through its second
    (the next joint, the flange for the last): (e x r)(e x r)^T F, r from that end to the
    TCP. Columns 4i..4i+3 are link i's (x first, y first, x second, y second).

    A rotation about a point of the segment between the ends is a weighted sum of the two,
    and so is any bending spread along a straight link: two ends span every bending of it
    about those axes."""
    qa = np.atleast_2d(np.asarray(q, dtype=np.float64))
    frames = body_frames(chain, qa)
    pose = forward(chain, qa)
    starts = frames[:, :, :3, 3]
    ends = np.concatenate([starts[:, 1:], pose.flange_pos[:, None, :]], axis=1)
    cols = []
    for point in (starts, ends):
        r = pose.tcp_pos[:, None, :] - point
        for axis in (0, 1):
            lever = np.cross(frames[:, :, :3, axis], r)  # (B, n, 3)
            cols.append(lever * np.einsum("bnj,bj->bn", lever, force_n)[..., None])
    out = np.stack(cols, axis=2)  # (B, n, 4, 3)
    return np.asarray(out.reshape(out.shape[0], -1, 3).swapaxes(1, 2))


@dataclass(frozen=True)
class TcpMismatch:
    """How far a simulated experiment is from the compliance model; all zero: the paper's."""

    link_tilt_ratio: float = 0.0  # mean tilt compliance of a link / its joint's nominal 1 / k
    length_sd_m: float = 0.0  # DH a, d and each tool offset component
    angle_sd_rad: float = 0.0  # DH alpha and theta offset
    laser_rotation_sd_rad: float = 0.0  # about each axis of the base frame
    force_scale_sd: float = 0.0  # relative

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")


# A cell like the paper's, as far as it is plausible (stated beside every figure using it):
# links and bearings tilting with 0.06 of their joint's torsional compliance (with the IRB
# 6660's levers about 10 % more TCP deflection: the gears dominate, as the paper says); a
# geometry known to 0.5 mm and 0.05 deg (after the producer's calibration, the tool offset
# measured); lasers set up by hand, their frame within ~0.3 deg (5 mrad) of the base frame;
# a force sensor within 1 % of its scale.
REALISTIC_TCP_MISMATCH = TcpMismatch(
    link_tilt_ratio=0.06,
    length_sd_m=5e-4,
    angle_sd_rad=float(np.radians(0.05)),
    laser_rotation_sd_rad=5e-3,
    force_scale_sd=0.01,
)


@dataclass(frozen=True)
class MismatchDraw:
    """One experiment's errors, drawn from a TcpMismatch."""

    robot: ComplianceModel  # the true geometry
    tilt_rad_nm: Array  # (n, 2) tilt compliance of each link about x and y of its body frame
    laser_rotation: Array  # (3, 3) base frame -> laser frame
    force_scale: float  # sensor reading / applied force


def draw_mismatch(
    model: ComplianceModel, mismatch: TcpMismatch, rng: np.random.Generator
) -> MismatchDraw:
    """The errors of one experiment (one robot, one set-up): Gaussian geometry, laser angles
    and force scale; each link's two tilt compliances exponential with their mean."""
    n = model.n_joints
    # relative to the robot file's k: a link's stiffness has nothing to do with how far its
    # joint's has drifted
    k = model.nominal_stiffness()
    is_len = geometry_is_length(model.robot)
    sd = np.where(is_len, mismatch.length_sd_m, mismatch.angle_sd_rad)
    robot = with_geometry_errors(model.robot, rng.normal(0.0, 1.0, sd.size) * sd)
    # exponential: >= 0 as a compliance must be, its sd equal to its mean
    tilt = mismatch.link_tilt_ratio * rng.exponential(1.0, (n, 2)) / k[:, None]
    omega = rng.normal(0.0, mismatch.laser_rotation_sd_rad, 3)
    scale = 1.0 + float(rng.normal(0.0, mismatch.force_scale_sd))
    true_model = compliance_model(robot, with_gravity=model.with_gravity)
    return MismatchDraw(true_model, tilt, rotation(omega), scale)


def rotation(omega: npt.ArrayLike) -> Array:
    """Rodrigues: the rotation by |omega| rad about omega."""
    w = np.asarray(omega, dtype=np.float64)
    angle = float(np.linalg.norm(w))
    if angle == 0.0:
        return np.eye(3)
    u = w / angle
    ux = np.array([[0.0, -u[2], u[1]], [u[2], 0.0, -u[0]], [-u[1], u[0], 0.0]])
    return np.asarray(np.eye(3) + np.sin(angle) * ux + (1 - np.cos(angle)) * ux @ ux)


def _tilt_deflection(draw: MismatchDraw, q: Array, force_n: Array) -> Array:
    """(B, 3) TCP deflection from every link bending about x and y of its body frame through
    its middle (where a beam loaded at its end turns, to first order): half a tilt through
    each end of the link."""
    half = 0.5 * np.repeat(draw.tilt_rad_nm[:, None, :], 2, axis=1)  # (n, 2 ends, 2 axes)
    return np.asarray(tilt_columns(draw.robot.chain, q, force_n) @ half.ravel())


def mismatched_deviation(
    q: npt.ArrayLike, force_n: npt.ArrayLike, k_true: npt.ArrayLike, draw: MismatchDraw
) -> Array:
    """(B, 3) noise-free deviation the lasers read under the force the sensor reads as F."""
    qa = np.atleast_2d(np.asarray(q, dtype=np.float64))
    read = np.broadcast_to(np.asarray(force_n, dtype=np.float64), (qa.shape[0], 3))
    applied = np.array(read / draw.force_scale)
    dev = tcp_deviation(draw.robot, qa, applied, k_true) + _tilt_deflection(draw, qa, applied)
    return np.asarray(dev @ draw.laser_rotation.T)


def simulate_tcp_mismatch(
    q: npt.ArrayLike,
    force_n: npt.ArrayLike,
    k_true: npt.ArrayLike,
    sigma_m: float,
    draw: MismatchDraw,
    rng: np.random.Generator,
) -> TcpMeasurements:
    """The lasers' readings on the robot of `draw`, plus sensor noise; the record holds the
    nominal q and the force sensor's reading, as a real record would."""
    qa = np.atleast_2d(np.asarray(q, dtype=np.float64))
    read = np.broadcast_to(np.asarray(force_n, dtype=np.float64), (qa.shape[0], 3)).copy()
    dev = mismatched_deviation(qa, read, k_true, draw)
    noisy = dev + rng.normal(0.0, sigma_m, dev.shape)
    return TcpMeasurements(qa, read, noisy, np.full(dev.shape, sigma_m), "<simulated, mismatch>")


def unmodelled_share(
    model: ComplianceModel,
    q: npt.ArrayLike,
    force_n: npt.ArrayLike,
    k_true: npt.ArrayLike,
    draw: MismatchDraw,
) -> float:
    """RMS of (mismatched - modelled) deviation over the RMS modelled one, noise-free."""
    qa = np.atleast_2d(np.asarray(q, dtype=np.float64))
    f = np.broadcast_to(np.asarray(force_n, dtype=np.float64), (qa.shape[0], 3)).copy()
    nominal = tcp_deviation(model, qa, f, k_true)
    real = mismatched_deviation(qa, f, k_true, draw)
    return float(np.sqrt(np.mean((real - nominal) ** 2) / np.mean(nominal**2)))
