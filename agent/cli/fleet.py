"""`jha fleet [--config FILE]`: the plant-wide service (agent.fleet); `jha fleet check --config
FILE` validates its settings and secret files and starts nothing: exit 0, or 78 with every
mistake as `file:line: field: expected ..., found ...`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agent.errors import EX_CONFIG, EX_OK, EX_UNAVAILABLE


def register(subparsers: Any) -> None:
    """Add `fleet` and `fleet check` to the `jha` parser's sub-parsers."""
    from agent.fleet.settings import DEFAULT_FLEET_CONFIG

    fleet = subparsers.add_parser(
        "fleet", help="the plant-wide service: MQTT ingest -> PostgreSQL -> maintenance plan"
    )
    fleet.add_argument("--config", type=Path, default=DEFAULT_FLEET_CONFIG)
    fleet.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")
    fleet.add_argument("--log-format", choices=["logfmt", "json"], default="logfmt")
    fleet.set_defaults(func=_cmd_fleet)
    sub = fleet.add_subparsers(dest="fleet_command")
    check = sub.add_parser("check", help="validate the fleet settings; starts nothing")
    check.add_argument("--config", type=Path, default=DEFAULT_FLEET_CONFIG)
    check.set_defaults(func=_cmd_check)


def _cmd_check(args: argparse.Namespace) -> int:
    from agent.fleet.settings import fleet_issues, fleet_notes

    settings, issues = fleet_issues(args.config)
    if issues or settings is None:
        for issue in issues:
            print(issue, file=sys.stderr)
        print(f"{args.config}: {len(issues)} error(s)", file=sys.stderr)
        return EX_CONFIG
    for note in fleet_notes(args.config, settings):
        print(note, file=sys.stderr)
    print(f"{args.config}: OK")
    return EX_OK


def _cmd_fleet(args: argparse.Namespace) -> int:
    from agent.fleet.settings import load_fleet_settings
    from agent.logfmt import setup_logging

    setup_logging(args.log_level, log_format=args.log_format)
    settings = load_fleet_settings(args.config)
    try:
        from agent.fleet.service import run
    except ModuleNotFoundError as exc:
        if exc.name != "psycopg":
            raise
        print(
            "jha: jha fleet needs psycopg: pip install 'joint-health-agent[fleet]'",
            file=sys.stderr,
        )
        return EX_UNAVAILABLE
    return run(settings)
