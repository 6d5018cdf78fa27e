"""`jha ...`: the command line's parser, dispatch and exit codes.

Each command family registers its own sub-commands (`register(subparsers)` in
agent.cli.<family>); this module mounts them and maps the errors a command raises to their
sysexits exit codes (agent.errors: 65 bad data, 78 bad config, ...).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from agent import __version__
from agent.errors import EX_DATAERR, AgentError

# The command families, modules of agent.cli, in this order in `jha --help`.
_FAMILIES = (
    "run",
    "config_check",
    "analyze",
    "simulate",
    "drivers",
    "feedrate",
    "stiffness",
    "identify",
    "calibrate",
    "imports",
    "report",
    "control",
    "fleet",
)
# A service's command that needs its own family only: `jha fleet` starts without importing the
# estimators (numpy and the rest: a third of its start-up time and 15 MB of its memory).
_ALONE = {"fleet": "fleet"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jha", description="Joint-health agent")
    p.add_argument("--version", action="version", version=f"jha {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for family in _FAMILIES if only is None else (only,):
        importlib.import_module(f"agent.cli.{family}").register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_ALONE.get(words[0]) if words else None).parse_args(words)
    try:
        code: int = args.func(args)
        return code
    except AgentError as exc:
        print(f"jha: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ValueError, OSError) as exc:
        print(f"jha: {exc}", file=sys.stderr)
        return EX_DATAERR


if __name__ == "__main__":
    sys.exit(main())
