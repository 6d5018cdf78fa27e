"""OPC UA driver throughput: 100,000 samples/s sustained over loopback with 0 lost.

The peer controller (tests/peers/opcua_controller.py, an asyncua server process) runs one
constant-speed cycle sampled at 100 kHz and publishes it in chunks of 2,000 samples (time
Double, motor and link counts UInt32, current Float) at 1.1x the real rate (110,000 samples/s,
55 chunks/s) for 60 s (quick: 5 s). The driver receives them through its subscription, checks
every sequence number and sample step, and returns the capture; any lost chunk aborts the cycle,
so a returned capture of the expected length means 0 lost.

Printed: samples/s received end to end (samples / time from the peer's first chunk to the
capture in the agent's hands, so start and finish latency count against it), lost samples, the
peer's own publish rate over the same run (the baseline: the received rate cannot exceed it),
and the agent's CPU share while streaming. Short runs at 2x and 4x the real rate then show the
headroom.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path

from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.errors import AgentError
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import CycleLimits, run_guarded_cycle
from drivers.opcua.driver import OpcUaDriver
from tests.peers.opcua.harness import PeerProcess, Plant, config_text

RATE_HZ = 100_000.0
TARGET_SAMPLES_PER_S = 100_000.0
CHUNK = 2000
# The source runs 10 % above the target, so the end-to-end rate (which includes the latency of
# the first and last chunk) is measured against the target with the stream as the only limit.
SPEEDUP = 1.1
TIMING = {"publishing_interval_ms": 20, "stall_timeout_s": 2.0, "request_timeout_s": 2.0}


@dataclasses.dataclass(frozen=True)
class Run:
    speedup: float
    expected: int
    received: int
    wall_s: float
    cpu_s: float
    peer_samples: int
    peer_s: float
    error: str = ""

    @property
    def rate(self) -> float:
        return self.received / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def peer_rate(self) -> float:
        return self.peer_samples / self.peer_s if self.peer_s > 0 else 0.0


async def _one(ctrl: ControllerSettings, endpoint: str, duration_s: float, speedup: float) -> Run:
    joint = ctrl.joints[0]
    cycle = dataclasses.replace(backlash_cycle(ctrl, joint), duration_s=duration_s, settle_s=0.1)
    expected = round(cycle.duration_s * cycle.sample_rate_hz) + 1
    driver = OpcUaDriver(ctrl.name, ctrl.settings, ctrl.joints)
    await driver.connect()
    error, received = "", 0
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            capture = await run_guarded_cycle(
                driver, cycle, ctrl.interlocks, joint, CycleLimits(overrun_margin_s=30.0)
            )
            received = len(capture)
        except AgentError as exc:
            error = str(exc)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        done_unix = time.time()
    finally:
        await driver.close()
    peer_samples, peer_s, first_chunk = 0, 0.0, 0.0
    try:
        async with Plant(endpoint) as plant:
            peer_samples = int(await plant.read("PublishedSamples"))
            peer_s = float(await plant.read("PublishSeconds"))
            first_chunk = float(await plant.read("FirstChunkUnixTime"))
    except Exception as exc:  # an overloaded peer: report the run without its own figures
        error = error or f"peer unreachable afterwards: {type(exc).__name__}"
    # Both processes share the machine's clock: the stream ran from the peer's first chunk to
    # the moment the capture was returned (the settle and the peer's physics are left out).
    stream_s = done_unix - first_chunk if first_chunk > 0 else wall
    return Run(speedup, expected, received, stream_s, cpu, peer_samples, peer_s, error)


def _peer(config: Path, directory: Path, speedup: float) -> PeerProcess:
    peer = PeerProcess(
        config,
        [
            "--speedup",
            str(speedup),
            "--chunk-samples",
            str(CHUNK),
            "--max-physics-s",
            "1.0",
            "--seed",
            "1",
        ],
        log=directory / f"peer_{speedup:g}.log",
    )
    peer.start()
    return peer


def _measure(directory: Path, duration_s: float, speedup: float) -> Run:
    config = directory / "bench.yaml"
    config.write_text(config_text(sample_rate_hz=RATE_HZ, load_turns=12.0, timing=TIMING))
    peer = _peer(config, directory, speedup)
    try:
        ctrl = load_config(config).controllers[0]
        ctrl = dataclasses.replace(
            ctrl, settings=dataclasses.replace(ctrl.settings, endpoint=peer.endpoint)
        )
        return asyncio.run(
            asyncio.wait_for(
                _one(ctrl, peer.endpoint, duration_s, speedup), duration_s / speedup * 3 + 60
            )
        )
    finally:
        peer.stop()


def _print(run: Run, label: str) -> None:
    lost = run.expected - run.received if not run.error else run.expected
    cpu = 100.0 * run.cpu_s / run.wall_s if run.wall_s else 0.0
    print(
        f"  {label}: {run.rate:,.0f} samples/s received, lost {lost:,} of {run.expected:,}, "
        f"peer published {run.peer_rate:,.0f} samples/s over {run.peer_s:.1f} s, "
        f"agent CPU {cpu:.0f} %"
    )
    if run.error:
        print(f"    aborted: {run.error}")


def main(quick: bool = False) -> None:
    stream_s = 5.0 if quick else 60.0
    print(
        f"OPC UA on loopback: a {RATE_HZ:,.0f} Hz capture in chunks of {CHUNK} samples, "
        f"streamed for {stream_s:g} s at {SPEEDUP:g}x real time "
        f"(target >= {TARGET_SAMPLES_PER_S:,.0f} samples/s end to end, 0 lost)"
    )
    with tempfile.TemporaryDirectory(prefix="bench_opcua_") as tmp:
        directory = Path(tmp)
        main_run = _measure(directory, stream_s * SPEEDUP, SPEEDUP)
        _print(main_run, "sustained")
        ok = (
            not main_run.error
            and main_run.received == main_run.expected
            and main_run.rate >= TARGET_SAMPLES_PER_S * 0.99
        )
        print(f"  target met: {'yes' if ok else 'NO'}")
        for speedup in (2.0, 4.0):
            _print(_measure(directory, 5.0 * speedup, speedup), f"headroom x{speedup:g}")


if __name__ == "__main__":
    main(quick=True)
