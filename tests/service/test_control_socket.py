"""The control socket's path rules, its client errors, and `jha cycle now` / `jha status`
against a running agent."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from agent.cli.main import main
from agent.config.load import load_config
from agent.service.control_socket import ControlError, request, socket_path
from agent.service.daemon import Agent


def test_the_socket_path_follows_systemd_then_the_config_then_the_state_dir() -> None:
    env = {"RUNTIME_DIRECTORY": "/run/jha:/run/other"}
    assert socket_path("/var/lib/jha", "/tmp/c.sock", env) == Path("/run/jha/control.sock")
    assert socket_path("/var/lib/jha", "/tmp/c.sock", {}) == Path("/tmp/c.sock")
    assert socket_path("/var/lib/jha", None, {}) == Path("/var/lib/jha/control.sock")


def test_the_client_says_when_no_agent_runs(tmp_path: Path) -> None:
    with pytest.raises(ControlError, match="no control socket"):
        request(tmp_path / "none.sock", {"cmd": "status"})
    stale = tmp_path / "stale.sock"
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()  # bound, never listening: what a crashed daemon leaves
    with pytest.raises(ControlError, match="connection refused"):
        request(stale, {"cmd": "status"})


def test_cycle_now_and_status_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    joint = {
        "name": "j1",
        "index": 1,
        "gear_ratio": 40,
        "backlash_cycle": {"motor_speed_rps": 100, "load_turns": 2},
    }
    doc = {
        "agent": {"state_dir": str(tmp_path / "state"), "poll_s": 0.05},
        "controllers": [
            {
                "name": "robot",
                "driver": "sim",
                "settings": {"production_runs_s": 3600.0},  # never stops: the cycle stays queued
                "triggers": {"production_stop": None},
                "joints": [joint],
            }
        ],
    }
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump(doc))
    agent = Agent(load_config(config), out=io.StringIO())
    codes: dict[str, int] = {}

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        try:
            sock = tmp_path / "state" / "control.sock"
            for _ in range(200):
                if sock.exists():
                    break
                await asyncio.sleep(0.05)
            base = ["--config", str(config)]
            codes["now"] = await asyncio.to_thread(
                main, ["cycle", "now", "--controller", "robot", "--joint", "j1", *base]
            )
            codes["bad"] = await asyncio.to_thread(
                main, ["cycle", "now", "--controller", "robot", "--joint", "j7", *base]
            )
            codes["status"] = await asyncio.to_thread(main, ["status", "--json", *base])
        finally:
            agent.request_stop("test")
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    captured = capsys.readouterr()
    out = captured.out
    assert codes == {"now": 0, "bad": 69, "status": 0}
    assert "robot: j1: queued" in out
    assert "no joint 'j7'" in captured.err
    status = json.loads(out[out.index("{") :])
    assert status["controllers"]["robot"]["pending"][0]["joint"] == "j1"
    assert "waiting for a production stop" in status["controllers"]["robot"]["state"]
