"""The serial encoder-board driver against a real peer process on a pty pair.

Every test starts tests/peers/serial_board.py (its own process, the master side of an
os.openpty pair) and talks to it through the driver as the daemon would. Each test body runs
under asyncio.wait_for, so a hang fails fast.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.capture.model import Capture
from agent.config.load import load_config
from agent.errors import ConfigError, CycleAborted, DriverError
from agent.estimation.backlash.fit import fit_backlash
from drivers.base import Capability, ControllerMode, load_driver_class
from drivers.serial.driver import SerialEncoderDriver
from tests.support.drivers.serial_board import (
    LATE_ATTEMPTS,
    Bench,
    connected,
    run,
    sim_capture,
    until,
)

# --- acceptance -----------------------------------------------------------------------------------


def test_full_cycle_through_peer_matches_simulated_fake(bench: Bench) -> None:
    bench.peer(faults=[{"kind": "garbage", "at_frame": 120, "bytes": 300}])

    async def go() -> Capture:
        d = await connected(bench)
        try:
            return await bench.guarded(d)
        finally:
            await d.close()

    cap = run(go())
    ref = sim_capture(bench.ctrl)
    # Same physics, same seed: the 19-bit counts arrive unchanged, garbage burst and all.
    np.testing.assert_array_equal(cap.channel("motor_counts"), ref.channel("motor_counts"))
    np.testing.assert_array_equal(cap.channel("motor_pos_rad"), ref.channel("motor_pos_rad"))
    np.testing.assert_array_equal(cap.time_s, ref.time_s)
    # The link encoder is single-turn (the sim knows the turn count, the board cannot) and
    # quantised to 19 bits on the wire: equal modulo whole turns, within one count.
    tick = 2 * np.pi / 2**19
    diff = cap.channel("link_pos_rad") - ref.channel("link_pos_rad")
    turns = np.round(diff / (2 * np.pi))
    assert np.all(turns == turns[0])
    assert np.max(np.abs(diff - turns * 2 * np.pi)) <= tick
    assert -np.pi <= cap.channel("link_pos_rad")[0] < np.pi
    ours, theirs = fit_backlash(cap), fit_backlash(ref)
    assert ours.amplitude_rad_s == pytest.approx(theirs.amplitude_rad_s, rel=1e-9)
    assert ours.amplitude_rad_s > 1.0  # the 1.2 mrad signature is there
    assert cap.meta.extra["lost_frames"] == 0
    assert cap.meta.extra["link"]["garbage_bytes"] >= 300


def test_registered_with_capabilities() -> None:
    cls = load_driver_class("serial")
    assert cls is SerialEncoderDriver
    assert Capability.CYCLES in cls.capabilities
    assert Capability.LINK_ENCODER in cls.capabilities
    assert Capability.TOOLPATH_STREAMING not in cls.capabilities  # the feedrate issue's part


def test_status_maps_the_controller_state(bench: Bench) -> None:
    bench.peer(
        mode="production", permission=False, alarm=7, override_pct=80, poses_rad={"axis2": 0.25}
    )

    async def go() -> Any:
        d = await connected(bench)
        try:
            return await d.read_status()
        finally:
            await d.close()

    status = run(go())
    assert status.mode is ControllerMode.PRODUCTION
    assert status.permission is False
    assert status.alarms == ("board alarm 7",)
    assert status.speed_override == pytest.approx(0.8)
    assert status.joint_positions_rad == {"axis1": 0.0, "axis2": pytest.approx(0.25, abs=1e-6)}


def test_connect_checks_the_channel_map(bench: Bench) -> None:
    bench.peer(channel_map=[[1, 1], [1, 0], [2, 0], [2, 1]])
    with pytest.raises(
        DriverError, match="channel 0 should be joint 1 motor, the board says joint 1 link"
    ):
        run(connected(bench))


def test_board_refuses_a_cycle_outside_the_stop(bench: Bench) -> None:
    peer = bench.peer(mode="manual")

    async def go() -> None:
        d = await connected(bench)
        try:
            await d.run_cycle(bench.cycle())
        finally:
            await d.close()

    with pytest.raises(DriverError, match=r"board refused the cycle \(not stopped\)"):
        run(go())
    assert [e["result"] for e in peer.events() if e["event"] == "start"] == ["NOT_STOPPED"]


# --- lost frames ----------------------------------------------------------------------------------

LOSSES = [
    {"kind": "bad_crc", "at_frame": 50, "count": 2},
    {"kind": "drop", "at_frame": 150},
    {"kind": "truncate", "at_frame": 250},
    {"kind": "garbage", "at_frame": 300, "bytes": 100},
]


def test_lost_frames_refuse_the_capture_with_the_count(bench: Bench) -> None:
    bench.peer(faults=LOSSES, first_counter=2**32 - 100)  # the counter wraps mid-capture

    async def go() -> tuple[Capture | None, SerialEncoderDriver]:
        d = await connected(bench)
        try:
            with pytest.raises(DriverError, match=r"4 of 401 frames lost .*capture refused"):
                await d.run_cycle(bench.cycle())
            return None, d
        finally:
            await d.close()

    _, d = run(go())
    assert d.stats.bad_crc >= 3  # two corrupt frames and the truncated one
    assert d.stats.garbage_bytes >= 100


def test_lost_frames_interpolated_when_allowed(tmp_path: Path) -> None:
    b = Bench(tmp_path, "lost_frames: interpolate\nmax_interpolated_frames: 5")
    try:
        b.peer(faults=LOSSES)

        async def go() -> Capture:
            d = await connected(b)
            try:
                return await d.run_cycle(b.cycle())
            finally:
                await d.close()

        cap = run(go())
    finally:
        for p in b.peers:
            p.close()
    ref = sim_capture(b.ctrl)
    assert cap.meta.extra["lost_frames"] == 4
    assert cap.meta.extra["interpolated_frames"] == 4
    np.testing.assert_array_equal(cap.time_s, ref.time_s)
    err = np.abs(cap.channel("motor_pos_rad") - ref.channel("motor_pos_rad"))
    assert np.max(err) < 0.01  # filled samples sit on the line between their neighbours
    assert np.count_nonzero(err) <= 4


def test_board_clock_must_match_the_rate(bench: Bench) -> None:
    bench.peer(rate_error=0.02)

    async def go() -> None:
        d = await connected(bench)
        try:
            await d.run_cycle(bench.cycle())
        finally:
            await d.close()

    with pytest.raises(DriverError, match=r"board sampled at 490\.\d+ Hz by its clock"):
        run(go())


# --- faults during a guarded cycle ----------------------------------------------------------------


def guarded_abort(b: Bench, during: Callable[[SerialEncoderDriver], Awaitable[None]] | None = None):
    """Run a guarded cycle expected to abort; returns (error, seconds, driver)."""

    async def go() -> tuple[BaseException, float, SerialEncoderDriver]:
        d = await connected(b)
        t0 = time.monotonic()
        task = asyncio.ensure_future(b.guarded(d))
        if during is not None:
            await during(d)
        with pytest.raises(CycleAborted) as info:
            await task
        elapsed = time.monotonic() - t0
        # Afterwards the driver answers at once, one way or the other: it never hangs.
        with pytest.raises(DriverError):
            await asyncio.wait_for(d.read_status(), 2.0)
        await d.close()
        return info.value, elapsed, d

    return run(go())


def test_peer_killed_mid_capture_then_the_agent_goes_on(bench: Bench) -> None:
    peer = bench.peer(time_scale=1.0)

    async def kill_mid_capture(d: SerialEncoderDriver) -> None:
        await until(lambda: d.stats.frames > 60)
        peer.kill()

    err, _, d = guarded_abort(bench, kill_mid_capture)
    assert "the port closed" in str(err)
    assert "overran" not in str(err)  # the driver noticed, not the overrun deadline
    assert d.stop_requests >= 1  # attempted, though nobody is left to hear it

    # A new board on the same line: the same driver connects again and captures.
    bench.peer()

    async def again() -> Capture:
        await d.connect()
        try:
            return await bench.guarded(d)
        finally:
            await d.close()

    assert len(run(again())) == 401


def test_peer_closes_the_pty_mid_capture(bench: Bench) -> None:
    bench.peer(time_scale=0.5, faults=[{"kind": "disconnect", "at_frame": 100}])
    err, _, _ = guarded_abort(bench)
    assert "the port closed" in str(err)
    assert "overran" not in str(err)  # the driver noticed, not the overrun deadline


def test_peer_stalls_mid_capture(bench: Bench) -> None:
    bench.peer(time_scale=0.5, faults=[{"kind": "stall", "at_frame": 100}])
    err, _, _ = guarded_abort(bench)
    assert "stalled" in str(err) or "no STATUS reply" in str(err)
    assert "overran" not in str(err)  # the driver noticed, not the overrun deadline


def test_peer_answers_garbage_mid_capture(bench: Bench) -> None:
    peer = bench.peer(time_scale=2.0, faults=[{"kind": "garbage_replies", "at_frame": 100}])
    err, _, d = guarded_abort(bench)
    assert "no STATUS reply" in str(err)
    assert d.stats.garbage_bytes > 0
    assert peer.stops_while_moving() >= 1  # the board heard STOP, though its answer was noise


def test_peer_answering_garbage_cannot_connect(bench: Bench) -> None:
    bench.peer(faults=[{"kind": "garbage_replies"}])
    with pytest.raises(DriverError, match=r"no INFO reply within 0\.5 s .*garbage"):
        run(connected(bench))


def test_controller_leaves_the_stopped_state_mid_cycle(bench: Bench) -> None:
    for attempt in range(1, LATE_ATTEMPTS + 1):
        peer = bench.peer(
            time_scale=0.5,
            faults=[{"kind": "leave_stopped", "at_frame": 100, "mode": "production"}],
        )
        err, _, _ = guarded_abort_keep_open(bench)
        assert "production" in str(err)
        if not peer.stop_came_after_the_motion() or attempt == LATE_ATTEMPTS:
            break
        print(f"attempt {attempt}: the STOP reached the board after its last frame; again")
        peer.close()
    assert peer.stops_while_moving() >= 1, peer.events()
    done = [e for e in peer.events() if e["event"] == "cycle_done"]
    assert done and done[0]["result"] == "STOPPED"


def guarded_abort_keep_open(b: Bench):
    """Like guarded_abort, for a board that stays healthy (its status still answers)."""

    async def go() -> tuple[BaseException, float, SerialEncoderDriver]:
        d = await connected(b)
        t0 = time.monotonic()
        with pytest.raises(CycleAborted) as info:
            await b.guarded(d)
        elapsed = time.monotonic() - t0
        await until(lambda: any(e["event"] == "cycle_done" for e in b.peers[-1].events()))
        status = await d.read_status()
        assert status.mode is ControllerMode.PRODUCTION  # no longer moving
        await d.close()
        return info.value, elapsed, d

    return run(go())


def test_cancelled_cycle_sends_stop(bench: Bench) -> None:
    peer = bench.peer(time_scale=1.0)

    async def go() -> None:
        d = await connected(bench)
        task = asyncio.ensure_future(d.run_cycle(bench.cycle()))
        await until(lambda: d.stats.frames > 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: peer.stops_while_moving() >= 1)
        assert (await d.read_status()).mode is ControllerMode.STOPPED
        await d.close()

    run(go())


# --- configuration --------------------------------------------------------------------------------


def test_settings_errors_name_file_and_line(tmp_path: Path) -> None:
    b = Bench(tmp_path)
    text = b.config_path.read_text().replace(
        "      start_timeout_s: 5.0\n",
        "      start_timeout_s: 5.0\n      joints:\n        axis1: {motor_channel: 4}\n"
        "        axis2: {motor_channel: 1, link_channel: 1}\n",
    )
    b.config_path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(b.config_path)
    message = str(info.value)
    assert f"{b.config_path}:" in message
    assert (
        "joints.axis1.motor_channel" in message and "expected a channel < channels (4)" in message
    )
    assert "joints.axis2.link_channel" in message and "no other joint uses" in message


def test_joints_beyond_the_pair_layout_need_channels(tmp_path: Path) -> None:
    b = Bench(tmp_path)
    s = b.ctrl.settings
    narrow = type(s)(**{**s.__dict__, "channels": 2})
    with pytest.raises(DriverError, match="joint axis2 has no channels"):
        SerialEncoderDriver("board1", narrow, b.ctrl.joints)
    with pytest.raises(DriverError, match="needs its settings"):
        SerialEncoderDriver("board1", None, b.ctrl.joints)


def test_missing_port_is_a_driver_error(tmp_path: Path) -> None:
    b = Bench(tmp_path)  # no peer: nothing at the port

    async def go() -> None:
        d = b.driver()
        await d.connect()

    with pytest.raises(DriverError, match=f"cannot open serial port {b.link}"):
        run(go())
    assert not os.path.exists(b.link)
