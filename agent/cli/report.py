"""`jha report [--config FILE] [--html FILE] [--json] [--controller NAME]`: the joint-health
report from the history alone (nothing runs): the terminal table, or JSON on stdout, and the
HTML page written to FILE (the report itself: agent.report.history). With no history, or none
of the chosen controllers in it, it says so and exits 66 (EX_NOINPUT): nothing was judged.

Every joint of a controller seen in `<state_dir>/history.sqlite` appears: joints with backlash
cycles are judged against their configured limits; joints with other indicators only (a robot
file's joints recorded by `jha stiffness estimate --record`) are listed with those indicators
and no status.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.atomic import atomic_write_text
from agent.cli.common import (
    DEFAULT_CONFIG,
    UsageError,
    controller_of,
    history_path,
    print_json,
    run_standalone,
)
from agent.config.load import load_config
from agent.errors import EX_NOINPUT, EX_OK
from agent.history.store import HistoryStore
from agent.report.history import merge_reports, report_from_history


def _cmd_report(args: argparse.Namespace) -> int:
    from agent.report.html.page import render_html
    from agent.report.model import report_to_dict
    from agent.report.table import summary_table

    config = load_config(_config_file(args.config))
    chosen = (
        [controller_of(config, args.controller)] if args.controller else list(config.controllers)
    )
    path = history_path(config)
    created = datetime.now(UTC)
    if not path.exists():
        # A report reads: it never creates the daemon's database (nor its state_dir).
        from agent.report.model import Report

        report = Report(
            created_at_iso=created.isoformat(), machines=tuple(c.name for c in chosen), joints=()
        )
    else:
        with HistoryStore(path) as store:
            report = merge_reports(
                [
                    report_from_history(
                        store,
                        c.name,
                        {j.name: j.thresholds for j in c.joints},
                        created,
                        None if c.identification is None else c.identification.limits,
                    )
                    for c in chosen
                ]
            )
    if not (report.joints or report.indicator_joints):
        # An empty table would read "worst: OK": nothing was judged, and the caller must know.
        names = ", ".join(c.name for c in chosen)
        where = "no history yet" if not path.exists() else "no joint of " + names + " in history"
        print(
            f"jha: {where} at {path}: nothing to report (has the agent run a cycle with this"
            " config's state_dir?)",
            file=sys.stderr,
        )
        if args.json:
            print_json(report_to_dict(report))
        return EX_NOINPUT
    if args.html is not None:
        atomic_write_text(args.html, render_html(report))
    if args.json:
        print_json(report_to_dict(report))
    else:
        print(summary_table(report))
        if args.html is not None:
            print(f"report: {args.html}")
    return EX_OK


def _config_file(given: Path | None) -> Path:
    """--config, else the installed service's config."""
    if given is not None:
        return given
    if DEFAULT_CONFIG.exists():
        return DEFAULT_CONFIG
    raise UsageError(f"no --config FILE given and {DEFAULT_CONFIG} does not exist")


def register(subparsers: Any) -> None:
    """Add `report` to the `jha` parser's sub-parsers."""
    p = subparsers.add_parser("report", help="the joint-health report from the history alone")
    p.add_argument(
        "--config", type=Path, metavar="FILE", help=f"agent config (default: {DEFAULT_CONFIG})"
    )
    p.add_argument("--controller", metavar="NAME", help="only this controller (default: all)")
    p.add_argument("--html", type=Path, metavar="FILE", help="write the HTML report here")
    p.add_argument("--json", action="store_true", help="print the report as JSON (jha.report/1)")
    p.set_defaults(func=_cmd_report)


if __name__ == "__main__":  # pragma: no cover - stand-alone use
    run_standalone(register)
