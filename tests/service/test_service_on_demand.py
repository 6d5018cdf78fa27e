"""The service in-process on simulated controllers: cycles on demand over the control socket, and
the socket's peer rules (SO_PEERCRED) against a real user outside its group."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.config.load import load_config
from agent.service.control_socket import peer_allowed, request
from agent.service.daemon import Agent
from drivers.base import ControllerMode
from drivers.sim.driver import SimDriver
from tests.support.service.agent_config import controller, write
from tests.support.service.daemon import cycles, serve, until
from tests.support.summary import record, security

# --- on demand, over the control socket ------------------------------------------------------


class ModeAtStartSim(SimDriver):
    """The simulated controller, noting the mode it reports as each cycle's motion begins."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modes_at_start: list[ControllerMode] = []

    async def run_cycle(self, cycle: Any) -> Any:
        self.modes_at_start.append((await self.read_status()).mode)
        return await super().run_cycle(cycle)


def test_cycle_now_over_the_control_socket(tmp_path: Path) -> None:
    config = write(
        tmp_path / "agent.yaml",
        controller(
            "robot", production_runs_s=2.0, stop_length_s=60.0, triggers={"production_stop": None}
        ),
    )
    made: list[ModeAtStartSim] = []

    def make(ctrl: Any) -> ModeAtStartSim:
        made.append(ModeAtStartSim(ctrl.name, ctrl.settings, ctrl.joints))
        return made[-1]

    agent = Agent(load_config(config), pool_workers=1, driver_factory=make)
    state = tmp_path / "state"
    sock = state / "control.sock"
    replies: dict[str, Any] = {}

    async def ask(payload: Any) -> dict[str, Any]:
        return await asyncio.to_thread(request, sock, payload)

    async def raw(data: bytes) -> dict[str, Any]:
        def go() -> dict[str, Any]:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(sock))
                s.sendall(data)
                reply: dict[str, Any] = json.loads(s.makefile().readline())
                return reply

        return await asyncio.to_thread(go)

    async def scenario() -> None:
        await until(sock.exists, 10, "the control socket")
        replies["mode"] = stat.S_IMODE(sock.stat().st_mode)
        replies["unknown_controller"] = await ask({"cmd": "cycle_now", "controller": "nope"})
        replies["unknown_joint"] = await ask(
            {"cmd": "cycle_now", "controller": "robot", "joint": "j9"}
        )
        replies["bad_json"] = await raw(b"{not json\n")
        replies["not_object"] = await raw(b"[1, 2]\n")
        replies["unknown_cmd"] = await ask({"cmd": "explode"})
        replies["oversized"] = await raw(b'{"cmd": "status", "pad": "' + b"x" * 100_000 + b'"}\n')
        replies["not_utf8"] = await raw(b"\xff\xfe\n")
        replies["bad_types"] = await ask({"cmd": "cycle_now", "controller": 3})
        replies["queued"] = await ask({"cmd": "cycle_now", "controller": "robot", "joint": "j2"})
        replies["status"] = await ask({"cmd": "status"})
        await until(lambda: len(cycles(state)) == 1, 30, "the on-demand cycle")
        await asyncio.sleep(0.3)

    assert serve(agent, scenario) == 0
    assert replies["mode"] == 0o660
    assert replies["unknown_controller"] == {
        "ok": False,
        "error": "unknown controller 'nope' (known: robot)",
    }
    assert replies["unknown_joint"]["ok"] is False
    assert "no joint 'j9'" in replies["unknown_joint"]["error"]
    assert "j1, j2, j3" in replies["unknown_joint"]["error"]
    assert "request longer than" in replies["oversized"]["error"]
    for bad in ("bad_json", "not_object", "unknown_cmd", "bad_types", "not_utf8", "oversized"):
        assert replies[bad]["ok"] is False and replies[bad]["error"], bad
    assert replies["queued"]["ok"] is True and replies["queued"]["queued"] == ["j2"]
    assert "waits for a production stop" in replies["queued"]["message"]
    status = replies["status"]["controllers"]["robot"]
    assert [p["joint"] for p in status["pending"]] == ["j2"]
    assert status["pending"][0]["reason"] == "on_demand"
    assert [c.joint for c in cycles(state)] == ["j2"]  # only what was asked for
    assert not sock.exists()  # removed on the way out
    # G14 (docs/safety.md): queued while the machine produced, the cycle moved only in the stop.
    assert status["mode"] == "production"
    assert made[0].modes_at_start == [ControllerMode.STOPPED]


# The stranger cannot read the test's virtualenv; the system's python has all the client needs.
SYSTEM_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
CLIENT = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(b'{"cmd": "status"}\\n')
print(s.makefile().readline())
"""


@pytest.mark.security("control socket peer rules: root, the agent's uid, the socket's group")
def test_the_control_socket_peer_rules() -> None:
    assert peer_allowed(os.getpid(), os.getuid(), os.getgid(), 123456)
    assert peer_allowed(os.getpid(), 0, 0, 123456)
    assert not peer_allowed(-1, 54321, 54321, 123456)
    assert peer_allowed(-1, 54321, 123456, 123456)  # its primary group is the socket's


STRANGER_CHECK = "control socket refuses a real uid outside its group (SO_PEERCRED)"


def test_a_peer_outside_the_group_is_refused(tmp_path: Path) -> None:
    """SO_PEERCRED: a user that is neither root, the agent's user nor in the socket's group
    knocks on the socket. Acting as another user needs root: without it the summary says the
    check did not run (G12 of docs/safety.md), and the test proves that this is the reason."""
    if os.getuid() != 0:
        other = 65534 if os.getuid() != 65534 else 65533
        with pytest.raises(PermissionError):
            subprocess.run(
                [SYSTEM_PYTHON, "-c", "pass"],
                user=other,
                group=other,
                extra_groups=[],
                timeout=20,
                check=False,
            )
        record("security", STRANGER_CHECK, "NOT RUN (needs root)")
        return
    security(STRANGER_CHECK, passed=False)  # until every assertion below has held
    open_dir = Path("/tmp") / f"jha-peer-{os.getpid()}"
    open_dir.mkdir(mode=0o777, exist_ok=True)
    open_dir.chmod(0o777)
    config = write(
        tmp_path / "agent.yaml",
        controller("robot", production_runs_s=3600.0),
        control_socket=str(open_dir / "c.sock"),
    )
    agent = Agent(load_config(config), serve_control=True)
    out: dict[str, str] = {}

    async def scenario() -> None:
        sock = open_dir / "c.sock"
        await until(sock.exists, 10, "the control socket")
        sock.chmod(0o666)  # let the stranger reach it: SO_PEERCRED must still refuse
        sock_gid = sock.stat().st_gid
        assert sock_gid != 65534
        proc = await asyncio.to_thread(
            subprocess.run,
            [SYSTEM_PYTHON, "-c", CLIENT, str(sock)],
            capture_output=True,
            text=True,
            timeout=20,
            user=65534,
            group=65534,
            extra_groups=[],
        )
        out["stdout"], out["stderr"] = proc.stdout, proc.stderr

    try:
        assert serve(agent, scenario) == 0
    finally:
        for p in open_dir.iterdir():
            p.unlink()
        open_dir.rmdir()
    assert out["stdout"], out["stderr"]
    reply = json.loads(out["stdout"])
    assert reply["ok"] is False
    assert "permission denied: uid 65534" in reply["error"]
    security(STRANGER_CHECK, passed=True)
