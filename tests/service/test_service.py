"""The service in-process on simulated controllers: triggers, the queue spread over several
stops, on demand over the control socket, reload, streaming-only controllers, publishing and
dry runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import itertools
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from agent.config.load import load_config
from agent.publish.base import HealthPublisher
from agent.report.model import Report
from agent.service.control_socket import peer_allowed, request
from agent.service.daemon import Agent
from drivers.base import Capability, ControllerMode
from drivers.sim.driver import SimDriver
from tests.support.daemon import cycles, serve, until
from tests.support.summary import record, security

POINTS = [(0.0, 0.0), (1.07, 3.0e-4), (2.06, 7.0e-4), (2.86, 1.1e-3), (3.57, 1.5e-3)]
# Each cycle: 0.2 s settle + 2 load turns of 0.4 s = 1.0 s by the estimate.
CYCLE_S = 1.0


def joint(name: str, index: int) -> dict[str, Any]:
    return {
        "name": name,
        "index": index,
        "gear_ratio": 40,
        "backlash_cycle": {
            "motor_speed_rps": 100,
            "load_turns": 2,
            "sample_rate_hz": 500,
            "settle_s": 0.2,
        },
        "calibration": {
            "source": "points",
            "points": [{"amplitude_rad_s": a, "backlash_rad": d} for a, d in POINTS],
        },
    }


def controller(
    name: str, joints: int = 3, triggers: dict[str, Any] | None = None, **sim: Any
) -> dict[str, Any]:
    settings = {"seed": 1, "production_runs_s": 0.0, "stop_length_s": 3600.0, **sim}
    out: dict[str, Any] = {
        "name": name,
        "driver": "sim",
        "settings": settings,
        "joints": [joint(f"j{i}", i) for i in range(1, joints + 1)],
    }
    if triggers is not None:
        out["triggers"] = triggers
    return out


def write(path: Path, *controllers: dict[str, Any], **agent: Any) -> Path:
    doc = {
        "agent": {
            "state_dir": str(path.parent / "state"),
            "log_level": "info",
            "poll_s": 0.05,
            **agent,
        },
        "controllers": list(controllers),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# --- triggers and the queue ------------------------------------------------------------------


def test_cycles_are_spread_over_several_short_stops(tmp_path: Path) -> None:
    """Three stops of 1.8 s: one 1.0 s cycle (+0.5 s margin) fits each, so the three joints are
    cycled one per stop, in the order they have waited."""
    stops = [
        {"at_s": 0.3, "length_s": 1.8},
        {"at_s": 3.0, "length_s": 1.8},
        {"at_s": 5.7, "length_s": 1.8},
    ]
    config = write(
        tmp_path / "agent.yaml",
        controller("robot", stops=stops, triggers={"cycle_margin_s": 0.5}),
    )
    agent = Agent(load_config(config), pool_workers=1)
    state = tmp_path / "state"
    stop_of: dict[str, float] = {}

    async def scenario() -> None:
        await until(lambda: "robot" in agent.drivers, 10, "connect")
        driver = agent.drivers["robot"]
        assert isinstance(driver, SimDriver)
        connected = driver._connected_at
        assert connected is not None
        await until(lambda: len(agent.reports) == 3, 30, "three cycles and their reports")
        for c in cycles(state):
            stop_of[c.joint] = dt.datetime.fromisoformat(c.started_at).timestamp()
        # Each stop queues every joint again; the ones cycled since wait their turn.
        assert [p.joint for p in agent.runners["robot"].queue.by_wait()] == ["j1", "j2"]

    code = serve(agent, scenario)
    assert code == 0
    recorded = cycles(state)
    assert [c.joint for c in recorded] == ["j1", "j2", "j3"]
    assert all(c.outcome == "ok" for c in recorded)
    starts = sorted(stop_of.values())
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(g > 1.8 for g in gaps), gaps  # one per stop, stops 2.7 s apart
    assert len(agent.reports) == 3


def test_a_stop_shorter_than_the_minimum_is_left_alone(tmp_path: Path) -> None:
    stops = [{"at_s": 0.2, "length_s": 1.5}, {"at_s": 2.5, "length_s": 60.0}]
    config = write(
        tmp_path / "agent.yaml",
        controller(
            "robot",
            joints=2,
            stops=stops,
            triggers={"production_stop": {"min_expected_stop_s": 10.0}},
        ),
    )
    agent = Agent(load_config(config), pool_workers=1)
    state = tmp_path / "state"
    seen_short_stop: list[bool] = []

    async def scenario() -> None:
        await until(
            lambda: (
                agent.runners["robot"].last_status is not None
                and agent.runners["robot"].last_status.mode is ControllerMode.STOPPED
            ),
            10,
            "the short stop",
        )
        seen_short_stop.append(True)
        await asyncio.sleep(0.5)
        assert cycles(state) == []  # 1.5 s announced: below 10 s, nothing queued
        assert len(agent.runners["robot"].queue) == 0
        await until(lambda: len(cycles(state)) == 2, 30, "cycles in the long stop")

    assert serve(agent, scenario) == 0
    first = min(c.started_at for c in cycles(state))
    assert seen_short_stop
    assert [c.outcome for c in cycles(state)] == ["ok", "ok"]
    assert first is not None


def test_the_schedule_queues_cycles_that_wait_for_a_stop(tmp_path: Path) -> None:
    """The schedule fires at start while production runs: nothing moves until the stop."""
    config = write(
        tmp_path / "agent.yaml",
        controller(
            "robot",
            joints=2,
            production_runs_s=1.5,
            stop_length_s=60.0,
            triggers={"production_stop": None, "schedule": {"every_s": 3600}},
        ),
    )
    agent = Agent(load_config(config), pool_workers=1)
    state = tmp_path / "state"

    async def scenario() -> None:
        await until(lambda: len(agent.runners["robot"].queue) == 2, 10, "the schedule")
        pending = {p.reason for p in agent.runners["robot"].queue.items}
        assert pending == {"schedule"}
        assert cycles(state) == []
        await until(lambda: len(cycles(state)) == 2, 30, "the cycles in the stop")

    assert serve(agent, scenario) == 0
    assert [c.outcome for c in cycles(state)] == ["ok", "ok"]


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


# --- reload ---------------------------------------------------------------------------------


def test_a_good_reload_reconnects_only_the_changed_controllers(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    idle = {"production_runs_s": 3600.0}
    write(
        path, controller("keep", **idle), controller("change", **idle), controller("drop", **idle)
    )
    agent = Agent(load_config(path), pool_workers=1)
    before: dict[str, Any] = {}

    async def scenario() -> None:
        await until(lambda: len(agent.drivers) == 3, 10, "three controllers")
        await asyncio.sleep(0.2)
        before.update(agent.drivers)
        agent.runners["change"].enqueue(None, "on_demand")  # owed, production never stops
        write(
            path,
            controller("keep", **idle),
            controller("change", joints=2, **idle),
            controller("new", **idle),
        )
        assert await agent.reload()
        await until(
            lambda: (
                set(agent.runners) == {"keep", "change", "new"}
                and "new" in agent.drivers
                and agent.drivers["change"] is not before["change"]
            ),
            10,
            "the swap",
        )
        # A broken file now: refused, nothing changes.
        path.write_text(path.read_text().replace("gear_ratio: 40", "gear_ratio: zero", 1))
        assert not await agent.reload()

    assert serve(agent, scenario) == 0
    assert agent.drivers["keep"] is before["keep"]  # unchanged: never reconnected
    assert agent.drivers["change"] is not before["change"]
    assert "drop" not in agent.drivers
    dropped = before["drop"]
    assert isinstance(dropped, SimDriver) and dropped._connected_at is None  # closed
    assert [j.name for j in agent.runners["change"].ctrl.joints] == ["j1", "j2"]
    # What was owed to the changed controller's remaining joints is still owed.
    assert [p.joint for p in agent.runners["change"].queue.by_wait()] == ["j1", "j2"]


def test_a_broken_reload_is_logged_with_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "agent.yaml", controller("robot", production_runs_s=3600.0))
    agent = Agent(load_config(path), pool_workers=1)

    async def scenario() -> None:
        await until(lambda: "robot" in agent.drivers, 10, "connect")
        path.write_text(path.read_text().replace("load_turns: 2", "load_turns: -2", 1))
        with caplog.at_level(logging.ERROR, logger="agent.service"):
            assert not await agent.reload()

    assert serve(agent, scenario) == 0
    (line,) = [r.getMessage() for r in caplog.records if "reload_rejected" in r.getMessage()]
    assert f"{path}:" in line and "load_turns" in line
    assert agent.config.controllers[0].joints[0].backlash_cycle.load_turns == 2


# --- streaming-only controllers, publishing, dry runs ---------------------------------------


class StreamingOnly(SimDriver):
    capabilities: ClassVar[Capability] = Capability.TOOLPATH_STREAMING

    async def run_cycle(self, cycle: Any) -> Any:
        raise AssertionError("a streaming-only controller must never be cycled")


def test_a_streaming_only_controller_is_connected_but_never_cycled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "agent.yaml", controller("cnc"))
    agent = Agent(
        load_config(path), driver_factory=lambda c: StreamingOnly(c.name, c.settings, c.joints)
    )
    replies: dict[str, Any] = {}

    async def scenario() -> None:
        await until(lambda: agent.runners["cnc"].streaming_only, 10, "streaming only")
        replies["cycle"] = await agent.handle_request({"cmd": "cycle_now", "controller": "cnc"})
        await asyncio.sleep(0.3)

    with caplog.at_level(logging.INFO, logger="agent.service"):
        assert serve(agent, scenario) == 0
    assert any("event=controller_streaming_only" in r.getMessage() for r in caplog.records)
    assert replies["cycle"]["ok"] is False and "streaming only" in replies["cycle"]["error"]
    assert cycles(tmp_path / "state") == []


def test_a_config_without_joints_needs_a_driver_without_cycles(tmp_path: Path) -> None:
    from agent.config.load import config_issues

    doc = {"controllers": [{"name": "robot", "driver": "sim", "joints": []}]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    (issue,) = config_issues(path)
    assert "expected at least 1 joint (driver 'sim' runs test cycles)" in str(issue)


class RecordingPublisher(HealthPublisher):
    name = "recording"

    def __init__(self, fail: bool = False) -> None:
        self.events: list[str] = []
        self.reports: list[Report] = []
        self.fail = fail

    async def start(self) -> None:
        self.events.append("start")

    async def publish(self, report: Report) -> None:
        self.events.append("publish")
        if self.fail:
            raise ConnectionError("broker away")
        self.reports.append(report)

    async def close(self) -> None:
        self.events.append("close")


def test_every_report_is_published_and_a_failing_publisher_changes_nothing(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "agent.yaml", controller("robot", joints=2))
    good, bad = RecordingPublisher(), RecordingPublisher(fail=True)
    agent = Agent(
        load_config(path), once=True, wait_for_stop_s=10, publishers=[bad, good], out=io.StringIO()
    )
    code = asyncio.run(agent.run())
    assert code == 0
    assert good.events == ["start", "publish", "close"]
    assert bad.events == ["start", "publish", "close"]
    (report,) = good.reports
    assert [j.joint for j in report.joints] == ["j1", "j2"]


class CountingSim(SimDriver):
    run_cycle_calls = 0

    async def run_cycle(self, cycle: Any) -> Any:
        CountingSim.run_cycle_calls += 1
        return await super().run_cycle(cycle)


def test_a_dry_run_checks_everything_but_never_moves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    CountingSim.run_cycle_calls = 0
    path = write(tmp_path / "agent.yaml", controller("robot", joints=2))
    agent = Agent(
        load_config(path),
        once=True,
        wait_for_stop_s=10,
        dry_run=True,
        driver_factory=lambda c: CountingSim(c.name, c.settings, c.joints),
    )
    with caplog.at_level(logging.INFO, logger="agent.service"):
        assert asyncio.run(agent.run()) == 0
    assert CountingSim.run_cycle_calls == 0
    dry = [r.getMessage() for r in caplog.records if "event=cycle_dry_run" in r.getMessage()]
    assert len(dry) == 2
    assert cycles(tmp_path / "state") == []  # nothing measured, nothing in the history
    (directory,) = agent.reports
    data = json.loads((directory / "report.json").read_text())
    assert all("dry run" in (j["error"] or "") for j in data["joints"])


def test_a_dry_run_still_refuses_on_an_interlock(tmp_path: Path) -> None:
    CountingSim.run_cycle_calls = 0
    path = write(tmp_path / "agent.yaml", controller("robot", joints=1, permission=False))
    agent = Agent(
        load_config(path),
        once=True,
        wait_for_stop_s=10,
        dry_run=True,
        driver_factory=lambda c: CountingSim(c.name, c.settings, c.joints),
    )
    assert asyncio.run(agent.run()) == 0
    assert CountingSim.run_cycle_calls == 0
    (directory,) = agent.reports
    (j,) = json.loads((directory / "report.json").read_text())["joints"]
    assert j["error"] == "interlock: permission signal is off"


def test_the_pool_is_made_on_first_use_and_given_back_when_idle() -> None:
    from agent.service.pool import LazyPool

    pool = LazyPool(max_workers=1, idle_s=0.2)
    assert not pool.alive and not pool.reap()
    worker_pid = pool.submit(os.getpid).result(timeout=30)
    assert worker_pid != os.getpid() and pool.alive
    assert not pool.reap()  # used just now
    time.sleep(0.3)
    assert pool.reap() and not pool.alive
    assert pool.submit(abs, -3).result(timeout=30) == 3  # made again when needed
    pool.shutdown()
