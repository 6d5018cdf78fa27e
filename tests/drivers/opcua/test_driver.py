"""OPC UA driver against a real asyncua server process playing the controller (tests/peers).

Every test talks to the peer over loopback; nothing of the driver is mocked. The pure parts
(chunk pairing and assembly, status decoding, settings) are in test_chunks.py, the stop on a
cancelled cycle and the controller's watchdog in test_watchdog.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.errors import CycleAborted, DriverError, InterlockError
from agent.estimation.backlash.fit import fit_backlash
from agent.kinds.backlash.calibration import fit_settings
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.daemon import Agent
from agent.service.exit_codes import EX_UNAVAILABLE
from drivers.base import ControllerMode, load_driver_class
from drivers.opcua.capture import (
    expected_samples,
)
from drivers.opcua.driver import OpcUaDriver
from drivers.opcua.session import RejectedError
from drivers.opcua.settings import OpcUaSecurity, OpcUaUser
from tests.peers.opcua.certs import make_certificate
from tests.peers.opcua.harness import (
    NODES,
    VARIABLE_TRIGGER,
    PeerProcess,
    Plant,
    config_text,
)
from tests.support.drivers.opcua import (
    controller,
    driver_for,
    guarded,
    run,
    sim_capture,
    start_peer,
)

# --- acceptance: a full cycle through the peer matches the simulated fake ------------------------


def test_registered_entry_point_loads_this_driver() -> None:
    assert load_driver_class("opcua") is OpcUaDriver


def test_full_cycle_through_peer_matches_simulated_fake(peer_config: Path, tmp_path: Path) -> None:
    # A fresh peer: its first cycle uses the seed of the simulated fake's first cycle.
    peer = start_peer(peer_config, tmp_path)
    ctrl = controller(peer_config, peer.endpoint)
    cycle = backlash_cycle(ctrl, ctrl.joints[0])

    async def go() -> tuple[Any, Any]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            status = await driver.read_status()
            capture = await guarded(driver, ctrl)
            # The watchdog counter moved all through the cycle (0.1 s beats, 0.2 s of motion).
            assert driver.heartbeats_sent >= 2
            return status, capture
        finally:
            await driver.close()

    try:
        status, capture = run(go())
    finally:
        peer.stop()
    assert status.mode is ControllerMode.STOPPED and status.permission
    assert status.joint_positions_rad == {"axis4": 0.0}
    assert status.speed_override == pytest.approx(1.0) and status.alarms == ()
    reference = sim_capture(ctrl, cycle)
    assert len(capture) == expected_samples(cycle) == len(reference)
    # Counts and Double times travel exactly; current goes as Float (float32) on the wire.
    np.testing.assert_array_equal(capture.time_s, reference.time_s)
    np.testing.assert_array_equal(
        capture.channels["motor_counts"], reference.channels["motor_counts"]
    )
    np.testing.assert_array_equal(
        capture.channels["motor_pos_rad"], reference.channels["motor_pos_rad"]
    )
    # Same link angle up to whole turns (single-turn counts) and one tick: the peer re-quantises
    # the simulation's link angle, which already carries a turn offset, into counts.
    link_diff = capture.channels["link_pos_rad"] - reference.channels["link_pos_rad"]
    whole_turns = np.round(link_diff[0] / (2 * math.pi)) * 2 * math.pi
    np.testing.assert_allclose(link_diff, whole_turns, atol=1.01 * 2 * math.pi / 2**19)
    np.testing.assert_allclose(
        capture.channels["current_a"], reference.channels["current_a"], rtol=1e-6, atol=1e-6
    )
    fit = fit_backlash(capture, fit_settings(ctrl.joints[0]))
    fit_ref = fit_backlash(reference, fit_settings(ctrl.joints[0]))
    assert fit.amplitude_rad_s == pytest.approx(fit_ref.amplitude_rad_s, rel=1e-9)
    assert capture.meta.extra["driver"] == "opcua"
    assert capture.meta.commanded_speed_rad_s == cycle.motor_speed_rad_s


def test_variable_write_trigger_and_stop(tmp_path: Path, shared: tuple[Path, PeerProcess]) -> None:
    peer = shared[1]
    path = tmp_path / "variable.yaml"
    path.write_text(config_text(trigger=VARIABLE_TRIGGER))
    ctrl = controller(path, peer.endpoint)

    async def go() -> tuple[int, int, str]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            capture = await guarded(driver, ctrl)
            async with Plant(peer.endpoint) as plant:
                before = await plant.read("StopRequests")
                await driver.stop_motion()  # safe when idle, and it reaches the controller
                await asyncio.sleep(0.1)
                return (
                    len(capture),
                    await plant.read("StopRequests") - before,
                    await plant.cycle_status(),
                )
        finally:
            await driver.close()

    samples, stops, status = run(go())
    assert samples == expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))
    assert stops == 1 and status == "done"


def test_interlocks_refuse_without_permission_and_controller_refuses_too(
    shared: tuple[Path, PeerProcess],
) -> None:
    config, peer = shared
    ctrl = controller(config, peer.endpoint)

    async def go() -> tuple[str, str]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            async with Plant(peer.endpoint) as plant:
                started = await plant.read("CyclesStarted")
                await plant.set_permission(False)
                try:
                    with pytest.raises(InterlockError) as refused:
                        await guarded(driver, ctrl)
                    # Even without the agent's interlocks the controller refuses to move.
                    with pytest.raises(DriverError) as direct:
                        await driver.run_cycle(backlash_cycle(ctrl, ctrl.joints[0]))
                finally:
                    await plant.set_permission(True)
                assert await plant.read("CyclesStarted") == started
                return str(refused.value), str(direct.value)
        finally:
            await driver.close()

    refused, direct = run(go())
    assert "permission" in refused
    assert "BadInvalidState" in direct


def test_secure_channel_basic256sha256_with_user_password(
    peer_config: Path, tmp_path: Path
) -> None:
    certs = tmp_path / "pki"
    server = make_certificate(certs, "server", "urn:jha:test:opcua-controller", server=True)
    client = make_certificate(certs, "client", "urn:joint-health-agent:client", server=False)
    stranger = make_certificate(certs, "stranger", "urn:joint-health-agent:client", server=False)
    (certs / "password").write_text("s3cret\n")
    (certs / "wrong").write_text("guess\n")
    for secret in (client.private_key, stranger.private_key, certs / "password", certs / "wrong"):
        secret.chmod(0o600)  # the driver refuses secrets other users can read
    peer = start_peer(
        peer_config,
        tmp_path,
        "--security",
        "both",
        "--cert",
        str(server.certificate),
        "--key",
        str(server.private_key),
        "--trust",
        str(client.certificate),
        "--users",
        "agent:s3cret",
    )
    security = OpcUaSecurity(
        policy="Basic256Sha256",
        mode="SignAndEncrypt",
        certificate=str(client.certificate),
        private_key=str(client.private_key),
        server_certificate=str(server.certificate),
    )
    user = OpcUaUser(username="agent", password_file=str(certs / "password"))
    ctrl = controller(peer_config, peer.endpoint, security=security, user=user)

    async def go() -> int:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            return len(await guarded(driver, ctrl))  # one cycle: a secure channel is slower
        finally:
            await driver.close()

    async def sign_only() -> ControllerMode:
        signed = dataclasses.replace(security, mode="Sign")
        driver = driver_for(controller(peer_config, peer.endpoint, security=signed, user=user))
        await driver.connect()
        try:
            return (await driver.read_status()).mode
        finally:
            await driver.close()

    async def refused(**changes: Any) -> str:
        bad = dataclasses.replace(ctrl, settings=dataclasses.replace(ctrl.settings, **changes))
        driver = driver_for(bad)
        started = time.monotonic()
        with pytest.raises(DriverError) as exc:
            await driver.connect()
        assert time.monotonic() - started < 4.0  # no retries: a rejection is final
        return str(exc.value)

    try:
        assert run(go()) == expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))
        assert run(sign_only()) is ControllerMode.STOPPED
        wrong_password = run(
            refused(user=dataclasses.replace(user, password_file=str(certs / "wrong")))
        )
        assert "BadUserAccessDenied" in wrong_password
        # An anonymous, unencrypted client finds no endpoint it may use.
        run(refused(security=OpcUaSecurity(policy="None", allow_none_security=True), user=None))
        # A certificate the controller does not trust cannot open the channel.
        run(
            refused(
                security=dataclasses.replace(
                    security,
                    certificate=str(stranger.certificate),
                    private_key=str(stranger.private_key),
                )
            )
        )
    finally:
        peer.stop()


# --- faults: the cycle is aborted, the stop is sent, nothing is returned, the driver goes on -----


async def _fault_then_recover(
    driver: OpcUaDriver, ctrl: ControllerSettings, endpoint: str, kind: str, after: int
) -> tuple[str, int, str, int]:
    """Inject a fault, watch the cycle abort, then run a good cycle on the same driver."""
    async with Plant(endpoint) as plant:
        await plant.inject(kind, after)
        stops_before = await plant.read("StopRequests")
        with pytest.raises(CycleAborted) as aborted:
            await guarded(driver, ctrl)
        await asyncio.sleep(0.1)
        stops = await plant.read("StopRequests") - stops_before
        status = await plant.cycle_status()
        await plant.set_state("stopped")  # the plant puts the controller back
        capture = await guarded(driver, ctrl)
        return str(aborted.value), stops, status, len(capture)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("skip", "lost"),
        ("garbage_type", "expected numbers, found str values"),
        ("garbage_shape", "motor_counts buffer has 99 samples"),
        ("garbage_range", "outside 0..524287"),
        ("garbage_state", "'banana'"),
        ("leave_stopped", "production"),
    ],
)
def test_fault_aborts_cycle_sends_stop_and_driver_goes_on(
    shared: tuple[Path, PeerProcess], kind: str, message: str
) -> None:
    config, peer = shared
    ctrl = controller(config, peer.endpoint)

    async def go() -> tuple[str, int, str, int]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            return await _fault_then_recover(driver, ctrl, peer.endpoint, kind, after=2)
        finally:
            await driver.close()

    reason, stops, status, good_samples = run(go())
    assert message in reason
    assert stops >= 1 and status == "aborted"
    assert good_samples == expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))


def test_peer_killed_mid_capture_then_reconnects_with_backoff(
    peer_config: Path, tmp_path: Path
) -> None:
    peer = start_peer(peer_config, tmp_path, "--fault", "die", "--fault-after", "5")
    ctrl = controller(peer_config, peer.endpoint)
    replacement: list[PeerProcess] = []

    async def go() -> tuple[str, str, int, int]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            with pytest.raises(CycleAborted) as aborted:
                await guarded(driver, ctrl)
            assert peer.proc is not None and peer.proc.wait(5) == -9  # it killed itself
            started = time.monotonic()
            with pytest.raises(DriverError) as gone:
                await driver.read_status()  # fails at once, never hangs
            assert time.monotonic() - started < 1.5
            # The controller comes back on the same port; the supervisor reconnects.
            replacement.append(start_peer(peer_config, tmp_path, port=peer.port))
            deadline = time.monotonic() + 10
            while not driver.connected and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            capture = await guarded(driver, ctrl)
            return str(aborted.value), str(gone.value), driver.reconnects, len(capture)
        finally:
            await driver.close()

    try:
        reason, gone, reconnects, samples = run(go())
    finally:
        for p in [peer, *replacement]:
            p.stop()
    # Whichever notices the dead peer first: the chunk stream (lost, stalled) or the watchdog
    # writer, whose next write finds the connection closed (seen on an idle fresh-clone run).
    assert "lost" in reason or "stalled" in reason or "watchdog write failed" in reason, reason
    assert "not connected" in gone
    assert reconnects >= 1
    assert samples == expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))


def test_frozen_peer_times_out_and_stop_is_sent_once_it_answers(
    peer_config: Path, tmp_path: Path
) -> None:
    # Real-time pace x2: the cycle still runs when the peer wakes up, so the stop matters.
    peer = start_peer(
        peer_config,
        tmp_path,
        "--fault",
        "freeze",
        "--fault-after",
        "3",
        "--freeze-s",
        "3.0",
        "--speedup",
        "2",
    )
    ctrl = controller(peer_config, peer.endpoint, request_timeout_s=0.5)

    async def go() -> tuple[str, int, str]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            with pytest.raises(CycleAborted) as aborted:
                await guarded(driver, ctrl)
            # Aborted by the request timeout while the peer is frozen, not the overrun deadline.
            assert "overran" not in str(aborted.value)
            deadline = time.monotonic() + 10
            while not driver.connected and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            async with Plant(peer.endpoint) as plant:
                return (
                    str(aborted.value),
                    await plant.read("StopRequests"),
                    await plant.cycle_status(),
                )
        finally:
            await driver.close()

    try:
        reason, stops, status = run(go())
    finally:
        peer.stop()
    assert "no answer" in reason or "stalled" in reason or "timeout" in reason
    # The stop that could not reach the frozen controller went out after the reconnect.
    assert stops >= 1 and status == "aborted"


def test_connect_retries_with_backoff_then_gives_up(peer_config: Path) -> None:
    ctrl = controller(peer_config, "opc.tcp://127.0.0.1:9/jha/", connect_timeout_s=1.0)
    driver = driver_for(ctrl)
    started = time.monotonic()
    with pytest.raises(DriverError) as exc:
        run(driver.connect())
    elapsed = time.monotonic() - started
    assert "gave up after" in str(exc.value)
    # 0.1, 0.2, 0.4 s of backoff fit in 1 s: four attempts, the fifth would overrun.
    assert 3 <= driver.connect_attempts <= 4 and 0.6 < elapsed < 3.0
    with pytest.raises(DriverError, match="not connected"):
        run(driver.read_status())


def test_node_ids_by_namespace_uri_resolve_at_connect(shared: tuple[Path, PeerProcess]) -> None:
    config, peer = shared
    ctrl = controller(config, peer.endpoint)
    status = dataclasses.replace(
        ctrl.settings.status, state="nsu=urn:jha:test:robot;s=Controller.State"
    )
    driver = driver_for(controller(config, peer.endpoint, status=status))

    async def go() -> ControllerMode:
        # The peer is shared: a fault test before this one may have left it in production.
        # The state this test reads is put there first, not assumed.
        async with Plant(peer.endpoint) as plant:
            await plant.set_state("stopped")
        await driver.connect()
        try:
            return (await driver.read_status()).mode
        finally:
            await driver.close()

    assert run(go()) is ControllerMode.STOPPED
    unknown = dataclasses.replace(status, state="nsu=urn:nowhere;s=Controller.State")
    with pytest.raises(RejectedError, match="no namespace 'urn:nowhere'"):
        run(driver_for(controller(config, peer.endpoint, status=unknown)).connect())


def test_config_mismatch_with_server_fails_at_connect(shared: tuple[Path, PeerProcess]) -> None:
    peer_config, peer = shared
    ctrl = controller(peer_config, peer.endpoint)
    trigger = dataclasses.replace(ctrl.settings.cycle.trigger, arguments=("joint_index",))
    bad = dataclasses.replace(ctrl.settings.cycle, trigger=trigger)
    with pytest.raises(RejectedError, match="takes 5 argument"):
        run(driver_for(controller(peer_config, peer.endpoint, cycle=bad)).connect())
    status = dataclasses.replace(ctrl.settings.status, alarms="ns=2;s=NoSuchNode")
    with pytest.raises(RejectedError, match="NoSuchNode does not exist"):
        run(driver_for(controller(peer_config, peer.endpoint, status=status)).connect())
    watchdog = dataclasses.replace(ctrl.settings.watchdog, node=NODES["state"])
    with pytest.raises(RejectedError, match=r"Controller\.State is a String, expected an integer"):
        run(driver_for(controller(peer_config, peer.endpoint, watchdog=watchdog)).connect())


def test_daemon_runs_through_peer_and_goes_on_after_an_aborted_joint(tmp_path: Path) -> None:
    joints = (("axis4", 4), ("axis5", 5))
    peer_yaml = tmp_path / "peer.yaml"
    peer_yaml.write_text(config_text(joints=joints))
    peer = start_peer(peer_yaml, tmp_path, "--fault", "skip", "--fault-after", "3")
    agent_yaml = tmp_path / "agent.yaml"
    agent_yaml.write_text(
        config_text(peer.endpoint, state_dir=str(tmp_path / "state"), joints=joints)
    )
    agent = Agent(load_config(agent_yaml), once=True, wait_for_stop_s=10)
    try:
        code = run(agent.run(), timeout_s=60)
    finally:
        peer.stop()
    assert code == EX_UNAVAILABLE  # --once: one of the stop's cycles was aborted
    report = json.loads(next((tmp_path / "state").rglob("report.json")).read_text())
    by_joint = {j["joint"]: j for j in report["joints"]}
    assert "chunk 4 lost" in by_joint["axis4"]["error"] and by_joint["axis4"]["value"] is None
    assert by_joint["axis5"]["error"] is None and by_joint["axis5"]["value"] > 0
    assert len(list((tmp_path / "state" / "captures" / "robot1").rglob("*.npz"))) == 1  # axis5
