"""Peak memory of `jha analyze backlash` against the capture's samples (issue 27's target: the
largest capture the config allows fits in 512 MB).

Each capture comes from `jha simulate backlash` (the joint model integrated, 19-bit encoder,
one count of noise) at the demo joint's 100 rev/s and gear 40 (a load turn is 0.4 s), and each
analysis runs as its own process: its peak RSS (getrusage of that child) is what an edge PC
must give it. The baseline, in the same run, is the default cycle's capture (12 load turns at
500 Hz, 2,401 samples); the table gives each size's peak, its ratio to the baseline and what
each sample above the baseline cost. Captures longer than the fit holds are cut to their first
FIT_MAX_SAMPLES (agent.estimation.backlash.samples): the samples fitted are in the table too.

The target: the largest cycle the config allows (FIT_MAX_SAMPLES, `config check` refuses a longer
backlash cycle) within 512 MB, at 500 Hz and at 10 kHz; the bench fails otherwise. Files of up to
MAX_CAPTURE_SAMPLES (what `jha analyze backlash` accepts) are measured and printed beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent.capture.bounds import MAX_CAPTURE_SAMPLES
from agent.estimation.backlash.samples import FIT_MAX_SAMPLES

TARGET_MB = 512.0
_LOAD_TURN_S = 40.0 / 100.0  # gear ratio / motor rev/s of the simulated joint
_JHA = [sys.executable, "-m", "agent.cli"]


def _measure(args: list[str]) -> tuple[float, float, str]:
    """Peak RSS in MB, wall seconds and stdout of one child process, reaped with wait4 so its
    own usage is read (not all children's)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(args, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {proc.returncode}:\n{err.read()[-2000:]}")
        return usage.ru_maxrss / 1024.0, time.perf_counter() - started, out.read()


def _capture(folder: Path, samples: int, rate_hz: float) -> Path:
    path = folder / f"capture_{samples}_{rate_hz:g}.npz"
    turns = (samples - 1) / rate_hz / _LOAD_TURN_S
    _measure(
        [*_JHA, "simulate", "backlash", "--backlash-rad", "1e-3", "--load-turns", f"{turns!r}",
         "--sample-rate", f"{rate_hz:g}", "-o", str(path)]
    )  # fmt: skip
    return path


def main(quick: bool = False) -> None:
    sizes = [(2_401, 500.0), (25_001, 500.0), (100_001, 500.0)]
    if not quick:
        # The largest cycle the config allows (FIT_MAX_SAMPLES: agent.config.load), at 500 Hz
        # and at 10 kHz, where no motor harmonic aliases onto another and the nuisance basis
        # is widest; then files up to what `jha analyze backlash` accepts.
        sizes += [(FIT_MAX_SAMPLES, 500.0), (FIT_MAX_SAMPLES, 10_000.0)]
        sizes += [(1_000_001, 500.0), (MAX_CAPTURE_SAMPLES, 500.0), (MAX_CAPTURE_SAMPLES, 10_000.0)]
    interpreter_mb, _, _ = _measure([sys.executable, "-c", "import agent.estimation.backlash.fit"])
    print(f"interpreter with numpy, scipy and pycma imported: {interpreter_mb:.0f} MB peak RSS")
    print(
        f"{'samples':>10} {'rate Hz':>8} {'fitted':>8} {'peak MB':>8} {'x base':>7} "
        f"{'kB/sample':>9} {'fit s':>7} {'wall s':>7}  notes"
    )
    base_mb: float | None = None
    worst_largest = worst_file = 0.0
    with tempfile.TemporaryDirectory(prefix="bench_fit_memory.") as tmp:
        for samples, rate_hz in sizes:
            path = _capture(Path(tmp), samples, rate_hz)
            peak_mb, wall_s, out = _measure([*_JHA, "analyze", "backlash", str(path), "--json"])
            path.unlink()
            result = json.loads(out)
            notes = [w for w in result["warnings"] if "fit" in w]
            fitted = _fitted(samples, rate_hz)
            base_mb = peak_mb if base_mb is None else base_mb
            per_sample = (peak_mb - base_mb) * 1024.0 / max(samples - sizes[0][0], 1)
            print(
                f"{samples:>10,} {rate_hz:>8g} {fitted:>8,} {peak_mb:>8.0f} "
                f"{peak_mb / base_mb:>7.2f} {per_sample:>9.3f} {result['fit_seconds']:>7.1f} "
                f"{wall_s:>7.1f}  {'; '.join(notes)}",
                flush=True,
            )
            if samples == FIT_MAX_SAMPLES:
                worst_largest = max(worst_largest, peak_mb)
            if samples == MAX_CAPTURE_SAMPLES:
                worst_file = max(worst_file, peak_mb)
    if quick:
        return
    verdict = "within" if worst_largest <= TARGET_MB else "OVER"
    print(
        f"largest capture the config allows ({FIT_MAX_SAMPLES:,} samples): {worst_largest:.0f} MB "
        f"peak, {verdict} the {TARGET_MB:.0f} MB target; a file of {MAX_CAPTURE_SAMPLES:,} "
        f"samples given to `jha analyze backlash`: {worst_file:.0f} MB"
    )
    if worst_largest > TARGET_MB:
        raise RuntimeError(f"peak RSS {worst_largest:.0f} MB > {TARGET_MB:.0f} MB")


def _fitted(samples: int, rate_hz: float) -> int:
    from agent.estimation.backlash.samples import plan_fit_samples

    return plan_fit_samples(samples, rate_hz).fitted
