"""`jha ...`: the command line's parser, dispatch and exit codes.

Each command family registers its own sub-commands (`register(subparsers)` in
agent.cli.<family>); this module mounts them and maps the errors a command raises to their
sysexits exit codes (agent.errors: 65 bad data, 78 bad config, ...).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from agent import __version__
from agent.cli import (
    analyze,
    config_check,
    control,
    drivers,
    feedrate,
    fleet,
    identify,
    report,
    run,
    simulate,
    stiffness,
)
from agent.errors import EX_DATAERR, AgentError

# In this order in `jha --help`.
_FAMILIES = (
    run,
    config_check,
    analyze,
    simulate,
    drivers,
    feedrate,
    stiffness,
    identify,
    report,
    control,
    fleet,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jha", description="Joint-health agent")
    p.add_argument("--version", action="version", version=f"jha {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    for family in _FAMILIES:
        family.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
