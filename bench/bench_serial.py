"""Serial encoder board at 921,600 baud on loopback (a pty pair): sustained samples/s, 0 lost.

The peer (tests/peers/serial_board.py) emulates the board's UART: it streams a cycle's sample
frames in real time (time_scale 1) at the sample rate that fills a 921,600 baud 8N1 line, paced
to 92,160 bytes/s, and bytes the pty does not take in time are lost as in a UART receive
overrun. The agent's side is the real driver inside run_guarded_cycle, with the interlock watcher
polling STATUS every control period, as the daemon runs it. Baseline: the peer's own send rate.
A second, unpaced run (no baud limit, no real time) shows the driver's headroom.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.config.load import load_config
from agent.config.model import InterlockSettings
from agent.errors import AgentError
from agent.service.interlocks import CycleLimits, run_guarded_cycle
from drivers.base import BacklashCycle
from drivers.serial.driver import SerialEncoderDriver

PEER = Path(__file__).resolve().parent.parent / "tests" / "peers" / "serial_board.py"
BAUD = 921_600
JOINTS = 6
CHANNELS = 2 * JOINTS  # motor and link of each joint, 19 bits each
# 51-byte frames at 1700 Hz are 867,000 baud; the interlock watcher's STATUS replies (40 bytes at
# 100 Hz, 40,000 baud) share the line: 907,000 of 921,600 baud, 98.4 % of the line.
SAMPLE_RATE_HZ = 1700.0

CONFIG = """\
controllers:
  - name: bench
    driver: serial
    settings:
      port: {port}
      baudrate: {baud}
      channels: {channels}
      count_bits: 19
      start_timeout_s: 120
      stall_timeout_s: 1.0
      reply_timeout_s: 1.0
    joints:
{joints}
"""
JOINT = """\
      - name: axis{i}
        index: {i}
        gear_ratio: 40
        encoder_bits: 19
        backlash_cycle: {{motor_speed_rps: 100, sample_rate_hz: {rate}}}
"""


def _write_config(tmp: Path, link: Path) -> Path:
    joints = "".join(JOINT.format(i=i, rate=SAMPLE_RATE_HZ) for i in range(1, JOINTS + 1))
    path = tmp / "bench.yaml"
    path.write_text(CONFIG.format(port=link, baud=BAUD, channels=CHANNELS, joints=joints))
    return path


def _start_peer(config: Path, link: Path, events: Path, scenario: dict[str, Any]) -> Any:
    args = ["--config", str(config), "--controller", "bench", "--link", str(link)]
    args += ["--scenario", json.dumps(scenario), "--events", str(events)]
    proc = subprocess.Popen(
        [sys.executable, "-P", str(PEER), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    if not proc.stdout.readline().startswith("READY"):
        raise RuntimeError("serial peer did not start")
    return proc


def _stop_peer(proc: Any) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    for pipe in (proc.stdin, proc.stdout):
        pipe.close()


async def _capture(config: Path, duration_s: float, guarded: bool) -> dict[str, Any]:
    ctrl = load_config(config).controllers[0]
    joint = ctrl.joints[0]
    cycle = BacklashCycle(
        controller=ctrl.name,
        joint=joint.name,
        joint_index=joint.index,
        motor_speed_rad_s=2 * math.pi * 100.0,
        gear_ratio=joint.gear_ratio,
        duration_s=duration_s,
        settle_s=0.0,
        sample_rate_hz=SAMPLE_RATE_HZ,
        encoder_bits=joint.encoder_bits,
        test_pose_rad=0.0,
    )
    driver = SerialEncoderDriver(ctrl.name, ctrl.settings, ctrl.joints)
    await driver.connect()
    # (time, bytes received) at the first and the latest sample frame
    arrivals: list[tuple[float, int]] = []
    frames0 = driver.sample_frames

    async def watch_frames() -> None:
        seen = frames0
        while True:
            await asyncio.sleep(0.001)
            if driver.sample_frames > seen:
                seen = driver.sample_frames
                now = (time.perf_counter(), driver.stats.bytes_in)
                arrivals[1:] = [now]
                if len(arrivals) == 1:
                    arrivals.insert(0, now)

    watcher = asyncio.ensure_future(watch_frames())
    cpu0 = time.process_time()
    out: dict[str, Any] = {}
    try:
        if guarded:
            capture = await run_guarded_cycle(
                driver, cycle, InterlockSettings(), joint, CycleLimits(overrun_margin_s=120)
            )
        else:
            capture = await driver.run_cycle(cycle)
        out["samples"] = len(capture)
        out["lost"] = capture.meta.extra["lost_frames"]
    except AgentError as exc:
        out["error"] = str(exc)
    finally:
        watcher.cancel()
        out["cpu_s"] = time.process_time() - cpu0
        out["sample_frames"] = driver.sample_frames - frames0
        out["link"] = driver.stats.to_dict()
        await driver.close()
    # Polled every millisecond: the first frames of a burst may be a poll late, so the span
    # is at most 1 ms short of the truth (0.02 % of a 5 s run).
    out["stream_s"] = arrivals[1][0] - arrivals[0][0] if len(arrivals) == 2 else float("nan")
    out["line_bytes"] = arrivals[1][1] - arrivals[0][1] if len(arrivals) == 2 else 0
    return out


def _run(duration_s: float, scenario: dict[str, Any], guarded: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="jha-bench-serial-") as tmp_name:
        tmp = Path(tmp_name)
        link, events = tmp / "board", tmp / "events.jsonl"
        config = _write_config(tmp, link)
        proc = _start_peer(config, link, events, scenario)
        try:
            result = asyncio.run(_capture(config, duration_s, guarded))
        finally:
            _stop_peer(proc)
        log = [json.loads(line) for line in events.read_text().splitlines()]
    result["peer"] = next(e for e in log if e["event"] == "exit")
    return result


def _report(title: str, r: dict[str, Any], frame_bytes: int) -> None:
    peer, link = r["peer"], r["link"]
    stream_s = r["stream_s"]
    peer_s = peer["stream_s"]
    frames = r["sample_frames"]
    print(f"  {title}")
    print(
        f"    peer sent      {peer['bytes_sent'] / peer_s:10,.0f} B/s  "
        f"({peer['frames_sent'] / peer_s:,.0f} frames/s over its {peer_s:.2f} s, baseline); "
        f"overrun: {peer['bytes_dropped']} bytes lost at the pty, "
        f"{peer['frames_overrun']} frames at the board"
    )
    line_s = r["line_bytes"] / stream_s
    print(
        f"    agent received {frames / stream_s:10,.0f} frames/s = "
        f"{frames * CHANNELS / stream_s:,.0f} samples/s ({CHANNELS} channels) "
        f"over {stream_s:.1f} s; line in use {line_s:,.0f} B/s = {line_s * 10:,.0f} baud "
        "(frames and STATUS replies)"
    )
    lost = r.get("lost", "capture refused")
    print(
        f"    lost frames: {lost}; garbage bytes {link['garbage_bytes']}, bad CRC "
        f"{link['bad_crc']}; agent CPU {100 * r['cpu_s'] / stream_s:.0f} % of one core, "
        f"{1e6 * r['cpu_s'] / frames:.1f} us per frame"
    )
    if "error" in r:
        print(f"    ERROR: {r['error']}")


def main(quick: bool = False) -> None:
    duration_s = 5.0 if quick else 60.0
    frame_bytes = 4 + 9 + CHANNELS * 3 + 2
    print(
        f"serial encoder board over a pty pair: {CHANNELS} channels x 19 bit, {frame_bytes}-byte "
        f"frames at {SAMPLE_RATE_HZ:g} Hz = {SAMPLE_RATE_HZ * frame_bytes * 10:,.0f} of "
        f"{BAUD:,} baud (8N1)"
    )
    paced = _run(
        duration_s,
        {"seed": 1, "time_scale": 1.0, "baud": BAUD, "overrun": "drop"},
        guarded=True,
    )
    _report(
        f"real time, {BAUD:,} baud, UART overrun loses bytes, guarded cycle", paced, frame_bytes
    )
    unpaced = _run(
        20.0 if quick else 60.0,
        {"seed": 1, "time_scale": 0.0, "baud": 0, "overrun": "wait"},
        guarded=False,
    )
    _report(
        "headroom: unpaced (no baud limit, pty backpressure; the peer is the bottleneck)",
        unpaced,
        frame_bytes,
    )


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
