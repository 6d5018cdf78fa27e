"""Coverage-guided fuzzing (atheris, libFuzzer) of the parsers, one subprocess per target.

Each target of tests/fuzz/atheris/run.py runs ATHERIS_RUNS inputs (2,000 in `make test`,
FUZZ_CASES in `make fuzz`) from a fixed libFuzzer seed, so a run is repeatable. The run's own
count (libFuzzer's `stat::number_of_executed_units`) goes to the summary as "atheris: NAME",
with the crash if there was one; the test fails on a crash or on fewer inputs than asked.
The selftest target proves the run does fail when the property breaks or an input hangs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fuzz.atheris.run import MODULES
from tests.support.summary import counted

ROOT = Path(__file__).resolve().parents[2]
SHM = Path("/dev/shm")
RUNS = max(1, int(os.environ.get("ATHERIS_RUNS", os.environ.get("FUZZ_CASES", "2000"))))


@dataclass(frozen=True)
class Run:
    """What one atheris process reported."""

    returncode: int
    runs: int  # inputs executed, as libFuzzer counted them
    edges: int  # coverage edges at the end ("cov:"), what the corpus reached
    crash: str | None  # the exception line of the first crash, if one
    crash_files: tuple[Path, ...]
    output: str


def run_target(name: str, runs: int, work: Path, *more: str) -> Run:
    """`python -m tests.fuzz.atheris.run NAME -runs=N` in a process of its own."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "tests.fuzz.atheris.run",
        name,
        f"-runs={runs}",
        "-seed=1",
        f"--work={work}",
        *more,
    ]
    # The files a target writes per input go to memory, in a directory removed after the run.
    scratch = tempfile.mkdtemp(prefix="jha-atheris-", dir=SHM if SHM.is_dir() else None)
    try:
        # At least 100 inputs a second, or something hangs the way the per-input limit missed.
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60 + runs / 100,
            check=False,
            env={**os.environ, "ATHERIS_SCRATCH": scratch},
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    out = proc.stdout + proc.stderr
    executed = re.search(r"stat::number_of_executed_units:\s*(\d+)", out)
    edges = re.findall(r"\bcov: (\d+)", out)
    crash = None
    if "Uncaught Python exception" in out:
        tail = out.split("Uncaught Python exception", 1)[1].splitlines()
        crash = next((line.strip() for line in tail[1:] if line.strip()), "?")
    return Run(
        returncode=proc.returncode,
        runs=int(executed.group(1)) if executed else 0,
        edges=int(edges[-1]) if edges else 0,
        crash=crash,
        crash_files=tuple(sorted(work.glob("crash-*")) + sorted(work.glob("timeout-*"))),
        output=out,
    )


@pytest.mark.parametrize("name", list(MODULES))
def test_atheris_target(name: str, tmp_path: Path) -> None:
    run = run_target(name, RUNS, tmp_path)
    tally = counted("fuzzing", f"atheris: {name}")
    tally.case(run.runs)
    if run.crash is not None or run.returncode != 0:
        tally.crash(run.crash or f"exit status {run.returncode}")
    if os.environ.get("FUZZ_VERBOSE"):
        print(f"\natheris {name}: {run.runs} runs, {run.edges} coverage edges")
    assert run.crash is None, (
        f"atheris {name} crashed: {run.crash}\ninput kept in {run.crash_files}\n"
        f"{run.output[-3000:]}"
    )
    assert run.returncode == 0, run.output[-3000:]
    assert run.runs >= RUNS, f"atheris {name}: {run.runs} runs, expected {RUNS}"
    assert run.edges > 0, "no coverage feedback: the target's modules were not instrumented"


@pytest.mark.parametrize("seed", [b"raise now", b"hang here"], ids=["exception", "hang"])
def test_atheris_run_reports_a_broken_property(seed: bytes, tmp_path: Path) -> None:
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "bad").write_bytes(seed)
    run = run_target("selftest", 50, tmp_path / "work", str(seeds))
    assert run.returncode != 0
    expected = "ValueError: selftest" if seed.startswith(b"raise") else "Hang: input ran longer"
    assert run.crash is not None and run.crash.startswith(expected), run.output[-2000:]
    assert [p.read_bytes() for p in run.crash_files] == [seed]
