"""RTDE throughput of the ur_rtde driver on loopback: 500 Hz for 60 s (5 s quick), 0 missed.

The controller emulator (tests/peers/ur_controller) streams the driver's output recipe at 500 Hz;
the driver's worker reads it through the real ur_rtde receive interfaces (two paths, merged by
controller tick; drivers/ur_rtde/worker/stream.py) and counts every package and every gap in the
controller timestamps, also per path. The baseline is what the emulator itself sent in the same
window.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from drivers.ur_rtde.driver import UrRtdeDriver  # noqa: E402
from drivers.ur_rtde.settings import UrRtdeSettings  # noqa: E402
from tests.peers.ur_controller import UrEmulator, free_host  # noqa: E402

RT_PRIORITY = 20  # the driver's capture loop
PEER_RT_PRIORITY = 30  # the emulator's controller cycle: a real controller is real-time too


async def _measure(host: str, emu: UrEmulator, seconds: float) -> tuple[dict[str, float], int]:
    settings = UrRtdeSettings(host=host, rt_priority=RT_PRIORITY)
    driver = UrRtdeDriver("bench", settings, ())
    await driver.connect()
    try:
        before = emu.state()["ticks"]
        stats = await driver.stream_stats(seconds)
        sent = emu.state()["ticks"] - before  # one package per cycle to each client
    finally:
        await driver.close()
    return stats.to_dict(), sent


def main(quick: bool = False) -> None:
    seconds = 5.0 if quick else 60.0
    host = free_host()
    with UrEmulator(host, "--rt-priority", str(PEER_RT_PRIORITY)) as emu:
        stats, sent = asyncio.run(_measure(host, emu, seconds))
    load = os.getloadavg()[0]
    print(
        f"ur_rtde: RTDE on loopback ({host}), {seconds:.0f} s, capture loop at SCHED_FIFO "
        f"{RT_PRIORITY}, emulator at {PEER_RT_PRIORITY}, load average {load:.1f}"
    )
    print(f"  received  {stats['rate_hz']:8.1f} samples/s ({stats['samples']} packages)")
    print(f"  missed    {stats['missed']:8d} packages (gaps in the controller timestamp)")
    alone = ", ".join(str(n) for n in stats["missed_by_path"])
    print(f"            (each of the {len(stats['missed_by_path'])} receive paths alone: {alone})")
    print(
        f"  baseline  {sent / seconds:8.1f} packages/s sent by the emulator to each client ({sent})"
    )
    verdict = "OK" if stats["missed"] == 0 and stats["rate_hz"] >= 0.98 * 500 else "FAIL"
    print(f"  target    500 Hz with 0 missed: {verdict}")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
