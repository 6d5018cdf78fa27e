"""What the `jha stiffness` commands share: their common options, and the robot model, prior
and files those options name."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import CaptureError, unreadable
from agent.models.robot.compliance import ComplianceModel, Payload, compliance_model, with_payload
from agent.models.robot.description import load_robot

if TYPE_CHECKING:  # the estimators load scipy: imported by the commands, not by `jha --help`
    from agent.estimation.stiffness.inference import StiffnessPrior


def add_common_options(p: argparse.ArgumentParser, *, json_out: bool = True) -> None:
    """--robot, the prior and the payload (and --json) of every stiffness command."""
    p.add_argument("--robot", type=Path, required=True, help="robot file (config/robots)")
    p.add_argument(
        "--prior-rel-std",
        type=float,
        default=0.5,
        metavar="R",
        help="prior sd of k as a fraction of the robot file's value (0.5)",
    )
    p.add_argument("--payload-kg", type=float, help="payload on the flange (dual encoder)")
    p.add_argument(
        "--payload-com",
        type=float,
        nargs=3,
        metavar=("X", "Y", "Z"),
        help="payload centre of mass in the last DH frame, m",
    )
    if json_out:
        p.add_argument("--json", action="store_true")


def add_method_options(p: argparse.ArgumentParser) -> None:
    """--method and its noise options, for `design` and `estimate`."""
    p.add_argument("--method", choices=["tcp", "dual-encoder"], default="tcp")
    p.add_argument(
        "--joints",
        nargs="+",
        metavar="NAME",
        help="dual encoder: the joints to estimate (default all)",
    )
    p.add_argument(
        "--noise-um", type=float, default=1.0, help="laser sensor sd in um (Prod. Eng. 2023: 1)"
    )
    p.add_argument(
        "--noise-counts",
        type=float,
        default=0.5,
        help="dual encoder: count noise sd of each encoder",
    )


def model_of(args: argparse.Namespace) -> ComplianceModel:
    """The compliance model of --robot, with the --payload-kg at --payload-com."""
    robot = load_robot(args.robot)
    mass = getattr(args, "payload_kg", None)
    if mass:
        com = args.payload_com or (0.0, 0.0, 0.0)
        robot = with_payload(robot, Payload(mass, (com[0], com[1], com[2])))
    return compliance_model(robot)


def prior_of(model: ComplianceModel, args: argparse.Namespace) -> StiffnessPrior:
    """The robot file's stiffness with --prior-rel-std as the prior."""
    from agent.estimation.stiffness.inference import prior_from_robot

    return prior_from_robot(model, args.prior_rel_std)


def joints_of(args: argparse.Namespace) -> tuple[str, ...] | None:
    return tuple(args.joints) if getattr(args, "joints", None) else None


def read_json(path: Path) -> dict[str, Any]:
    """A design or estimate file: one JSON object; errors name the file (and line)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise unreadable(str(path), exc) from None
    except json.JSONDecodeError as exc:
        raise CaptureError(f"{path}:{exc.lineno}", f"invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise CaptureError(str(path), "expected a JSON object")
    return data
