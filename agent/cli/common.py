"""What the `jha` sub-command modules share: the `--record` plumbing of `jha stiffness
estimate` and `jha identify`, strict JSON on stdout, usage errors, and running one command group
on its own (`python -m agent.cli.<group>`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from agent.errors import EX_USAGE, AgentError, ConfigError

if TYPE_CHECKING:  # imported where used: every `jha` command loads this module at start
    from agent.config.model import Config, ControllerSettings
    from agent.history.records import Estimate

# The installed service's config (systemd/joint-health-agent.service).
DEFAULT_CONFIG = Path("/etc/joint-health-agent/config.yaml")


class UsageError(AgentError):
    """Options that do not go together (exit 64)."""

    exit_code = EX_USAGE


# -- recording -----------------------------------------------------------------------------------


def add_record_options(p: argparse.ArgumentParser) -> None:
    """--record --config FILE --controller NAME on an estimator's command."""
    p.add_argument(
        "--record",
        action="store_true",
        help="record the estimates in <state_dir>/history.sqlite of --config",
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="agent config (with --record)")
    p.add_argument(
        "--controller",
        metavar="NAME",
        help="controller of the config the estimates belong to (with --record)",
    )


def history_path(config: Config) -> Path:
    return Path(config.agent.state_dir) / "history.sqlite"


def controller_of(config: Config, name: str) -> ControllerSettings:
    """The named controller; an unknown name is a ConfigError listing the known ones."""
    for ctrl in config.controllers:
        if ctrl.name == name:
            return ctrl
    known = ", ".join(c.name for c in config.controllers)
    raise ConfigError(f"{config.source}: no controller named {name!r} (controllers: {known})")


def recording_target(
    args: argparse.Namespace, joints: Sequence[str] = ()
) -> tuple[Path, str] | None:
    """(history file, controller) when --record is given, checked before any estimation runs.

    The `joints` about to be recorded must belong to that controller, else the history gains
    phantom joints under it (a UR5e's six recorded under a two-joint cell): every one of them
    when the controller names a robot file (`robot:` or `identification.robot`), at least one
    of its configured joints otherwise (a robot file's other joints are kept as indicator-only
    joints, by design)."""
    if not args.record:
        if args.config is not None or args.controller is not None:
            raise UsageError("--config and --controller only go with --record")
        return None
    if args.config is None or args.controller is None:
        raise UsageError("--record needs --config FILE and --controller NAME")
    from agent.config.load import load_config

    config = load_config(args.config)
    controller = controller_of(config, args.controller)
    problem = _foreign_joints(controller, joints)
    if problem:
        raise UsageError(
            f"--record: {problem}; record under the controller these measurements come from"
        )
    return history_path(config), args.controller


def _foreign_joints(controller: ControllerSettings, joints: Sequence[str]) -> str:
    from agent.models.robot.description import load_robot

    files = {controller.robot} | (
        set() if controller.identification is None else {controller.identification.robot}
    )
    for file in sorted(f for f in files if f):
        own = load_robot(file).joint_names
        unknown = [j for j in joints if j not in own]
        if unknown:
            return (
                f"controller {controller.name}'s robot file {file} has no joint "
                f"{', '.join(unknown)} (its joints: {', '.join(own)})"
            )
    configured = [j.name for j in controller.joints]
    if joints and configured and not set(joints) & set(configured):
        return (
            f"controller {controller.name} has none of the joints {', '.join(joints)} "
            f"(its joints: {', '.join(configured)})"
        )
    return ""


def record_joint_estimates(
    path: Path,
    controller: str,
    kind: str,
    by_joint: Mapping[str, Sequence[Estimate]],
    started_at: datetime,
    skipped: Mapping[str, str] | None = None,
) -> list[int]:
    """One ok cycle per joint with its estimates, and one rejected cycle per skipped joint
    (with the reason); all written at the same finish time. Returns the cycle ids."""
    finished = datetime.now(UTC)
    ids = []
    from agent.history.records import Trigger
    from agent.history.store import HistoryStore

    with HistoryStore(path) as store, store.transaction():
        for joint, estimates in by_joint.items():
            ids.append(
                store.record_cycle(
                    controller=controller,
                    joint=joint,
                    kind=kind,
                    started_at=started_at,
                    finished_at=finished,
                    estimates=estimates,
                    trigger=Trigger.MANUAL,
                )
            )
        for joint, reason in (skipped or {}).items():
            ids.append(
                store.record_rejected(
                    controller=controller,
                    joint=joint,
                    kind=kind,
                    started_at=started_at,
                    finished_at=finished,
                    reason=reason,
                    trigger=Trigger.MANUAL,
                )
            )
    return ids


# -- helpers the jha sub-command modules share ----------------------------------------------------


def print_json(data: Any) -> None:
    """One strict JSON document on stdout: never NaN or Infinity (which most JSON parsers
    refuse). A value that is not a finite number is written as null, and the document's
    top-level `null_reasons` says, per path, what it was."""
    print(strict_json_text(data), end="")


def strict_json_text(data: Any) -> str:
    """`data` as strict JSON text (indented, ending in a newline), as print_json writes it."""
    reasons: dict[str, str] = {}
    clean = finite_or_null(data, "", reasons)
    if reasons and isinstance(clean, dict):
        clean = {**clean, "null_reasons": reasons}
    return json.dumps(clean, indent=2, allow_nan=False) + "\n"


def finite_or_null(value: Any, path: str, reasons: dict[str, str]) -> Any:
    """`value` with every non-finite float replaced by None, each recorded in `reasons`."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        value = value.item()  # a numpy scalar (float32, int64, ...) as its Python number
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        reasons[path or "."] = (
            "not a number (0/0: nothing to estimate it from)"
            if math.isnan(value)
            else f"{'+' if value > 0 else '-'}infinite (divided by zero)"
        )
        return None
    if isinstance(value, dict):
        return {
            k: finite_or_null(v, f"{path}.{k}" if path else str(k), reasons)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [finite_or_null(v, f"{path}[{i}]", reasons) for i, v in enumerate(value)]
    return value


def run_standalone(register: Callable[[Any], None]) -> NoReturn:
    """`python -m agent.cli.<group> ...`: one command group without agent.cli.main, errors as
    exit codes."""
    parser = argparse.ArgumentParser(prog="jha")
    register(parser.add_subparsers(dest="command", required=True))
    ns = parser.parse_args()
    try:
        sys.exit(ns.func(ns))
    except AgentError as exc:
        print(f"jha: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
