"""`jha run --config FILE [--once] [--dry-run]`: the agent's daemon (agent.service.daemon)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from agent.errors import EX_CONFIG, EX_OK


def register(subparsers: Any) -> None:
    """Add `run` to the `jha` parser's sub-parsers."""
    run = subparsers.add_parser("run", help="run the agent (daemon)")
    run.add_argument("--config", required=True, type=Path)
    run.add_argument("--once", action="store_true", help="one production stop, then exit")
    run.add_argument(
        "--wait-for-stop",
        type=float,
        default=60.0,
        metavar="S",
        help="with --once: how long to wait for a production stop (default 60)",
    )
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    run.add_argument(
        "--log-format",
        choices=["logfmt", "json"],
        default="logfmt",
        help="stderr lines as logfmt (default) or one JSON object each; under systemd both "
        "carry the journal's priority prefix",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="everything but motion: status read, interlocks checked, cycles logged as dry_run",
    )
    run.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from agent.config.file_findings import file_findings
    from agent.config.load import load_config
    from agent.logfmt import setup_logging
    from agent.sd_notify import Notifier
    from agent.service.daemon import Agent

    config = load_config(args.config)
    # The files the config names, checked as `jha config check` does: a password file others
    # may read stops the start here, not every report later (they would be dropped).
    errors, _ = file_findings(config, args.config)
    if errors:
        for issue in errors:
            print(issue, file=sys.stderr)
        print(f"{args.config}: {len(errors)} error(s): not started", file=sys.stderr)
        return EX_CONFIG
    setup_logging(args.log_level or config.agent.log_level, log_format=args.log_format)
    notifier = Notifier()
    agent = Agent(
        config,
        once=args.once,
        wait_for_stop_s=args.wait_for_stop,
        out=sys.stdout,
        dry_run=args.dry_run,
        notifier=notifier,
        handle_signals=True,
    )
    try:
        return asyncio.run(agent.run())
    except KeyboardInterrupt:
        return EX_OK
    finally:
        notifier.close()
