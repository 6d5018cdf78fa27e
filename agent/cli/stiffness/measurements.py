"""The measurement files of `jha stiffness`: CSV with unit-carrying column names
(tcp_columns, dual_encoder_columns); `#` lines are comments. Errors name file:line and column."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.atomic import atomic_write_text
from agent.errors import CaptureError, EstimationError, unreadable
from agent.models.robot.compliance import ComplianceModel
from agent.models.robot.compliance_measurements import (
    DualEncoderMeasurements,
    TcpMeasurements,
    encoder_sigma_rad,
)

Array = npt.NDArray[np.float64]


def tcp_columns(n_joints: int) -> tuple[str, ...]:
    """Columns of a TCP measurement CSV (sigma_m optional): SI units in the names."""
    q = tuple(f"q{i + 1}_rad" for i in range(n_joints))
    return (*q, "fx_n", "fy_n", "fz_n", "dx_m", "dy_m", "dz_m")


def dual_encoder_columns(n_joints: int) -> tuple[str, ...]:
    """Link angle and motor angle / gear ratio of every joint."""
    q = tuple(f"q{i + 1}_rad" for i in range(n_joints))
    motor = tuple(f"motor{i + 1}_rad" for i in range(n_joints))
    return (*q, *motor)


def _read_csv(path: Path, required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Array]:
    """Columns by header name; '#' lines are comments. Errors name file:line and column."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise unreadable(str(path), exc) from None
    rows = [(n, t.strip()) for n, t in enumerate(lines, 1) if t.strip() and not t.startswith("#")]
    if not rows:
        raise CaptureError(str(path), "empty file: expected a header row and measurements")
    head_line, head = rows[0]
    names = [c.strip() for c in head.split(",")]
    missing = [c for c in required if c not in names]
    if missing:
        raise CaptureError(
            f"{path}:{head_line}",
            f"header lacks {', '.join(missing)} (expected {', '.join(required)})",
        )
    unknown = [c for c in names if c not in required and c not in optional]
    if unknown:
        raise CaptureError(f"{path}:{head_line}", f"unknown columns {', '.join(unknown)}")
    if len(rows) == 1:
        raise CaptureError(f"{path}:{head_line}", "no measurements after the header")
    data = np.empty((len(rows) - 1, len(names)))
    for r, (line, text) in enumerate(rows[1:]):
        cells = text.split(",")
        if len(cells) != len(names):
            raise CaptureError(f"{path}:{line}", f"{len(cells)} values, header has {len(names)}")
        for c, cell in enumerate(cells):
            try:
                data[r, c] = float(cell)
            except ValueError:
                raise CaptureError(
                    f"{path}:{line}",
                    f"column {names[c]}: expected a number, found {cell.strip()!r}",
                ) from None
            if not math.isfinite(data[r, c]):
                raise CaptureError(f"{path}:{line}", f"column {names[c]}: not finite")
    return {name: data[:, c] for c, name in enumerate(names)}


def load_tcp_measurements(
    path: str | Path, n_joints: int, sigma_m: float = 1e-6
) -> TcpMeasurements:
    """A TCP measurement CSV (tcp_columns); sigma_m, when the file has no column, per axis."""
    p = Path(path)
    cols = _read_csv(p, tcp_columns(n_joints), ("sigma_m",))
    q = np.stack([cols[f"q{i + 1}_rad"] for i in range(n_joints)], axis=1)
    f = np.stack([cols[c] for c in ("fx_n", "fy_n", "fz_n")], axis=1)
    d = np.stack([cols[c] for c in ("dx_m", "dy_m", "dz_m")], axis=1)
    sig = cols.get("sigma_m", np.full(len(q), sigma_m))
    if np.any(sig <= 0):
        raise CaptureError(str(p), "sigma_m must be > 0")
    return TcpMeasurements(q, f, d, np.repeat(sig[:, None], 3, axis=1), str(p))


def save_tcp_measurements(data: TcpMeasurements, path: str | Path) -> None:
    n = data.q_rad.shape[1]
    header = ",".join((*tcp_columns(n), "sigma_m"))
    rows = np.concatenate([data.q_rad, data.force_n, data.deviation_m, data.sigma_m[:, :1]], axis=1)
    body = "\n".join(",".join(repr(float(v)) for v in row) for row in rows)
    atomic_write_text(path, f"{header}\n{body}\n")


def load_dual_encoder_measurements(
    path: str | Path, model: ComplianceModel, noise_counts: float = 0.5
) -> DualEncoderMeasurements:
    """A dual-encoder CSV (dual_encoder_columns); the noise follows from the robot's encoder
    resolution and `noise_counts`."""
    p = Path(path)
    n = model.n_joints
    robot = model.robot
    if robot.encoder_counts_per_turn is None:
        raise EstimationError(f"{robot.source}: no encoder_counts_per_turn")
    cols = _read_csv(p, dual_encoder_columns(n), ())
    gear = [j.gear_ratio for j in robot.joints]
    return DualEncoderMeasurements(
        q_link_rad=np.stack([cols[f"q{i + 1}_rad"] for i in range(n)], axis=1),
        q_motor_link_rad=np.stack([cols[f"motor{i + 1}_rad"] for i in range(n)], axis=1),
        sigma_rad=encoder_sigma_rad(robot.encoder_counts_per_turn, gear, noise_counts),
        source=str(p),
    )


def save_dual_encoder_measurements(data: DualEncoderMeasurements, path: str | Path) -> None:
    n = data.q_link_rad.shape[1]
    rows = np.concatenate([data.q_link_rad, data.q_motor_link_rad], axis=1)
    body = "\n".join(",".join(repr(float(v)) for v in row) for row in rows)
    atomic_write_text(path, ",".join(dual_encoder_columns(n)) + f"\n{body}\n")
