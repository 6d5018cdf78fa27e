"""`make bench`: run every bench/bench_*.py module's main(quick) and print its figures.

python -m bench                 all benchmarks, full length
python -m bench --quick         short versions (a smoke test of the benchmarks themselves)
python -m bench backlash can    only the named ones
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
import traceback
from pathlib import Path


def discover() -> list[str]:
    here = Path(__file__).parent
    return sorted(
        m.name.removeprefix("bench_")
        for m in pkgutil.iter_modules([str(here)])
        if m.name.startswith("bench_")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    p.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {discover()})")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    names = args.names or discover()
    unknown = sorted(set(names) - set(discover()))
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(unknown)}")
    failed = []
    for name in names:
        print(f"\n=== bench {name} {'(quick)' if args.quick else ''}", flush=True)
        started = time.perf_counter()
        try:
            importlib.import_module(f"bench.bench_{name}").main(quick=args.quick)
        except Exception:
            traceback.print_exc()
            failed.append(name)
        print(f"=== {name}: {time.perf_counter() - started:.1f} s", flush=True)
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
