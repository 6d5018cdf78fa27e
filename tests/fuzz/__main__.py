"""`python -m tests.fuzz [--cases N] [pytest args...]`: every fuzz target with N cases each.

What `make fuzz` runs. FUZZ_CASES reaches the targets through the environment; the pytest exit
status is the exit status (so a crash fails the make target). Run from the repository root.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=100_000, help="cases per target")
    parser.add_argument(
        "--case-limit-s", type=float, default=None, help="seconds before a case counts as a hang"
    )
    args, pytest_args = parser.parse_known_args(argv)
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    os.environ["FUZZ_CASES"] = str(args.cases)
    if args.case_limit_s is not None:
        os.environ["FUZZ_CASE_LIMIT_S"] = str(args.case_limit_s)
    import pytest  # after FUZZ_CASES is set: the targets read it at import

    here = Path(__file__).resolve().parent
    return int(pytest.main(["-q", "-p", "no:cacheprovider", str(here), *pytest_args]))


if __name__ == "__main__":
    sys.exit(main())
