"""CAN driver (drivers/can/driver.py) against a socketcand peer over TCP loopback (udp_multicast
inside a network namespace is in test_udp_multicast.py).

The peer (tests/peers/socketcand_peer.py) runs in its own process and produces its samples from
drivers.sim.backlash's physics; faults are injected at a given sample of a given cycle. Every
await has a timeout, so a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.capture.model import Capture
from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.errors import CycleAborted, DriverError, InterlockError
from agent.estimation.backlash.fit import fit_backlash
from agent.kinds.backlash.calibration import fit_settings
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.daemon import Agent
from agent.service.exit_codes import EX_UNAVAILABLE
from agent.service.interlocks import run_guarded_cycle
from drivers.base import ControllerMode
from drivers.can.driver import CanDriver
from tests.peers.can_harness import Peer, config_text, run, sim_captures, write


def driver_for(ctrl: ControllerSettings) -> CanDriver:
    return CanDriver(ctrl.name, ctrl.settings, ctrl.joints)


def guarded(driver: CanDriver, ctrl: ControllerSettings, joint_name: str) -> Awaitable[Capture]:
    joint = next(j for j in ctrl.joints if j.name == joint_name)
    return run_guarded_cycle(driver, backlash_cycle(ctrl, joint), ctrl.interlocks, joint)


# --- full cycles through the socketcand peer --------------------------------------------------


def test_full_cycle_through_socketcand_matches_the_simulated_fake(socketcand: Any) -> None:
    peer, ctrl = socketcand()
    driver = driver_for(ctrl)

    async def cycles() -> tuple[Capture, Capture]:
        await driver.connect()
        try:
            a = await guarded(driver, ctrl, "j1")
            b = await guarded(driver, ctrl, "j2")
            return a, b
        finally:
            await driver.close()

    got1, got2 = run(cycles())
    assert driver.stop_commands_sent == 0
    done = peer.named("cycle_done")
    assert [d["sent"] for d in done] == [401, 401] and all(d["dropped"] == 0 for d in done)
    want1, want2 = sim_captures(ctrl, ["j1", "j2"])
    for got, want in ((got1, want1), (got2, want2)):
        assert len(got) == len(want) == 401
        assert np.array_equal(got.time_s, want.time_s)  # counter / rate: the controller's clock
        # The only difference is the MotorSpeed signal's 1e-5 rad/s resolution: a count at most.
        assert np.max(np.abs(got.channel("motor_counts") - want.channel("motor_counts"))) <= 1
        tick = 2 * np.pi / 2**19
        assert (
            np.max(np.abs(got.channel("link_pos_rad") - want.channel("link_pos_rad"))) <= 1.5 * tick
        )
        assert got.meta.extra["lost_frames"] == 0 and got.meta.encoder_bits == 19
    joint = ctrl.joints[0]
    fit_got, fit_want = (
        fit_backlash(got1, fit_settings(joint)),
        fit_backlash(want1, fit_settings(joint)),
    )
    assert want1.meta.commanded_speed_rad_s == got1.meta.commanded_speed_rad_s
    assert fit_got.amplitude_rad_s == pytest.approx(fit_want.amplitude_rad_s, rel=0.01)
    assert fit_got.amplitude_rad_s > 1.0  # 1.2 mrad of backlash leaves a clear signature


def test_status_frames_become_the_interlock_snapshot(socketcand: Any) -> None:
    peer, ctrl = socketcand("--mode=production", "--no-permission")
    driver = driver_for(ctrl)

    async def check() -> None:
        await driver.connect()
        try:
            status = await driver.read_status()
            assert status.mode is ControllerMode.PRODUCTION and status.permission is False
            assert status.joint_positions_rad == {"j1": 0.0, "j2": pytest.approx(0.5, abs=1e-6)}
            assert status.speed_override == 1.0 and status.alarms == ()
            with pytest.raises(InterlockError, match=r"production mode.*permission signal is off"):
                await guarded(driver, ctrl, "j1")
            # Straight to the driver (no interlocks): the controller refuses by itself.
            with pytest.raises(DriverError, match="rejected cycle 1: controller not stopped"):
                await driver.run_cycle(backlash_cycle(ctrl, ctrl.joints[0]))
        finally:
            await driver.close()

    run(check())
    assert peer.named("cycle_start") == []
    assert peer.wait("rejected")["reason"] == "not_stopped"


def test_a_stream_the_bus_cannot_carry_is_refused_before_anything_moves(socketcand: Any) -> None:
    peer, ctrl = socketcand()
    fast = dataclasses.replace(ctrl.joints[0].backlash_cycle, sample_rate_hz=9000.0)
    joint = dataclasses.replace(ctrl.joints[0], backlash_cycle=fast)
    driver = driver_for(ctrl)

    async def check() -> None:
        await driver.connect()
        try:
            with pytest.raises(
                DriverError, match=r"9000 encoder frames/s take 100 % of a 1 Mbit/s"
            ):
                await driver.run_cycle(backlash_cycle(ctrl, joint))
        finally:
            await driver.close()

    run(check())
    assert peer.named("cycle_start") == [] and peer.named("stop") == []


# --- faults: the cycle is aborted, the stop sent, nothing returned, the driver goes on ---------


def _abort_then_recover(
    socketcand: Any, fault: str, expect: str, *, recover: bool = True
) -> tuple[Peer, CanDriver]:
    peer, ctrl = socketcand(f"--fault={fault}")
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            with pytest.raises(CycleAborted, match=expect) as aborted:
                await guarded(driver, ctrl, "j1")
            # Noticed by the driver's own timeouts, not at the guard's overrun deadline.
            assert "overran" not in str(aborted.value)
            if not recover:
                return
            # The daemon goes on: status reads (reconnecting if the link broke) until the
            # controller is stopped again, and a cycle.
            await _until_stopped(driver, 5.0)
            capture = await guarded(driver, ctrl, "j1")
            assert len(capture) == 401 and capture.meta.extra["lost_frames"] == 0
        finally:
            await driver.close()

    run(scenario(), timeout=40.0)
    return peer, driver


async def _until_stopped(driver: CanDriver, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            if (await driver.read_status()).mode is ControllerMode.STOPPED:
                return
        except DriverError:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, "controller not stopped in time"
        await asyncio.sleep(0.1)


def test_dropped_frames_abort_the_cycle_and_stop_the_controller(socketcand: Any) -> None:
    peer, _ = _abort_then_recover(
        socketcand, "drop@1:200x3", r"3 encoder frame\(s\) lost: counter jumped from 199 to 203"
    )
    assert peer.wait("stop")["cycle_state"] == "capturing"
    assert peer.wait("cycle_aborted")["cycle"] == 1
    assert peer.wait("cycle_done")["cycle"] == 2


def test_a_malformed_encoder_frame_aborts_the_cycle(socketcand: Any) -> None:
    peer, _ = _abort_then_recover(
        socketcand, "badframe@1:100", "malformed encoder frame after sample 100: 2 data bytes"
    )
    assert peer.wait("stop")["cycle_state"] == "capturing"


def test_garbage_on_the_wire_aborts_the_cycle(socketcand: Any) -> None:
    # python-can drops the whole TCP read holding non-ASCII bytes: the frames in it are lost.
    peer, _ = _abort_then_recover(socketcand, "garbage@1:150", "bus receive error")
    assert peer.wait("stop")["cycle_state"] == "capturing"


def test_an_unparsable_element_breaks_the_link_and_the_driver_reconnects(socketcand: Any) -> None:
    # python-can keeps an element it cannot parse in its buffer and fails every later read:
    # the driver gives that connection up and opens a new one for the next cycle.
    peer, _ = _abort_then_recover(socketcand, "badtext@1:150", "receive error")
    assert peer.wait("stop")["cycle_state"] == "capturing"
    peer.wait("client", count=4)  # probe + link, then probe + link again
    assert len(peer.named("client")) == 4


def test_unrelated_frames_on_the_bus_do_not_disturb_a_capture(socketcand: Any) -> None:
    peer, ctrl = socketcand("--fault=foreign@1:100")
    driver = driver_for(ctrl)

    async def one() -> Capture:
        await driver.connect()
        try:
            return await guarded(driver, ctrl, "j1")
        finally:
            await driver.close()

    assert len(run(one())) == 401
    assert peer.wait("fault")["kind"] == "foreign"


def test_a_stalled_controller_is_lost_and_its_motion_stopped(socketcand: Any) -> None:
    peer, ctrl = socketcand("--fault=stall@1:100x3")
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            with pytest.raises(CycleAborted, match=r"stalled|status") as aborted:
                await guarded(driver, ctrl, "j1")
            # The stall lasts 3 s: noticed by the driver, not at the guard's overrun deadline;
            # the standstill check after the stop read the too-old status and said so.
            assert "overran" not in str(aborted.value)
            assert "status frame is" in str(aborted.value) or "at rest" in str(aborted.value)
            await _until_stopped(driver, 5.0)  # and the controller is back once it answers
        finally:
            await driver.close()

    run(scenario())
    stop = peer.wait("stop")  # the controller still reads while it does not answer
    assert stop["cycle_state"] == "capturing"
    assert peer.wait("cycle_aborted")["cycle"] == 1


def test_peer_killed_mid_capture(socketcand: Any) -> None:
    peer, ctrl = socketcand("--fault=kill@1:200")
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            with pytest.raises(CycleAborted, match=r"CAN link \w+: connection (closed|lost)"):
                await guarded(driver, ctrl, "j1")
            with pytest.raises(DriverError, match="CAN link down"):
                await driver.read_status()
            with pytest.raises(DriverError, match="STOP not sent"):
                await driver.stop_motion()  # said loudly: the stop could not be delivered
        finally:
            await driver.close()

    run(scenario())
    assert peer.proc.wait(5) == -9


def test_disconnect_mid_capture_the_stop_goes_out_on_reconnect(socketcand: Any) -> None:
    # The peer's close arrives as an orderly EOF or, if data was in flight, as a reset.
    closed = "connection closed by the peer|Connection reset by peer"
    peer, _ = _abort_then_recover(socketcand, "disconnect@1:200", closed)
    # No STOP could pass the dropped connection: the driver owed it and sent it on reconnect.
    assert peer.wait("stop")["cycle_state"] == "capturing"
    assert peer.wait("cycle_done")["cycle"] == 2
    assert len(peer.named("client")) == 4


def test_agent_killed_mid_capture_the_controller_watchdog_stops(
    socketcand: Any, tmp_path: Path
) -> None:
    peer, ctrl = socketcand()
    config = write(tmp_path / "agent.yaml", config_text("socketcand", "can0", ctrl.settings.port))
    client = Peer(
        "tests.peers.can_netns_client",
        [
            "--config",
            str(config),
            "--controller",
            "cell1",
            "--joint",
            "j1",
            "--out",
            str(tmp_path / "x.npz"),
        ],
    )
    try:
        peer.wait("capturing", 10.0)
        client.proc.kill()  # the agent dies: no STOP, no heartbeat
        watchdog = peer.wait("watchdog", 3.0)
    finally:
        client.stop()
    assert watchdog["cycle"] == 1 and 0 < watchdog["sample"] < 401
    assert peer.wait("cycle_aborted")["cycle"] == 1 and peer.named("stop") == []


def test_controller_leaving_the_stopped_state_aborts_and_stops(socketcand: Any) -> None:
    peer, ctrl = socketcand("--fault=production@1:150")
    driver = driver_for(ctrl)

    async def scenario() -> None:
        await driver.connect()
        try:
            with pytest.raises(CycleAborted, match="controller is in production mode"):
                await guarded(driver, ctrl, "j1")
        finally:
            await driver.close()

    run(scenario())
    assert peer.wait("stop")["cycle_state"] == "capturing"
    assert peer.wait("fault")["sample"] == 150


def test_cancelling_the_cycle_sends_stop(socketcand: Any) -> None:
    peer, ctrl = socketcand()
    driver = driver_for(ctrl)

    # A 4 s capture, so the cancel lands in it even on a busy machine.
    long = dataclasses.replace(ctrl.joints[0].backlash_cycle, load_turns=10.0)
    cycle = backlash_cycle(ctrl, dataclasses.replace(ctrl.joints[0], backlash_cycle=long))

    async def scenario() -> None:
        await driver.connect()
        try:
            task = asyncio.create_task(driver.run_cycle(cycle))
            await asyncio.to_thread(peer.wait, "capturing", 10.0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await driver.close()

    run(scenario())
    assert peer.wait("stop", 5.0)["cycle_state"] == "capturing"
    assert driver.stop_commands_sent == 1


def test_the_daemon_goes_on_after_an_aborted_cycle(socketcand: Any, tmp_path: Path) -> None:
    peer, ctrl = socketcand("--fault=drop@1:100x2")
    state = tmp_path / "state"
    text = config_text("socketcand", "can0", ctrl.settings.port)
    text = f"agent:\n  state_dir: {state}\n" + text
    config = load_config(write(tmp_path / "daemon.yaml", text))
    agent = Agent(config, once=True, wait_for_stop_s=5.0)
    code = run(agent.run(), timeout=60.0)
    assert code == EX_UNAVAILABLE  # --once: one of the stop's cycles was aborted
    report = json.loads(next(agent.reports[0].glob("*.json")).read_text())
    by_joint = {j["joint"]: j for j in report["joints"]}
    assert "lost" in (by_joint["j1"].get("error") or "")
    assert by_joint["j2"].get("error") is None
    assert peer.wait("stop")["cycle_state"] == "capturing"
    assert [d["cycle"] for d in peer.named("cycle_done")] == [2]
