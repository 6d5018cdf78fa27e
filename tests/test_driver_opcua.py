"""OPC UA driver against a real asyncua server process playing the controller (tests/peers).

Every test talks to the peer over loopback; nothing of the driver is mocked. The pure parts
(chunk pairing and assembly, status decoding, settings) also get direct and property tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.errors import ConfigError, CycleAborted, DriverError, InterlockError
from agent.estimation.backlash.fit import fit_backlash
from agent.kinds.backlash.calibration import fit_settings
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.daemon import Agent
from agent.service.interlocks import CycleLimits, run_guarded_cycle
from drivers.base import BacklashCycle, ControllerMode, load_driver_class
from drivers.opcua.capture import (
    CaptureAssembler,
    ChunkError,
    ChunkPairer,
    decode_chunk,
    expected_samples,
)
from drivers.opcua.driver import OpcUaDriver
from drivers.opcua.session import RejectedError
from drivers.opcua.settings import OpcUaSecurity, OpcUaSettings, OpcUaUser
from drivers.opcua.status import RawValue, decode_status
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointSettings, SimSettings
from tests.peers.opcua.certs import make_certificate
from tests.peers.opcua.harness import (
    NODES,
    TEST_TIMING,
    VARIABLE_TRIGGER,
    PeerProcess,
    Plant,
    config_text,
)
from tests.summary import record

T = TypeVar("T")
SEED = 7
BACKLASH_RAD = 1.2e-3
SPEEDUP = "25"  # the peer publishes 25x faster than real time: a 4.8 s capture takes 0.2 s


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 40.0) -> T:
    """Every async test body runs under a timeout, so a hang fails instead of blocking."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


@pytest.fixture
def peer_config(tmp_path: Path) -> Path:
    path = tmp_path / "peer.yaml"
    path.write_text(config_text())
    return path


def start_peer(config: Path, tmp_path: Path, *extra: str, port: int = 0) -> PeerProcess:
    peer = PeerProcess(
        config,
        [
            "--backlash",
            f"axis4={BACKLASH_RAD}",
            "--seed",
            str(SEED),
            "--speedup",
            SPEEDUP,
            "--chunk-samples",
            "100",
            *extra,
        ],
        port=port,
        log=tmp_path / "peer.log",
    )
    peer.start()
    return peer


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One peer for the tests that leave it as they found it (faults act once)."""
    directory = tmp_path_factory.mktemp("opcua_shared")
    config = directory / "peer.yaml"
    config.write_text(config_text())
    # 10x real time: a cycle takes half a second, so a stop sent on a fault in chunk 2 reaches
    # the controller while it still moves, even on a loaded machine.
    p = start_peer(config, directory, "--speedup", "10")
    yield config, p
    p.stop()


def controller(config: Path, endpoint: str, **changes: Any) -> ControllerSettings:
    ctrl = load_config(config).controllers[0]
    return dataclasses.replace(
        ctrl, settings=dataclasses.replace(ctrl.settings, endpoint=endpoint, **changes)
    )


def driver_for(ctrl: ControllerSettings) -> OpcUaDriver:
    return OpcUaDriver(ctrl.name, ctrl.settings, ctrl.joints)


async def guarded(driver: OpcUaDriver, ctrl: ControllerSettings) -> Any:
    joint = ctrl.joints[0]
    return await run_guarded_cycle(
        driver,
        backlash_cycle(ctrl, joint),
        ctrl.interlocks,
        joint,
        CycleLimits(status_timeout_s=2.5, overrun_margin_s=5.0),
    )


def sim_capture(ctrl: ControllerSettings, cycle: BacklashCycle) -> Any:
    sim = SimDriver(
        ctrl.name,
        SimSettings(seed=SEED, joints={"axis4": SimJointSettings(backlash_rad=BACKLASH_RAD)}),
        ctrl.joints,
    )

    async def go() -> Any:
        await sim.connect()
        return await sim.run_cycle(cycle)

    return run(go())


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
    assert "lost" in reason or "stalled" in reason
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
            started = time.monotonic()
            with pytest.raises(CycleAborted) as aborted:
                await guarded(driver, ctrl)
            assert time.monotonic() - started < 2.8  # aborted while the peer is still frozen
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
    assert code == 0
    report = json.loads(next((tmp_path / "state").rglob("report.json")).read_text())
    by_joint = {j["joint"]: j for j in report["joints"]}
    assert "chunk 4 lost" in by_joint["axis4"]["error"] and by_joint["axis4"]["value"] is None
    assert by_joint["axis5"]["error"] is None and by_joint["axis5"]["value"] > 0
    assert len(list((tmp_path / "state" / "captures" / "robot1").rglob("*.npz"))) == 1  # axis5


# --- pure parts: chunk pairing and assembly, status decoding, settings -------------------------


def _chunks(n: int, sizes: list[int], rate: float = 1000.0) -> list[dict[str, Any]]:
    out, i, seq = [], 0, 41
    for size in sizes:
        j = min(n, i + size)
        if i >= j:
            break
        idx = np.arange(i, j)
        out.append(
            {
                "sequence": seq,
                "time": (idx / rate).tolist(),
                "motor_counts": ((idx * 997) % 2**19).tolist(),
            }
        )
        i, seq = j, seq + 1
    return out


def _assemble(chunks: list[dict[str, Any]], n: int) -> CaptureAssembler:
    asm = CaptureAssembler(first_sequence=41, expected_samples=n, sample_rate_hz=1000.0)
    for raw in chunks:
        asm.add(decode_chunk(raw, encoder_bits=19))
    return asm


_CYCLE = BacklashCycle("c", "j", 1, 10.0, 40.0, 0.2, 0.0, 1000.0, 19, 0.0)


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 60), min_size=1, max_size=60))
def test_any_chunking_reassembles_the_same_samples(sizes: list[int]) -> None:
    n = expected_samples(_CYCLE)
    sizes = [*sizes, n]  # the last chunk takes whatever is left
    asm = _assemble(_chunks(n, sizes), n)
    cap = asm.capture(_CYCLE, machine="c", source="t")
    assert len(cap) == n
    np.testing.assert_array_equal(cap.channels["motor_counts"], (np.arange(n) * 997) % 2**19)


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=3, max_size=40), data=st.data())
def test_any_lost_or_repeated_chunk_is_detected(sizes: list[int], data: st.DataObject) -> None:
    n = expected_samples(_CYCLE)
    chunks = _chunks(n, [*sizes, n])
    k = data.draw(st.integers(0, len(chunks) - 1))
    damaged = data.draw(
        st.sampled_from(
            [
                chunks[:k] + chunks[k + 1 :],  # lost
                chunks[: k + 1] + chunks[k:],  # published twice
            ]
        )
    )
    with pytest.raises(ChunkError):
        asm = _assemble(damaged, n)
        asm.capture(_CYCLE, machine="c", source="t")


def test_pairer_pairs_by_order_and_refuses_overflow() -> None:
    pairer = ChunkPairer(("sequence", "time", "motor_counts"))
    pairer.push("time", [0.0])
    pairer.push("time", [0.001])
    pairer.push("sequence", 1)
    assert pairer.pop() is None  # motor counts of chunk 1 not in yet
    pairer.push("motor_counts", [5])
    assert pairer.pop() == {"sequence": 1, "time": [0.0], "motor_counts": [5]}
    assert pairer.backlog == 1
    with pytest.raises(ChunkError, match="overflowed"):
        pairer.push("motor_counts", [6], overflow=True)
    with pytest.raises(ChunkError, match="bad"):
        pairer.push("motor_counts", [6], good=False)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"time": "nope"}, "expected an array"),
        ({"time": [0.0, float("nan")]}, "not finite"),
        ({"motor_counts": [1.5, 2.0]}, "fractional"),
        ({"motor_counts": [True, False]}, "expected numbers"),
        ({"motor_counts": [[1], [2]]}, "found list values"),
        ({"sequence": -1}, "sequence number"),
        ({"sequence": True}, "sequence number"),
        ({"time": []}, "empty"),
    ],
)
def test_decode_chunk_refuses_garbage(change: dict[str, Any], message: str) -> None:
    raw = {"sequence": 3, "time": [0.0, 0.001], "motor_counts": [1, 2], **change}
    with pytest.raises(ChunkError, match=message):
        decode_chunk(raw, encoder_bits=19)


def test_assembler_detects_a_sample_gap_inside_a_chunk() -> None:
    asm = CaptureAssembler(first_sequence=0, expected_samples=4, sample_rate_hz=1000.0)
    with pytest.raises(ChunkError, match="samples missing"):
        asm.add(
            decode_chunk(
                {"sequence": 0, "time": [0.0, 0.001, 0.003], "motor_counts": [1, 2, 3]},
                encoder_bits=19,
            )
        )


def test_status_decoding_maps_enumerations_scales_and_refuses_garbage(peer_config: Path) -> None:
    ctrl = controller(peer_config, "opc.tcp://127.0.0.1:4840/jha/")
    nodes = dataclasses.replace(
        ctrl.settings.status,
        state_values={2: ControllerMode.STOPPED},
        joint_position_scale=math.pi / 180,
    )

    def raw(**values: Any) -> dict[str, RawValue]:
        base = {
            "state": 2,
            "permission": True,
            "joint_positions": [0, 0, 0, 90.0],
            "alarms": [],
            "speed_override": 50.0,
        }
        return {k: RawValue(k, v) for k, v in {**base, **values}.items()}

    status = decode_status(raw(), nodes, ctrl.joints)
    assert status.mode is ControllerMode.STOPPED
    assert status.joint_positions_rad["axis4"] == pytest.approx(math.pi / 2)
    assert status.speed_override == pytest.approx(0.5)
    assert decode_status(raw(alarms=7), nodes, ctrl.joints).alarms == ("alarm code 7",)
    for bad, message in [
        (raw(state=3), "does not map"),
        (raw(permission=1), "expected a Boolean"),
        (raw(joint_positions=["a"]), "array of numbers"),
        (raw(speed_override=None), "finite number"),
        (
            {**raw(), "state": RawValue("state", 2, good=False, status="BadNoCommunication")},
            "bad quality",
        ),
    ]:
        with pytest.raises(DriverError, match=message):
            decode_status(bad, nodes, ctrl.joints)


def test_settings_errors_name_file_line_and_field(tmp_path: Path) -> None:
    text = (
        config_text()
        .replace(
            f'          object: "{NODES["controller"]}"\n          method: "{NODES["start"]}"',
            f'          method: "{NODES["start"]}"',
        )
        .replace('state: "ns=2;s=Controller.State"', 'state: "Controller.State"')
        .replace(
            "      security: {policy: None, allow_none_security: true}\n",
            "      security: {policy: Basic256Sha256, mode: Sign}\n",
        )
    )
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    lines = text.splitlines()
    message = str(exc.value)

    def line_of(fragment: str) -> int:
        return next(i for i, line in enumerate(lines, 1) if fragment in line)

    state_line = line_of('state: "Controller.State"')
    assert f"bad.yaml:{state_line}: controllers[0].settings.status.state" in message
    assert "trigger.object: required with method" in message
    assert f"bad.yaml:{line_of('security:')}" in message and "certificate: required" in message
    assert isinstance(load_config(_good(tmp_path)).controllers[0].settings, OpcUaSettings)


def _good(tmp_path: Path) -> Path:
    path = tmp_path / "good.yaml"
    path.write_text(config_text())
    return path


# --- safety: cancellation (G8) and the controller's liveness watchdog (G6) -----------------------


async def mid_capture(
    plant: Plant, cycles_before: int, expected: int, task: asyncio.Future[Any] | None = None
) -> None:
    """Until the controller's next cycle has published 200 samples and is still publishing."""
    deadline = time.monotonic() + 20.0
    while True:
        assert time.monotonic() < deadline, "the cycle never got under way"
        assert task is None or not task.done(), "the cycle ended before it got under way"
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
    path.write_text(config_text(load_turns=40.0))
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
        cwd=Path(__file__).parents[1],
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
    # 16 s of motion at 10x; the tight timeout is written to the controller at the trigger.
    path.write_text(config_text(load_turns=40.0, watchdog={"interval_s": 0.1, "timeout_s": 0.5}))
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
