"""`python -m tests.fuzz [--cases N] [--atheris-runs M] [pytest args...]`: every fuzz target.

What `make fuzz` runs: the hypothesis targets with N cases each and the atheris targets
(tests/fuzz/test_atheris.py, one process each) with M inputs each (default N). FUZZ_CASES and
ATHERIS_RUNS reach the targets through the environment; the pytest exit status is the exit
status (so a crash fails the make target). Run from the repository root. Only the atheris
targets, longer: `python -m tests.fuzz --atheris-runs 1000000 -k atheris`.
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
    parser.add_argument(
        "--atheris-runs", type=int, default=None, help="inputs per atheris target (default: N)"
    )
    args, pytest_args = parser.parse_known_args(argv)
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    if args.atheris_runs is not None and args.atheris_runs < 1:
        parser.error("--atheris-runs must be at least 1")
    os.environ["FUZZ_CASES"] = str(args.cases)
    os.environ["ATHERIS_RUNS"] = str(args.atheris_runs or args.cases)
    if args.case_limit_s is not None:
        os.environ["FUZZ_CASE_LIMIT_S"] = str(args.case_limit_s)
        os.environ["ATHERIS_INPUT_LIMIT_S"] = str(args.case_limit_s)
    import pytest  # after FUZZ_CASES is set: the targets read it at import

    here = Path(__file__).resolve().parent
    return int(pytest.main(["-q", "-p", "no:cacheprovider", str(here), *pytest_args]))


if __name__ == "__main__":
    sys.exit(main())
