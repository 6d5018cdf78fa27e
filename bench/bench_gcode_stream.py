"""Streaming throughput to the GRBL-protocol peer over a pty.

Same program, same peer, same run: GRBL character counting (agent.feedrate.streaming.grbl)
against the send-one-line-and-wait-for-`ok` baseline (gnea's simple_stream.py protocol), with
the peer's machine clock made effectively instant (--time-scale 1e6) so that the link and the
protocol are what is measured; then DNC drip feed with XON/XOFF, paced at a 115200-baud line's
byte rate against a machine slower than that line. The peer's own counts (receive-buffer high
water, overflows, planner fill) are printed beside the client's figures.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.feedrate.streaming.dnc import DncOptions, stream_dnc
from agent.feedrate.streaming.grbl import GrblOptions, stream_grbl
from agent.feedrate.streaming.serial_channel import open_serial
from agent.feedrate.streaming.session import StreamResult

PEER = Path(__file__).resolve().parent.parent / "tests" / "peers" / "grbl_controller.py"


def program(n: int) -> list[str]:
    """n lines: a header and 0.63 mm chords round a 50 mm circle (17-21 characters each)."""
    out = ["G21 G90 G94 F3000\n"]
    for k in range(1, n):
        a = 2.0 * math.pi * k / 500
        out.append(f"G1 X{50 * math.cos(a):.3f} Y{50 * math.sin(a):.3f}\n")
    return out


def run_peer(
    args: list[str], lines: list[str], dnc: bool = False, options: Any = None
) -> tuple[StreamResult, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        stats_path = Path(tmp) / "stats.json"
        proc = subprocess.Popen(
            [sys.executable, "-P", str(PEER), "--stats", str(stats_path), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            if not ready.startswith("READY"):
                raise RuntimeError(f"grbl peer did not start: {ready!r}")
            channel = open_serial(ready.split()[1])
            try:
                result = (
                    stream_dnc(lines, channel, options)
                    if dnc
                    else stream_grbl(lines, channel, options)
                )
            finally:
                channel.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
            stats = json.loads(stats_path.read_text())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
    return result, stats


def show(name: str, result: StreamResult, stats: dict[str, Any]) -> None:
    print(
        f"  {name:<22} {result.lines_sent:>6} lines {result.elapsed_s:7.3f} s "
        f"{result.lines_per_s:9.0f} lines/s  client max in flight {result.max_bytes_in_flight:3d}"
        f" B | peer: rx high water {stats['rx_max_bytes']:3d} B, overflow "
        f"{stats['rx_overflow_bytes']} B, planner max {stats['planner_max_blocks']}, "
        f"answers {stats['oks_sent'] + stats['errors_sent']}",
        flush=True,
    )


def main(quick: bool = False) -> None:
    n = 2_000 if quick else 20_000
    lines = program(n)
    instant = ["--time-scale", "1e6"]
    print(f"GRBL protocol peer on a pty, {n} lines, machine clock x1e6 (link-bound):")
    started = time.perf_counter()
    counting, stats = run_peer(instant, lines)
    show("character counting", counting, stats)
    assert stats["rx_overflow_bytes"] == 0 and counting.lines_acked == n
    baseline, stats = run_peer(instant, lines, options=GrblOptions(max_lines_in_flight=1))
    show("send-response baseline", baseline, stats)
    print(
        f"  character counting / send-response: {counting.lines_per_s / baseline.lines_per_s:.2f}x"
    )

    m = 300 if quick else 2_000
    dnc_lines = program(m)
    # x5 clock: ~320 blocks/s, below the line's ~600 lines/s, so the peer must send XOFF.
    dnc, stats = run_peer(
        ["--dnc", "--time-scale", "5", "--rx-buffer", "256"],
        dnc_lines,
        dnc=True,
        options=DncOptions(wait_idle=True),
    )
    print(f"DNC drip feed, {m} lines paced at 115200 baud 8N1 (11520 B/s), machine x5:")
    print(
        f"  {dnc.lines_sent} lines {dnc.elapsed_s:.3f} s {dnc.lines_per_s:.0f} lines/s, "
        f"{dnc.bytes_sent / dnc.elapsed_s:.0f} B/s; XOFF {stats['xoff_sent']}, XON "
        f"{stats['xon_sent']}, peer rx high water {stats['rx_max_bytes']} B, bytes after an "
        f"XOFF at most {stats['max_bytes_after_xoff']}, overflow {stats['rx_overflow_bytes']} B"
    )
    print(f"  total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
