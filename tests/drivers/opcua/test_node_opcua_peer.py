"""The OPC UA driver against node-opcua (tests/peers/opcua_node): a server stack written apart
from asyncua, the client's own library, so that what the asyncua peer and the driver share by
construction is checked against another reading of the specification.

node-opcua is left as it ships: it revises the publishing interval to at least 50 ms and the
sampling interval of an exception-based variable to its advertised MinSupportedSampleRate (100 ms),
within which it folds value changes (OPC 10000-4 5.12.1.2), checks the client certificate against
its PKI folder and the application URI in it, and types every write and method argument.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.errors import CycleAborted, DriverError
from agent.estimation.backlash.fit import fit_backlash
from agent.kinds.backlash.calibration import fit_settings
from agent.kinds.backlash.kind import backlash_cycle
from drivers.opcua.capture import expected_samples
from drivers.opcua.settings import OpcUaSecurity
from tests.peers.opcua.certs import make_certificate
from tests.peers.opcua.harness import (
    VARIABLE_TRIGGER,
    NodePeerProcess,
    Plant,
    config_text,
)
from tests.peers.opcua.physics import cycle_samples, peer_cycle
from tests.support.drivers.opcua import BACKLASH_RAD, SEED, controller, driver_for, guarded, run

# One chunk is a second of samples (500 at 500 Hz) published every 250 ms (4x real time):
# slower than node-opcua's 100 ms sampling interval, so no change is folded.
SLOW_CHUNKS = ("--chunk-samples", "500", "--speedup", "4")
AGENT_URI = "urn:joint-health-agent:client"


def node_peer(directory: Path, config: Path, *args: str, port: int = 0) -> NodePeerProcess:
    peer = NodePeerProcess(
        config,
        ["--backlash", f"axis4={BACKLASH_RAD}", "--seed", str(SEED), *args],
        workdir=directory,
        port=port,
        log=directory / "node_peer.log",
    )
    peer.start()
    return peer


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, NodePeerProcess]]:
    directory = tmp_path_factory.mktemp("node_opcua")
    config = directory / "peer.yaml"
    config.write_text(config_text())
    peer = node_peer(directory, config, *SLOW_CHUNKS)
    yield config, peer
    peer.stop()


async def one_cycle(ctrl: Any) -> Any:
    driver = driver_for(ctrl)
    await driver.connect()
    try:
        return await guarded(driver, ctrl)
    finally:
        await driver.close()


@pytest.mark.parametrize("trigger", ["method", "variable"])
def test_a_cycle_through_node_opcua_captures_what_the_fake_simulates(
    plain: tuple[Path, NodePeerProcess], tmp_path: Path, trigger: str
) -> None:
    config, peer = plain
    if trigger == "variable":
        config = tmp_path / "variable.yaml"
        config.write_text(config_text(trigger=VARIABLE_TRIGGER))
    ctrl = controller(config, peer.endpoint)
    cycle = backlash_cycle(ctrl, ctrl.joints[0])

    async def go() -> tuple[Any, int]:
        async with Plant(peer.endpoint) as plant:
            started = await plant.read("CyclesStarted")
        return await one_cycle(ctrl), started

    capture, cycles_before = run(go())
    # What the peer published: its n-th cycle has seed SEED * 1000 + n (the simulated fake's rule).
    joint = ctrl.joints[0]
    sent = cycle_samples(
        joint,
        peer_cycle(joint, cycle.motor_speed_rad_s, cycle.settle_s, cycle.duration_s,
                   cycle.sample_rate_hz),
        BACKLASH_RAD,
        noise_counts=1.0,
        seed=SEED * 1000 + cycles_before,
    )  # fmt: skip
    assert len(capture) == expected_samples(cycle) == len(sent)
    # Counts and Double times travel exactly; current goes as Float (float32) on the wire.
    np.testing.assert_array_equal(capture.time_s, sent.time_s)
    np.testing.assert_array_equal(capture.channels["motor_counts"], sent.motor_counts)
    link_rad = sent.link_counts * (2 * math.pi / 2**19)
    turns_off = capture.channels["link_pos_rad"] - link_rad  # whole turns: the driver unwraps
    np.testing.assert_allclose(np.remainder(turns_off + math.pi, 2 * math.pi) - math.pi, 0.0,
                               atol=1e-9)  # fmt: skip
    np.testing.assert_allclose(
        capture.channels["current_a"], sent.current_a.astype(np.float32), rtol=0, atol=0
    )
    fit = fit_backlash(capture, fit_settings(joint))
    assert fit.amplitude_rad_s > 0 and fit.converged


@pytest.mark.parametrize(("min_sample_rate_ms", "outcome"), [("100", "refused"), ("0", "complete")])
def test_chunks_faster_than_the_granted_sampling_interval_are_refused_and_say_why(
    tmp_path: Path, min_sample_rate_ms: str, outcome: str
) -> None:
    """A chunk every 8 ms (100 samples at 500 Hz, 25x real time). node-opcua as it ships grants
    100 ms and folds the changes in between: the k-th value of each buffer is no longer chunk k,
    so the capture must be refused with the reason and the motion stopped. A server that grants
    0 reports every change, and the same chunks make a complete capture."""
    config = tmp_path / "peer.yaml"
    config.write_text(config_text())
    peer = node_peer(
        tmp_path,
        config,
        "--chunk-samples",
        "100",
        "--speedup",
        "25",
        "--min-sample-rate-ms",
        min_sample_rate_ms,
    )
    ctrl = controller(config, peer.endpoint)

    async def go() -> tuple[str, int, str]:
        try:
            result = f"{len(await one_cycle(ctrl))} samples"
        except CycleAborted as exc:
            result = str(exc)
        async with Plant(peer.endpoint) as plant:
            return result, await plant.read("StopRequests"), await plant.cycle_status()

    try:
        result, stops, status = run(go())
    finally:
        peer.stop()
    if outcome == "refused":
        assert "lost" in result and "sampling interval" in result, result
        assert "every 100 ms" in result and "grant these nodes a sampling interval of 0" in result
        assert stops >= 1 and status == "aborted"
    else:
        assert result == f"{expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))} samples"
        assert status == "done"


def test_basic256sha256_where_each_side_trusts_the_others_certificate_only(
    tmp_path: Path,
) -> None:
    """SignAndEncrypt with node-opcua's certificate manager: the server trusts the agent's
    certificate from its PKI folder and checks the application URI in it; the agent trusts the
    server's from its trust list. A stranger's certificate and an untrusted server are refused
    without a retry."""
    keys = tmp_path / "keys"
    server = make_certificate(keys, "controller", "urn:jha:test:opcua-controller", server=True)
    agent = make_certificate(keys, "agent", AGENT_URI, server=False)
    stranger = make_certificate(keys, "stranger", AGENT_URI, server=False)
    for key in (agent.private_key, stranger.private_key):
        key.chmod(0o600)  # the driver refuses keys others can read
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    (trusted / server.certificate.name).write_bytes(server.certificate.read_bytes())
    empty = tmp_path / "trusted_nothing"
    empty.mkdir()
    config = tmp_path / "peer.yaml"
    config.write_text(config_text())
    peer = NodePeerProcess(
        config,
        ["--security", "encrypt", "--trust", str(agent.certificate), *SLOW_CHUNKS],
        workdir=tmp_path,
        log=tmp_path / "node_peer.log",
        certificate=server,
    )
    peer.start()
    security = OpcUaSecurity(
        policy="Basic256Sha256",
        mode="SignAndEncrypt",
        certificate=str(agent.certificate),
        private_key=str(agent.private_key),
        trusted_certificates=str(trusted),
    )
    ctrl = controller(config, peer.endpoint, security=security)

    async def refused(**changes: Any) -> str:
        bad = dataclasses.replace(security, **changes)
        driver = driver_for(controller(config, peer.endpoint, security=bad))
        with pytest.raises(DriverError) as exc:
            await driver.connect()
        return str(exc.value)

    try:
        samples = len(run(one_cycle(ctrl)))
        stranger_refused = run(
            refused(certificate=str(stranger.certificate), private_key=str(stranger.private_key))
        )
        server_untrusted = run(refused(trusted_certificates=str(empty)))
    finally:
        peer.stop()
    assert samples == expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))
    assert "refused the secure channel" in stranger_refused, stranger_refused
    assert "add the certificate to the server's trusted list" in stranger_refused
    assert "server certificate refused" in server_untrusted, server_untrusted


def test_a_server_restart_mid_capture_aborts_the_cycle_and_the_driver_comes_back(
    tmp_path: Path,
) -> None:
    """node-opcua killed after the second chunk (SIGKILL: no goodbye on the wire), then started
    again on the same port: the cycle is aborted, the driver reconnects by itself, and the
    next cycle on the new server is complete."""
    config = tmp_path / "peer.yaml"
    config.write_text(config_text())
    peer = node_peer(tmp_path, config, *SLOW_CHUNKS, "--fault", "die", "--fault-after", "2")
    ctrl = controller(config, peer.endpoint)
    replacement: list[NodePeerProcess] = []

    async def go() -> tuple[str, int, int]:
        driver = driver_for(ctrl)
        await driver.connect()
        try:
            with pytest.raises(CycleAborted) as aborted:
                await guarded(driver, ctrl)
            assert peer.proc is not None and peer.proc.wait(5) == -9  # it killed itself
            again = node_peer(tmp_path, config, *SLOW_CHUNKS, port=peer.port)
            replacement.append(again)
            for _ in range(200):  # the supervisor reconnects with backoff (0.1-0.4 s here)
                if driver.connected:
                    break
                await asyncio.sleep(0.05)
            capture = await guarded(driver, ctrl)
            return str(aborted.value), driver.reconnects, len(capture)
        finally:
            await driver.close()

    try:
        reason, reconnects, samples = run(go(), timeout_s=60.0)
    finally:
        for p in [peer, *replacement]:
            p.stop()
    assert "lost" in reason or "stalled" in reason or "watchdog write failed" in reason, reason
    assert reconnects >= 1
    assert samples == expected_samples(backlash_cycle(ctrl, ctrl.joints[0]))
