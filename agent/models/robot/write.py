"""A robot description as a robot file (`config/robots/*.yaml`), for descriptions made by a
program (agent.models.robot.urdf): what load_robot reads back to the same description."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

import yaml

from agent.models.robot.description import RobotDescription


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in fields(value):
            if f.metadata.get("internal"):
                continue
            v = getattr(value, f.name)
            if v is None or (isinstance(v, tuple) and not v):
                continue
            if isinstance(f.default, int | float | str | tuple) and v == f.default:
                continue
            out[f.name] = _plain(v)
        return out
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, float):  # numpy's float64 too
        return float(f"{value:.12g}")  # no 1e-17 noise of a rotation; 12 digits kept
    return value


def robot_yaml(robot: RobotDescription, comment: str = "") -> str:
    head = "".join(f"# {line}\n".replace("# \n", "#\n") for line in comment.splitlines())
    body = yaml.safe_dump(_plain(robot), sort_keys=False, default_flow_style=None, width=100)
    return head + body
