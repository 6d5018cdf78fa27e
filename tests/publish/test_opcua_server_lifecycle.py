"""The OPC UA health server's life: no listening socket unless configured, a start that keeps
the caller's loop responsive, a port in use, and the daemon publishing through it end to end."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import asyncua
import pytest
import yaml

from agent.config.load import load_config
from agent.config.opcua_server import HEALTH_NAMESPACE_URI
from agent.errors import AgentError
from agent.publish.factory import publishers_for
from agent.publish.opcua_server.server import OpcUaHealthServer
from agent.service.daemon import Agent
from tests.support.publish.opcua_server import (
    MINIMAL,
    Pki,
    Started,
    client_for,
    first_report,
    read_joint,
    run,
    secure_settings,
    start_watching_the_loop,
)

# --- opt-in: no listening socket unless configured ------------------------------------------------


def own_tcp_listeners() -> set[int]:
    """Inodes of the listening TCP sockets this process holds (psutil-free: /proc)."""
    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(int(target[8:-1]))
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    listening.add(int(fields[9]))
    return mine & listening


@pytest.mark.security("no listening socket unless configured")
def test_no_listener_unless_configured(
    server: OpcUaHealthServer, state: Path, tmp_path: Path, pki: Pki
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(MINIMAL)
    cfg = load_config(config)
    before = own_tcp_listeners()

    async def with_publishers(pubs: list[Any]) -> set[int]:
        for p in pubs:
            await p.start()
        try:
            return own_tcp_listeners()
        finally:
            for p in pubs:
                await p.close()

    assert publishers_for(cfg.publish, tmp_path) == []
    assert run(with_publishers(publishers_for(cfg.publish, tmp_path))) == before
    configured = dataclasses.replace(cfg.publish, opcua_server=secure_settings(pki))
    pubs = publishers_for(configured, state)
    assert [type(p) for p in pubs] == [OpcUaHealthServer]
    during = run(with_publishers(pubs))
    assert len(during - before) == 1  # exactly the server's socket...
    assert own_tcp_listeners() == before  # ...and gone after close()


def test_start_keeps_the_callers_loop_responsive(started: Started, pki: Pki, state: Path) -> None:
    # The first start builds asyncua's standard address space (seconds of CPU) in the server's
    # thread; the caller's loop keeps ticking meanwhile (GIL hand-overs only).
    assert started.worst_gap_s < max(0.5, started.took_s / 3), started
    # Later starts load it from the shelf the first one left in the state directory.
    again = OpcUaHealthServer(secure_settings(pki), state)
    took, _ = run(start_watching_the_loop(again))
    run(again.close())
    assert took < max(2.0, started.took_s / 2), (took, started.took_s)
    assert (state / "opcua_server" / f"aspace-asyncua-{asyncua.__version__}" / "done").is_file()


def test_a_port_in_use_fails_start_with_a_clear_error(
    server: OpcUaHealthServer, pki: Pki, state: Path
) -> None:
    taken = OpcUaHealthServer(secure_settings(pki, endpoint=server.endpoint), state)
    with pytest.raises(AgentError, match=f"cannot listen on {server.endpoint}"):
        run(taken.start())
    run(taken.close())  # harmless after a failed start
    run(taken.publish(first_report()))  # logged and skipped, never raised


def test_the_daemon_publishes_its_reports_through_the_server(pki: Pki, state: Path) -> None:
    """End to end: an agent config with publish.opcua_server, a simulated robot with a worn
    joint; the agent runs a cycle, writes its report, and the joint's health is readable."""
    doc = {
        "agent": {"state_dir": str(state), "log_level": "warning"},
        "controllers": [
            {
                "name": "robot",
                "driver": "sim",
                "settings": {
                    "seed": 3,
                    "production_runs_s": 0.0,
                    "stop_length_s": 3600.0,
                    "joints": {"j2": {"backlash_rad": 1.2e-3}},
                },
                "joints": [
                    {
                        "name": "j2",
                        "index": 2,
                        "gear_ratio": 40,
                        "encoder_bits": 19,
                        "backlash_cycle": {
                            "motor_speed_rps": 100,
                            "load_turns": 6,
                            "sample_rate_hz": 500,
                            "settle_s": 0.5,
                        },
                        "thresholds": {"backlash_watch_rad": 4.0e-4, "backlash_alert_rad": 8.0e-4},
                        "calibration": {
                            "source": "points",
                            "points": [
                                {"amplitude_rad_s": a, "backlash_rad": d}
                                for a, d in (
                                    (0.0, 0.0),
                                    (1.07, 3.0e-4),
                                    (2.06, 7.0e-4),
                                    (2.86, 1.1e-3),
                                    (3.57, 1.5e-3),
                                    (4.58, 2.1e-3),
                                )
                            ],
                        },
                    }
                ],
            }
        ],
        "publish": {
            "opcua_server": {
                "endpoint": "opc.tcp://127.0.0.1:0/jha/",
                "certificate": str(pki.server.certificate),
                "private_key": str(pki.server.private_key),
                "trusted_clients": str(pki.trusted),
                "users_file": str(pki.users),
            }
        },
    }
    path = state / "daemon.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    agent = Agent(load_config(path), once=False)

    async def go() -> dict[str, Any]:
        task = asyncio.create_task(agent.run())
        try:
            while not agent.publishers:
                assert not task.done()
                await asyncio.sleep(0.05)
            (server,) = agent.publishers
            assert isinstance(server, OpcUaHealthServer)
            while server.published == 0:  # the first report of the first cycle
                assert not task.done()
                await asyncio.sleep(0.05)
            c = await client_for(server.endpoint, pki.client)
            try:
                ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
                return await read_joint(
                    c,
                    ns,
                    "robot",
                    "j2",
                    ("Ne107Status", "Status", "backlash_rad", "ReportMessageId"),
                )
            finally:
                await c.disconnect()
        finally:
            agent.request_stop("test")
            await task

    found = run(go(), timeout_s=90)
    (directory,) = agent.reports[:1]
    report = json.loads((directory / "report.json").read_text())
    assert found["ReportMessageId"] == report["message_id"]
    assert found["Status"] == "alert" and found["Ne107Status"] == "out_of_specification"
    assert found["backlash_rad"] == pytest.approx(report["joints"][0]["value"])
