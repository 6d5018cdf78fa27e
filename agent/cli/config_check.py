"""`jha config check FILE`: validate a config file and name every interlock rule that is off;
starts nothing. Exit 78 (EX_CONFIG) with every mistake listed, else 0 (warnings on stderr).
A robot description (config/robots/) or a CNC machine file (config/machines/) is recognised by
its top-level keys and checked by its own loader instead.

Beyond the file itself it checks the MQTT password file the way the publisher does when the
daemon starts (agent.config.mqtt.read_password_text), so a file others may read fails here and
not at the next restart. The password read is dropped at once and never printed. A driver's
settings may check the files they name (`check_files(base_dir)`, e.g. the GRBL driver's machine
file and whether its dialect takes a DNC drip feed); each finding is put at the setting's line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import EX_CONFIG, EX_OK

if TYPE_CHECKING:
    from agent.schema.yaml_lines import ConfigIssue


def register(subparsers: Any) -> None:
    """Add `config check` to the `jha` parser's sub-parsers."""
    cfg = subparsers.add_parser("config", help="configuration tools").add_subparsers(
        dest="config_command", required=True
    )
    check = cfg.add_parser("check", help="validate a config file; starts nothing")
    check.add_argument("file", type=Path)
    check.set_defaults(func=_cmd_config_check)


def file_kind(path: Path) -> str:
    """ "agent", "robot" or "machine", from the file's top-level keys (agent when unsure: its
    check then says what an agent config needs)."""
    from agent.errors import ConfigError
    from agent.schema.yaml_lines import load_yaml

    try:
        root = load_yaml(path)
    except ConfigError:
        return "agent"  # unreadable or not YAML: the agent check reports it at its line
    if root.kind != "mapping":
        return "agent"
    keys = {k.value for k, _ in root.entries if isinstance(k.value, str)}
    if "controllers" in keys or "agent" in keys:
        return "agent"
    if "axes" in keys or "dialect" in keys:
        return "machine"
    if "joints" in keys and ("convention" in keys or "encoder_counts_per_turn" in keys):
        return "robot"
    return "agent"


def _check_other_kind(kind: str, path: Path) -> int:
    """A robot description or a CNC machine file: validated by its own loader."""
    from agent.errors import ConfigError

    try:
        if kind == "robot":
            from agent.models.robot.description import load_robot

            load_robot(path)
        else:
            from agent.feedrate.machine import load_machine

            load_machine(path)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        print(f"{path}: {kind} file: error(s) above", file=sys.stderr)
        return EX_CONFIG
    print(f"{path}: OK ({kind} file)")
    return EX_OK


def _cmd_config_check(args: argparse.Namespace) -> int:
    from agent.config.file_findings import file_findings
    from agent.config.load import config_issues, load_config
    from agent.config.warnings import interlock_warnings

    kind = file_kind(args.file)
    if kind != "agent":
        return _check_other_kind(kind, args.file)
    issues = config_issues(args.file)
    notes: list[ConfigIssue] = []
    if not issues:
        issues, notes = file_findings(load_config(args.file), args.file)
    if issues:
        for issue in issues:
            print(issue, file=sys.stderr)
        print(f"{args.file}: {len(issues)} error(s)", file=sys.stderr)
        return EX_CONFIG
    # Valid, so still exit 0; but every interlock rule that is off is said, on stderr.
    warnings = sorted(
        [*interlock_warnings(load_config(args.file), args.file), *notes], key=lambda w: w.line
    )
    for warning in warnings:
        print(warning, file=sys.stderr)
    if warnings:
        print(f"{args.file}: {len(warnings)} warning(s)", file=sys.stderr)
    print(f"{args.file}: OK")
    return EX_OK
