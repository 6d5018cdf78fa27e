"""The drive-gain calibration file that `jha calibrate drive-gains` writes and a driver reads
(drivers.ur_rtde: `drive_gains_file`, in place of `torque_constants_nm_a`).

    # comment: how it was made
    robot: ur5e
    calibrated_at: 2026-12-03T17:20:00+00:00
    payload: {mass_kg: 5.0, com_m: [...], ...}
    joints:                       # per joint, in the robot's order
      - {joint: shoulder_pan, torque_constant_nm_a: 0.081, gain_nm_a: 8.2, std_nm_a: ...,
         interval_95: [...], reason: null}
    torque_constants_nm_a: [0.081, ...]   # motor shaft, N·m per A; null: not judged

A joint the calibration could not judge is null, with its reason: a driver refuses to use the
file rather than guess that joint's gain.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from agent.atomic import atomic_write_text
from agent.errors import ConfigError


def write_drive_gains(result_dict: dict[str, Any], path: str | Path, comment: str) -> None:
    joints = result_dict["joints"]
    doc = {
        "robot": result_dict["robot"],
        "calibrated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "payload": result_dict["payload"],
        "samples": result_dict["samples"],
        "joints": joints,
        "torque_constants_nm_a": [j["torque_constant_nm_a"] for j in joints],
    }
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    atomic_write_text(path, head + yaml.safe_dump(doc, sort_keys=False, width=100))


def read_torque_constants(path: str | Path, n_joints: int) -> tuple[float, ...]:
    """The motor-shaft torque constants of every joint; ConfigError naming the file and what is
    wrong (not there, not such a file, a joint not judged and why)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: expected a drive-gain calibration file: {exc}") from None
    values = doc.get("torque_constants_nm_a") if isinstance(doc, dict) else None
    if not isinstance(values, list) or len(values) != n_joints:
        raise ConfigError(
            f"{path}: expected torque_constants_nm_a with {n_joints} values "
            "(jha calibrate drive-gains writes it)"
        )
    joints = doc.get("joints") if isinstance(doc.get("joints"), list) else []
    for i, v in enumerate(values):
        if v is None or isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            entry = joints[i] if i < len(joints) and isinstance(joints[i], dict) else {}
            name = entry.get("joint", f"joint {i + 1}")
            why = entry.get("reason") or f"found {v!r}, expected a number > 0"
            raise ConfigError(f"{path}: no drive gain for {name}: {why}")
    return tuple(float(v) for v in values)
