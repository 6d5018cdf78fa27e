"""CAN driver throughput: one encoder stream of 8,000 frames/s on a 1 Mbit/s bus, 0 lost.

A socketcand peer (tests/peers/socketcand_peer.py) on TCP loopback runs one constant-speed cycle
of 60 s (quick: 5 s) at 8 kHz; its virtual bus times every frame to its stuffed bit length at
1 Mbit/s (status and joint-position frames share the bus), so the stream is as dense as the real
bus would carry it. The driver receives it through python-can's socketcand client, checks every
counter and returns the capture. Printed: frames/s received, lost frames, the peer's own send
rate and bus load (the baseline of the same run), and the agent's CPU share while streaming.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.config.load import load_config
from agent.kinds.backlash.kind import backlash_cycle
from drivers.can.driver import CanDriver

ROOT = Path(__file__).resolve().parents[1]
RATE_HZ = 8000
TARGET_FRAMES_PER_S = 8000.0
MOTOR_RPS = 50.0
GEAR = 40.0

CONFIG = """\
controllers:
  - name: bench
    driver: can
    settings:
      dbc: {dbc}
      interface: socketcand
      channel: can0
      bitrate: 1000000
    joints:
      - name: j1
        index: 1
        gear_ratio: {gear}
        backlash_cycle:
          motor_speed_rps: {rps}
          load_turns: {turns}
          sample_rate_hz: {rate}
          settle_s: 0.2
"""


def _events(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield json.loads(line)


async def _cycle(config: Path, port: int) -> tuple[dict[str, Any], float]:
    ctrl = load_config(config).controllers[0]
    settings = dataclasses.replace(ctrl.settings, port=port)
    driver = CanDriver(ctrl.name, settings, ctrl.joints)
    await driver.connect()
    try:
        cpu0 = time.process_time()
        capture = await driver.run_cycle(backlash_cycle(ctrl, ctrl.joints[0]))
        cpu_s = time.process_time() - cpu0
    finally:
        await driver.close()
    stats = dict(driver.last_capture_stats)
    stats["samples"] = len(capture)
    return stats, cpu_s


def main(quick: bool = False) -> None:
    duration_s = 5.0 if quick else 60.0
    turns = duration_s * MOTOR_RPS / GEAR  # load turns for the wanted capture length
    with tempfile.TemporaryDirectory(prefix="bench-can-") as tmp:
        config = Path(tmp) / "bench.yaml"
        config.write_text(
            CONFIG.format(
                dbc=ROOT / "config" / "can" / "joint_encoder.dbc",
                gear=GEAR,
                rps=MOTOR_RPS,
                turns=turns,
                rate=RATE_HZ,
            )
        )
        peer = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.peers.socketcand_peer", "--config", str(config)),
                *("--controller", "bench", "--backlash=j1=0.0012", "--seed=1"),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            events = _events(peer)
            port = next(e for e in events if e["event"] == "listening")["port"]
            t0 = time.monotonic()
            stats, cpu_s = asyncio.run(_cycle(config, port))
            wall_s = time.monotonic() - t0
            done = next(e for e in events if e["event"] in ("cycle_done", "cycle_aborted"))
        finally:
            peer.terminate()
            peer.wait(10)
    peer_rate = done["sent"] / done["stream_s"] if done["stream_s"] else math.nan
    lost = stats["lost_frames"] + done["dropped"] + (stats["samples"] - done["sent"])
    ok = lost == 0 and stats["frames_per_s"] >= TARGET_FRAMES_PER_S * 0.999
    print(f"CAN (socketcand on loopback, 1 Mbit/s virtual bus, {duration_s:.0f} s stream)")
    print(f"  frames received      {stats['frames']:>10d}  in {stats['stream_s']:.2f} s")
    print(f"  frames/s received    {stats['frames_per_s']:>10.1f}  (arrival clock; >= 8,000)")
    print(f"  lost frames          {lost:>10d}")
    print(f"  peer send rate       {peer_rate:>10.0f}  frames/s (baseline, same run)")
    print(f"  peer longest pause   {1000 * done['max_step_gap_s']:>10.1f}  ms (scheduling)")
    print(f"  bus load             {100 * done['bus_load']:>9.1f} %  (stuffed bits / 1 Mbit/s)")
    print(f"  agent CPU            {100 * cpu_s / stats['cycle_wall_s']:>9.1f} %  of one core")
    print(f"  cycle wall time      {wall_s:>10.1f}  s (peer prepares physics first)")
    print(f"  result               {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
