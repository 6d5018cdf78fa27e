"""The service in-process on simulated controllers: reload (good and broken), streaming-only
controllers, publishing every report, dry runs, and the analysis pool made on first use."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from agent.config.load import load_config
from agent.publish.base import HealthPublisher
from agent.report.model import Report
from agent.service.daemon import Agent
from agent.service.exit_codes import EX_NOPERM
from drivers.base import Capability
from drivers.sim.driver import SimDriver
from tests.support.service.agent_config import controller, write
from tests.support.service.daemon import cycles, serve, until

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
        out=(out := io.StringIO()),
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
    # the terminal table: "DRY RUN" in the status column, the reason not shown as an error
    rows = [r for r in out.getvalue().splitlines() if r.startswith("robot/")]
    assert len(rows) == 2 and all("DRY RUN" in r and "error" not in r for r in rows), rows
    assert all("interlocks hold, no motion" in r for r in rows), rows


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
    # --once: the stop's cycle was refused before motion (agent.service.exit_codes).
    assert asyncio.run(agent.run()) == EX_NOPERM
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
