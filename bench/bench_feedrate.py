"""The online feedrate filter: throughput, per-line latency, memory, and the circular test.

1. Throughput and latency on a 1,000,000-line program (100,000 with --quick), generated on the
   fly in chunks of 10,000 lines so that the program takes no memory and its generation is
   not timed: 3D raster finishing (scanlines of 0.1 mm steps over a wavy surface, 0.5 mm
   stepover, X reversing at every scanline end) with a contour every 20 scanlines (a circle
   of 720 chords: four reversals). About 0.3 % of the lines carry a reversal of X or Y, the
   axes with backlash; Z reverses on the surface too but has no backlash in this machine.
   Each line is fed to the filter on its own and timed; throughput is lines over the time of
   the loops that feed them (timing included). Baselines in the same run, on the same lines:
   (a) the plain G-code pipeline, full parser (agent.feedrate.gcode.parser) and pass-through
   emitter; (a') the same with the filter's parser front end (agent.feedrate.filter.fast);
   (b) the filter on a machine whose axes have no backlash (everything but the windows).
   Both wall-clock and CPU time are shown: this machine is shared, and a process that waits
   for a core sees its wall-clock figures inflated by the others' load.
   Acceptance: >= 50,000 lines/s, p99 <= 100 us per line, memory flat (RSS after 1,000,000
   lines within a few MB of RSS after 100,000; lines held back bounded by the lookahead).
2. Circular test (ISO 230-4 style, radius 250 mm: the osculating circle of Farouki & Swett
   2022) on the simulated fake with the section 4.2 axes (dead-zone model on both axes), several
   feeds:
   maximum and RMS radial error without and with modulation, and the cycle-time penalty.
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.feedrate.circular_test import circle_program, circular_test, lead_mm
from agent.feedrate.executor import execute_program
from agent.feedrate.filter.fast import FastModalState
from agent.feedrate.filter.program import filter_lines
from agent.feedrate.filter.toolpath_filter import FeedrateFilter
from agent.feedrate.gcode.emit import GcodeEmitter
from agent.feedrate.gcode.parser import ModalState
from agent.feedrate.machine import (
    LookaheadSettings,
    MachineSettings,
    ModulationSettings,
    load_machine,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config" / "machines" / "farouki2022.yaml"
TARGET_LINES_S = 50_000
TARGET_P99_US = 100.0


def bench_machine() -> MachineSettings:
    """The paper's axes on X and Y, GRBL output, G94 feeds, t* up to 50 ms, eps 2 um."""
    m = load_machine(EXAMPLE)
    return replace(
        m,
        name="bench",
        dialect="grbl",
        inverse_time=False,
        eps_m=2e-6,
        modulation=ModulationSettings(policy="fixed", half_window_s=0.05),
        lookahead=LookaheadSettings(lines=1000, seconds=5.0),
    )


def program(n_lines: int) -> Iterator[str]:
    """Raster finishing with a contour every 20 scanlines (see the module docstring)."""
    yield "G21 G90 G94\n"
    yield "G0 X0 Y0 Z5\n"
    yield "G1 Z0 F600\n"
    yield "G1 F1500\n"
    n, row = 4, 0
    while True:
        y = 0.5 * row
        xs = range(0, 501) if row % 2 == 0 else range(500, -1, -1)
        for i in xs:
            x = 0.1 * i
            z = 0.8 * math.sin(x / 3.0) * math.cos(y / 4.0)
            yield f"G1 X{x:.3f} Y{y:.3f} Z{z:.4f}\n"
            n += 1
            if n >= n_lines:
                return
        row += 1
        if row % 20 == 0:
            cx, cy = 25.0, y + 30.0
            for k in range(721):
                a = 2.0 * math.pi * k / 720
                yield f"G1 X{cx + 20 * math.cos(a):.3f} Y{cy + 20 * math.sin(a):.3f} Z0\n"
                n += 1
                if n >= n_lines:
                    return


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Histogram:
    """Per-line times in 0.1 us bins up to 5 ms (and the rare longer ones kept as they are):
    constant memory, so it does not hide or fake the filter's own memory growth."""

    BIN_NS = 100
    BINS = 50_000

    def __init__(self) -> None:
        self.counts = [0] * (self.BINS + 1)
        self.long: list[int] = []
        self.n = 0

    def add(self, ns: int) -> None:
        self.n += 1
        k = ns // self.BIN_NS
        if k < self.BINS:
            self.counts[k] += 1
        else:
            self.long.append(ns)

    def percentile_us(self, q: float) -> float:
        rank = min(self.n - 1, int(q * self.n))
        seen = 0
        for k, c in enumerate(self.counts[: self.BINS]):
            seen += c
            if seen > rank:
                return (k + 0.5) * self.BIN_NS / 1e3
        return sorted(self.long)[rank - seen] / 1e3


CHUNK_LINES = 10_000
CPU_SAMPLE_EVERY = 8  # per-line CPU time (a system call pair, ~1.6 us) on every 8th line


def chunks(n_lines: int) -> Iterator[list[str]]:
    """The program in lists of CHUNK_LINES lines: generating a line (~1 us of sin, cos and
    formatting) is no part of the filter, so it happens outside the timed loops, and memory
    stays bounded all the same."""
    batch: list[str] = []
    for line in program(n_lines):
        batch.append(line)
        if len(batch) == CHUNK_LINES:
            yield batch
            batch = []
    if batch:
        yield batch


def run_baseline(n_lines: int, *, fast: bool) -> tuple[float, float]:
    """Parse + pass-through emit, no filtering: (lines/s wall, lines/s CPU). `fast`: the
    filter's own parser front end (agent.feedrate.filter.fast), else the full parser."""
    state = FastModalState() if fast else ModalState()
    em = GcodeEmitter("grbl")
    sink, n, wall, cpu = 0, 0, 0.0, 0.0
    for batch in chunks(n_lines):
        w0, c0 = time.perf_counter(), time.process_time()
        for line in batch:
            n += 1
            sink += len(em.passthrough(state.apply(line, n)))
        wall += time.perf_counter() - w0
        cpu += time.process_time() - c0
    return n_lines / wall, n_lines / cpu


def run_filter(n_lines: int, machine: MachineSettings, *, sample_every: int = 0) -> dict[str, Any]:
    """Every line fed on its own and timed (wall clock); every CPU_SAMPLE_EVERY-th line also
    on the thread's CPU clock, which the other users of a shared machine do not inflate."""
    filt = FeedrateFilter(machine)
    sample_every = sample_every or max(1, n_lines // 10)
    wall, cpu = Histogram(), Histogram()
    rss: list[tuple[int, float]] = []
    out_bytes, n, wall_s, cpu_s = 0, 0, 0.0, 0.0
    pc, tc = time.perf_counter_ns, time.thread_time_ns
    feed = filt.feed
    gc.collect()
    for batch in chunks(n_lines):
        w0, c0 = time.perf_counter(), time.process_time()
        for line in batch:
            n += 1
            if n % CPU_SAMPLE_EVERY:
                a = pc()
                chunks_out = feed(line)
                wall.add(pc() - a)
            else:
                a, b = pc(), tc()
                chunks_out = feed(line)
                b2, a2 = tc(), pc()
                wall.add(a2 - a)
                cpu.add(b2 - b)
            for c in chunks_out:
                out_bytes += len(c)
        wall_s += time.perf_counter() - w0
        cpu_s += time.process_time() - c0
        if n % sample_every < CHUNK_LINES:
            rss.append((n, rss_mb()))
    w0, c0 = time.perf_counter(), time.process_time()
    for c in filt.finish():
        out_bytes += len(c)
    wall_s += time.perf_counter() - w0
    cpu_s += time.process_time() - c0
    stats = filt.stats
    first = rss[0][1] if rss else rss_mb()
    last = rss[-1][1] if rss else rss_mb()
    return {
        "lines": n_lines,
        "wall_lines_s": n_lines / wall_s,
        "cpu_lines_s": n_lines / cpu_s,
        "wall_us_per_line": wall_s / n_lines * 1e6,
        "cpu_us_per_line": cpu_s / n_lines * 1e6,
        "wall_p50_us": wall.percentile_us(0.5),
        "wall_p99_us": wall.percentile_us(0.99),
        "wall_p999_us": wall.percentile_us(0.999),
        "cpu_p50_us": cpu.percentile_us(0.5),
        "cpu_p99_us": cpu.percentile_us(0.99),
        "cpu_p999_us": cpu.percentile_us(0.999),
        "lines_out": stats.lines_out,
        "out_mb": out_bytes / 2**20,
        "turning_points": stats.turning_points,
        "modulated": stats.modulated,
        "too_short": stats.too_short,
        "max_pending_lines": stats.max_pending_lines,
        "rss_first_mb": first,
        "rss_last_mb": last,
        "rss_growth_mb": last - first,
        "rss_samples": rss,
        "added_time_s": stats.added_time_s,
    }


def throughput(quick: bool) -> dict[str, Any]:
    n = 100_000 if quick else 1_000_000
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; program lines "
        f"generated in chunks of {CHUNK_LINES:,} outside the timed loops"
    )
    full_wall, full_cpu = run_baseline(n, fast=False)
    print(
        f"baseline (a) full parser + pass-through: {full_wall:9,.0f} lines/s wall, "
        f"{full_cpu:9,.0f} lines/s CPU"
    )
    base_wall, base_cpu = run_baseline(n, fast=True)
    print(
        f"baseline (a') fast parser + pass-through: {base_wall:9,.0f} lines/s wall, "
        f"{base_cpu:9,.0f} lines/s CPU"
    )
    m = bench_machine()
    no_backlash = replace(
        m, axes={k: replace(v, backlash_motor_rad=0.0) for k, v in m.axes.items()}
    )
    b = run_filter(n, no_backlash)
    print(
        f"baseline (b) filter, nothing to modulate: {b['wall_lines_s']:9,.0f} lines/s wall, "
        f"{b['cpu_lines_s']:9,.0f} lines/s CPU"
    )
    r = run_filter(n, m)
    print(
        f"filter ({n:,} lines, {r['modulated']} windows of {r['turning_points']} reversals, "
        f"{r['lines_out']:,} lines / {r['out_mb']:.1f} MB out, +{r['added_time_s']:.1f} s):"
    )
    for clock in ("wall", "cpu"):
        rate = r[f"{clock}_lines_s"]
        p99 = r[f"{clock}_p99_us"]
        ok = rate >= TARGET_LINES_S and p99 <= TARGET_P99_US
        sampled = f" (every {CPU_SAMPLE_EVERY}th line)" if clock == "cpu" else ""
        print(
            f"  {clock:4s}: {rate:9,.0f} lines/s, per line p50 {r[f'{clock}_p50_us']:.1f} us, "
            f"p99 {p99:.1f} us, p99.9 {r[f'{clock}_p999_us']:.1f} us{sampled}  "
            f"[{'PASS' if ok else 'FAIL'}: >= {TARGET_LINES_S:,} lines/s, p99 <= "
            f"{TARGET_P99_US:g} us]"
        )
    print(
        f"  cost against the baselines (CPU time per line): x{base_cpu / r['cpu_lines_s']:.2f}"
        f" of (a'), x{full_cpu / r['cpu_lines_s']:.2f} of (a), "
        f"x{b['cpu_lines_s'] / r['cpu_lines_s']:.2f} of (b)"
    )
    flat = abs(r["rss_growth_mb"]) < 2.0 and r["max_pending_lines"] <= 1002
    samples = ", ".join(f"{mb:.1f}" for _, mb in r["rss_samples"])
    print(
        f"  memory: RSS every {n // 10:,} lines (MB): {samples}; growth after the first "
        f"{r['rss_growth_mb']:+.2f} MB; at most {r['max_pending_lines']} lines held back "
        f"[{'PASS' if flat else 'FAIL'}: flat]"
    )
    return r


def circular(quick: bool) -> None:
    feeds = [7854.0] if quick else [3000.0, 5000.0, 7854.0]
    radius = 250.0
    base_m = load_machine(EXAMPLE)
    policies = {
        "fixed t*=0.5 s": replace(
            base_m, modulation=replace(base_m.modulation, policy="fixed", half_window_s=0.5)
        )
    }
    if not quick:
        policies["shortest t*"] = replace(
            base_m, modulation=replace(base_m.modulation, policy="shortest", half_window_s=0.5)
        )
    print(
        f"\ncircular test, radius {radius:g} mm, section 4.2 axes (dead-zone model), "
        "ratio 0.25, n = 10:"
    )
    print(
        f"{'feed mm/min':>11s} {'policy':>15s} {'max err um':>16s} {'RMS um':>14s} "
        f"{'G um':>14s} {'cycle s':>15s} {'penalty':>8s}"
    )
    for feed in feeds:
        prog = circle_program(radius, feed)
        base = execute_program(prog)
        eb = circular_test(base, (0.0, 0.0), radius, skip_mm=lead_mm(radius))
        for name, m in policies.items():
            out = "".join(filter_lines(prog, m))
            mod = execute_program(out.splitlines(keepends=True))
            em = circular_test(mod, (0.0, 0.0), radius, skip_mm=lead_mm(radius))
            print(
                f"{feed:11.0f} {name:>15s} {eb.max_abs_m * 1e6:7.1f} ->{em.max_abs_m * 1e6:6.1f}"
                f" {eb.rms_m * 1e6:6.1f} ->{em.rms_m * 1e6:5.1f}"
                f" {eb.circular_deviation_m * 1e6:6.1f} ->{em.circular_deviation_m * 1e6:5.1f}"
                f" {base.cycle_time_s:6.2f} ->{mod.cycle_time_s:6.2f}"
                f" {mod.cycle_time_s - base.cycle_time_s:+7.2f}"
            )


def main(quick: bool = False) -> None:
    throughput(quick)
    circular(quick)


if __name__ == "__main__":
    import sys

    main(quick="--quick" in sys.argv)
