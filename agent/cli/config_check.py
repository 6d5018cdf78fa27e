"""`jha config check FILE`: validate a config file and name every interlock rule that is off;
starts nothing. Exit 78 (EX_CONFIG) with every mistake listed, else 0 (warnings on stderr)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agent.errors import EX_CONFIG, EX_OK


def register(subparsers: Any) -> None:
    """Add `config check` to the `jha` parser's sub-parsers."""
    cfg = subparsers.add_parser("config", help="configuration tools").add_subparsers(
        dest="config_command", required=True
    )
    check = cfg.add_parser("check", help="validate a config file; starts nothing")
    check.add_argument("file", type=Path)
    check.set_defaults(func=_cmd_config_check)


def _cmd_config_check(args: argparse.Namespace) -> int:
    from agent.config.load import config_issues, load_config
    from agent.config.warnings import interlock_warnings

    issues = config_issues(args.file)
    if issues:
        for issue in issues:
            print(issue, file=sys.stderr)
        print(f"{args.file}: {len(issues)} error(s)", file=sys.stderr)
        return EX_CONFIG
    # Valid, so still exit 0; but every interlock rule that is off is said, on stderr.
    warnings = interlock_warnings(load_config(args.file), args.file)
    for warning in warnings:
        print(warning, file=sys.stderr)
    if warnings:
        print(f"{args.file}: {len(warnings)} warning(s)", file=sys.stderr)
    print(f"{args.file}: OK")
    return EX_OK
