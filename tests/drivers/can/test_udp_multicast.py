"""The CAN driver over python-can's udp_multicast bus inside a network namespace of the test's
own, against tests/peers/udp_multicast_peer.py (its own process, in the namespace too)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Awaitable, Iterator
from pathlib import Path

import numpy as np
import pytest

from agent.capture.files import load_capture
from agent.capture.model import Capture
from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.estimation.backlash.fit import fit_backlash
from agent.kinds.backlash.calibration import fit_settings
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from drivers.can.driver import CanDriver
from tests.peers.can_harness import Peer, config_text, peer_args, sim_captures, write


def driver_for(ctrl: ControllerSettings) -> CanDriver:
    return CanDriver(ctrl.name, ctrl.settings, ctrl.joints)


def guarded(driver: CanDriver, ctrl: ControllerSettings, joint_name: str) -> Awaitable[Capture]:
    joint = next(j for j in ctrl.joints if j.name == joint_name)
    return run_guarded_cycle(driver, backlash_cycle(ctrl, joint), ctrl.interlocks, joint)


def _ip(*args: str) -> None:
    ip = shutil.which("ip")
    if ip is None:
        pytest.fail("`ip` (iproute2) is not installed: apt-get install iproute2")
    done = subprocess.run([ip, *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        pytest.fail(f"`ip {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"jha-can-{os.getpid()}"
    _ip("netns", "add", name)
    try:
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up", "multicast", "on")
        _ip("netns", "exec", name, "ip", "route", "add", "224.0.0.0/4", "dev", "lo")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def test_udp_multicast_in_a_network_namespace(netns: str, tmp_path: Path) -> None:
    config = write(tmp_path / "udp.yaml", config_text("udp_multicast", "239.74.163.2", 43113))
    prefix = ("ip", "netns", "exec", netns)
    peer = Peer(
        "tests.peers.udp_multicast_peer", peer_args(config, "--fault=garbage@2:100"), prefix
    )
    try:
        peer.wait("listening")
        results = []
        for k in (1, 2):
            out = tmp_path / f"capture{k}.npz"
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
                    str(out),
                ],
                prefix,
            )
            client.proc.wait(60)
            assert client.proc.returncode == 0, client.proc.stderr.read()  # type: ignore[union-attr]
            results.append(client.events[0])
    finally:
        peer.stop()
    ok, garbage = results
    assert ok["outcome"] == "ok" and ok["stats"]["lost_frames"] == 0
    assert garbage["outcome"] == "aborted" and "could not unpack" in garbage["error"]
    assert garbage["stop_commands_sent"] >= 1 and peer.wait("stop")["cycle_state"] == "capturing"
    ctrl = load_config(config).controllers[0]
    got, want = load_capture(tmp_path / "capture1.npz"), sim_captures(ctrl, ["j1"])[0]
    assert np.max(np.abs(got.channel("motor_counts") - want.channel("motor_counts"))) <= 1
    joint = ctrl.joints[0]
    assert fit_backlash(got, fit_settings(joint)).amplitude_rad_s == pytest.approx(
        fit_backlash(want, fit_settings(joint)).amplitude_rad_s, rel=0.01
    )
