"""The serial board's liveness watchdog (safety gap G6 in docs/safety.md): the board stops its
joint when the agent's heartbeats stop, whether the agent was killed or its event loop hangs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.config.load import load_config
from agent.errors import ConfigError, CycleAborted, DriverError
from drivers.serial.settings import SerialSettings
from tests.support.drivers.serial_board import (
    Bench,
    Peer,
    connected,
    run,
    until,
)
from tests.support.paths import ROOT
from tests.support.summary import record


def _board_events(peer: Peer, name: str) -> list[dict[str, Any]]:
    return [e for e in peer.events() if e["event"] == name]


def test_agent_killed_mid_capture_the_board_watchdog_stops(tmp_path: Path) -> None:
    bench = Bench(tmp_path, watchdog_s=0.5)  # the default
    try:
        _kill_mid_capture(bench)
    finally:
        for p in bench.peers:
            p.close()


def _kill_mid_capture(bench: Bench) -> None:
    # Half real time: a 1 s settle and a 1.6 s capture, so the kill and the board's stop
    # (0.5 s later) land well inside it.
    peer = bench.peer(time_scale=2.0)
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.peers.driver_client",
            "--config",
            str(bench.config_path),
            "--controller",
            "board1",
            "--joint",
            "axis1",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "CONNECTED"
        deadline = time.monotonic() + 15.0
        while not _board_events(peer, "streaming"):
            assert time.monotonic() < deadline, "the cycle never started streaming"
            time.sleep(0.01)
        time.sleep(0.2)
        killed_at = time.monotonic()
        client.kill()  # SIGKILL: no STOP, no more heartbeats, nothing in the agent runs
        client.wait(5)
        while not _board_events(peer, "cycle_done"):
            assert time.monotonic() < killed_at + 5.0, "the board never stopped"
            time.sleep(0.01)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(5)
        if client.stdout is not None:
            client.stdout.close()
    (watchdog,) = _board_events(peer, "watchdog")
    (done,) = _board_events(peer, "cycle_done")
    timeout_s = bench.ctrl.settings.watchdog_timeout_s
    assert done["result"] == "WATCHDOG" and done["frames_sent"] < 401  # stopped partway
    assert done["heartbeats"] >= 10  # the beats kept it going until the kill
    # Stopped within the timeout of the kill (the last beat came up to one interval before it),
    # with a margin for scheduling on a loaded machine.
    assert timeout_s <= watchdog["silent_s"] < timeout_s + 0.2
    stopped_after_s = watchdog["t"] - killed_at
    record(
        "controller watchdog",
        "serial: agent SIGKILLed mid-capture",
        f"stopped {stopped_after_s:.2f} s after the kill (timeout {timeout_s} s)",
    )
    assert stopped_after_s < timeout_s + 0.2
    assert _board_events(peer, "stop") == []  # nobody sent STOP: the board did it alone


def test_a_hung_event_loop_stops_the_heartbeats_and_the_board(tmp_path: Path) -> None:
    # A 1 s watchdog (not the 0.5 s minimum): on a loaded machine the live loop itself can miss
    # half a second of heartbeats, and that trip, before the hang, is not this test's subject.
    bench = Bench(tmp_path, watchdog_s=1.0)
    try:
        _hang_mid_capture(bench, bench.peer(time_scale=2.0))
    finally:
        for p in bench.peers:
            p.close()


def _hang_mid_capture(bench: Bench, peer: Peer) -> None:

    async def go() -> None:
        d = await connected(bench)
        try:
            task = asyncio.ensure_future(d.run_cycle(bench.cycle()))
            await until(lambda: d.stats.frames > 50 or task.done())
            if task.done():  # ended before the hang: say how, not "condition not reached"
                pytest.fail(f"the cycle ended before the hang: {task.exception()!r}")
            time.sleep(1.5)  # the loop hangs (a blocking call): no heartbeat goes out
            # Woken up, the driver sees a silent board or the board's WATCHDOG end: either way
            # the cycle fails; what matters is that the board stopped while the loop hung.
            with pytest.raises((DriverError, CycleAborted)):
                await task
        finally:
            await d.close()

    run(go())
    (watchdog,) = _board_events(peer, "watchdog")
    (done,) = _board_events(peer, "cycle_done")
    assert watchdog["silent_s"] >= bench.ctrl.settings.watchdog_timeout_s
    assert done["result"] == "WATCHDOG" and done["frames_sent"] < 401


def test_watchdog_settings_are_checked(tmp_path: Path) -> None:
    b = Bench(tmp_path)
    text = b.config_path.read_text().replace(
        "      watchdog_timeout_s: 1.0\n",
        "      heartbeat_interval_s: 0.2\n      watchdog_timeout_s: 0.5\n",
    )
    b.config_path.write_text(text)
    with pytest.raises(
        ConfigError,
        match=r"watchdog_timeout_s: expected at least 3 x "
        r"heartbeat_interval_s \(0\.6 s\), found 0\.5",
    ):
        load_config(b.config_path)
    assert SerialSettings(port="/dev/null").watchdog_timeout_s == 0.5  # the default
