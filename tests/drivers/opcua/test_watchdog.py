"""Safety of the OPC UA driver against the peer controller (tests/peers/opcua): a cancelled
cycle stops the controller (safety gap G8 in docs/safety.md), and the controller's liveness
watchdog stops it when the agent is killed or its event loop hangs (G6)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.config.load import load_config
from agent.errors import ConfigError, CycleAborted, DriverError
from agent.kinds.backlash.kind import backlash_cycle
from drivers.opcua.capture import (
    expected_samples,
)
from tests.peers.opcua.harness import (
    TEST_TIMING,
    PeerProcess,
    Plant,
    config_text,
)
from tests.support.drivers.opcua import (
    controller,
    driver_for,
    guarded,
    run,
    start_peer,
)
from tests.support.paths import ROOT
from tests.support.summary import record


async def mid_capture(
    plant: Plant, cycles_before: int, expected: int, task: asyncio.Future[Any] | None = None
) -> None:
    """Until the controller's next cycle has published 200 samples and is still publishing."""
    deadline = time.monotonic() + 30.0
    while True:
        assert time.monotonic() < deadline, "the cycle never got under way"
        if task is not None and task.done():
            pytest.fail(f"the cycle ended before it got under way: {task.exception()!r}")
        # PublishedSamples still shows the previous cycle's total until the first chunk.
        if await plant.read("CyclesStarted") > cycles_before:
            published = await plant.read("PublishedSamples")
            if 200 <= published < expected and await plant.cycle_status() == "running":
                return
        await asyncio.sleep(0.02)


def test_cancelling_the_guarded_cycle_stops_the_controller(
    tmp_path: Path, shared: tuple[Path, PeerProcess]
) -> None:
    peer = shared[1]
    # 40 load turns: 16 s of motion, 1.6 s at the shared peer's 10x, so the cancel lands in it.
    path = tmp_path / "long.yaml"
    # This test is about the cancel; a generous stall timeout keeps a loaded machine's slow first
    # chunk from ending the cycle before it got under way.
    path.write_text(config_text(load_turns=40.0, timing={**TEST_TIMING, "stall_timeout_s": 10.0}))
    ctrl = controller(path, peer.endpoint)
    expected = expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))

    async def go() -> tuple[int, str, int, int]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            async with Plant(peer.endpoint) as plant:
                stops = await plant.read("StopRequests")
                cycles = await plant.read("CyclesStarted")
                task = asyncio.create_task(guarded(driver, ctrl))
                await mid_capture(plant, cycles, expected, task)
                task.cancel()  # the daemon shutting down mid-capture
                with pytest.raises(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0.1)
                published = await plant.read("PublishedSamples")
                return (
                    await plant.read("StopRequests") - stops,
                    await plant.cycle_status(),
                    published,
                    driver.stop_motion_calls,
                )
        finally:
            await driver.close()

    stops, status, published, stop_calls = run(go())
    assert stops >= 1 and stop_calls >= 1  # the stop reached the controller
    assert status == "aborted"  # it stopped the cycle it was running
    assert published < expected


def test_agent_killed_mid_capture_the_controller_watchdog_stops(
    peer_config: Path, tmp_path: Path
) -> None:
    # Real time (4.8 s of motion): the kill lands early in it.
    peer = start_peer(peer_config, tmp_path, "--speedup", "1")
    agent_yaml = tmp_path / "agent.yaml"
    # The peer computes the cycle's physics before it settles and streams: on a loaded machine
    # that takes a while, which must not pass for a stall.
    timing = {**TEST_TIMING, "stall_timeout_s": 3.0}
    agent_yaml.write_text(
        config_text(peer.endpoint, timing=timing, watchdog={"interval_s": 0.1, "timeout_s": 0.5})
    )
    ctrl = controller(agent_yaml, peer.endpoint)
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.peers.driver_client",
            "--config",
            str(agent_yaml),
            "--controller",
            "robot1",
            "--joint",
            "axis4",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )

    async def watch() -> tuple[float, dict[str, Any]]:
        async with Plant(peer.endpoint) as plant:
            await mid_capture(plant, 0, expected_samples(backlash_cycle(ctrl, ctrl.joints[0])))
            killed_at = time.time()
            client.kill()  # SIGKILL: no stop, no more watchdog writes, nothing runs
            await asyncio.to_thread(client.wait, 5)
            while await plant.read("WatchdogTrips") == 0:
                assert time.time() < killed_at + 5.0, "the controller never stopped"
                await asyncio.sleep(0.02)
            names = (
                "WatchdogTrips",
                "WatchdogTripUnixTime",
                "WatchdogSilentS",
                "StopRequests",
                "PublishedSamples",
            )
            found = {n: await plant.read(n) for n in names}
            found["status"] = await plant.cycle_status()
            return killed_at, found

    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "CONNECTED"
        killed_at, found = run(watch())
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(5)
        if client.stdout is not None:
            client.stdout.close()
        peer.stop()
    timeout_s = 0.5
    assert found["WatchdogTrips"] == 1 and found["status"] == "aborted"
    assert found["StopRequests"] == 0  # nobody sent a stop: the controller did it alone
    assert found["PublishedSamples"] < expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))
    # Stopped within the timeout of the kill (the last write came up to one interval before
    # it), with a margin for scheduling on a loaded machine.
    assert timeout_s <= found["WatchdogSilentS"] < timeout_s + 0.2
    stopped_after_s = found["WatchdogTripUnixTime"] - killed_at
    record(
        "controller watchdog",
        "opcua: agent SIGKILLed mid-capture",
        f"stopped {stopped_after_s:.2f} s after the kill (timeout {timeout_s} s)",
    )
    assert stopped_after_s < timeout_s + 0.2


def test_a_hung_event_loop_stops_the_counter_and_the_controller(
    tmp_path: Path, shared: tuple[Path, PeerProcess]
) -> None:
    peer = shared[1]
    path = tmp_path / "tight.yaml"
    # 16 s of motion at 10x; the tight timeout is written to the controller at the trigger. The
    # peer computes the cycle's physics before its first chunk: on a loaded machine that is
    # seconds, which must not pass for a stall (the watchdog is this test's subject).
    path.write_text(
        config_text(
            load_turns=40.0,
            timing={**TEST_TIMING, "stall_timeout_s": 10.0},
            watchdog={"interval_s": 0.1, "timeout_s": 0.5},
        )
    )
    ctrl = controller(path, peer.endpoint)
    expected = expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))

    async def go() -> tuple[int, float, str, int]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            async with Plant(peer.endpoint) as plant:
                trips, stops = await plant.read("WatchdogTrips"), await plant.read("StopRequests")
                cycles = await plant.read("CyclesStarted")
                task = asyncio.create_task(driver.run_cycle(backlash_cycle(ctrl, ctrl.joints[0])))
                await mid_capture(plant, cycles, expected, task)
                time.sleep(1.0)  # the agent's loop hangs: no counter write, no stop, nothing
                with pytest.raises((CycleAborted, DriverError)):
                    await task
                return (
                    await plant.read("WatchdogTrips") - trips,
                    await plant.read("WatchdogSilentS"),
                    await plant.cycle_status(),
                    await plant.read("StopRequests") - stops,
                )
        finally:
            await driver.close()

    trips, silent_s, status, stops = run(go())
    assert trips == 1 and silent_s >= 0.5 and status == "aborted"
    # The controller stopped on its own; the agent's stop came only after it woke up (if at all).
    assert stops <= 1


def test_watchdog_settings_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        config_text(watchdog={"interval_s": 0.5, "timeout_s": 1.0}).replace(
            'node: "ns=2;s=Controller.Watchdog"', 'node: "Controller.Watchdog"'
        )
    )
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    message = str(exc.value)
    assert (
        "settings.watchdog.timeout_s: expected at least 3 x interval_s (1.5 s), found 1" in message
    )
    assert "settings.watchdog.node: expected a node id" in message


def test_a_watchdog_the_agent_cannot_feed_refuses_the_cycle_before_motion(
    shared: tuple[Path, PeerProcess], caplog: pytest.LogCaptureFixture
) -> None:
    config, peer = shared
    ctrl = controller(config, peer.endpoint)
    # An integer the agent may read but not write: the first beat fails before the trigger.
    stuck = dataclasses.replace(ctrl.settings.watchdog, node="ns=2;s=Plant.CyclesStarted")
    unfed = controller(config, peer.endpoint, watchdog=stuck)
    unwatched = controller(config, peer.endpoint, watchdog=None)

    async def go() -> tuple[str, int, int]:
        driver = driver_for(unfed)
        await driver.connect()
        try:
            async with Plant(peer.endpoint) as plant:
                started = await plant.read("CyclesStarted")
                with pytest.raises(DriverError) as refused:
                    await driver.run_cycle(backlash_cycle(unfed, unfed.joints[0]))
                return (
                    str(refused.value),
                    await plant.read("CyclesStarted") - started,
                    driver.heartbeats_sent,
                )
        finally:
            await driver.close()

    async def without() -> None:
        driver = driver_for(unwatched)
        await driver.connect()
        await driver.close()

    message, cycles, beats = run(go())
    assert (
        "cannot write the watchdog counter: node ns=2;s=Plant.CyclesStarted answered Bad" in message
    )
    assert cycles == 0 and beats == 0  # nothing moved
    with caplog.at_level("WARNING", logger="drivers.opcua.driver"):
        run(without())
    assert "event=opcua_no_watchdog controller=robot1" in caplog.text  # never silently
