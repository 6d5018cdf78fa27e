"""The agent end to end on a simulated robot: stop, interlocks, cycles, fits, history, report.

Every run writes into its own tmp_path. The calibration is given as points (a hand-made delta =
f(A) close to the simulated joint's) except in one test that runs the simulation sweep, short.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config.load import load_config
from agent.errors import DriverError
from agent.history.store import HistoryStore
from agent.service.daemon import Agent
from agent.service.exit_codes import EX_NOPERM, EX_UNAVAILABLE
from agent.service.runner import EX_NO_CONTROLLER, EX_NO_STOP
from drivers.base import ControllerMode
from drivers.sim.driver import SimDriver

WORN_RAD = 1.2e-3
BACKLASH_RAD = {"j1": 0.0, "j2": WORN_RAD, "j3": 1.0e-4}
# (A, delta) pairs read off a sweep of this joint model (Giovannitti et al. 2022, eq. 10).
POINTS = [
    (0.0, 0.0),
    (1.07, 3.0e-4),
    (2.06, 7.0e-4),
    (2.86, 1.1e-3),
    (3.57, 1.5e-3),
    (4.58, 2.1e-3),
]


def joint(name: str, index: int, calibration: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "index": index,
        "gear_ratio": 40,
        "encoder_bits": 19,
        "backlash_cycle": {
            "motor_speed_rps": 100,
            "load_turns": 6,
            "sample_rate_hz": 500,
            "settle_s": 0.5,
        },
        "thresholds": {"backlash_watch_rad": 4.0e-4, "backlash_alert_rad": 8.0e-4},
        "calibration": calibration,
    }


def write_config(
    directory: Path,
    *,
    backlash_rad: dict[str, float] | None = None,
    calibration: dict[str, Any] | None = None,
    calibrate_only: tuple[str, ...] | None = None,
    **sim: Any,
) -> Path:
    """The agent's config: `calibration` for the joints in `calibrate_only` (default all), the
    hand-given points for the others."""
    truth = BACKLASH_RAD if backlash_rad is None else backlash_rad
    points = {
        "source": "points",
        "points": [{"amplitude_rad_s": a, "backlash_rad": d} for a, d in POINTS],
    }
    chosen = calibration or points
    only = tuple(truth) if calibrate_only is None else calibrate_only
    settings = {"seed": 3, "production_runs_s": 0.0, "stop_length_s": 3600.0, **sim}
    settings["joints"] = {name: {"backlash_rad": b} for name, b in truth.items()}
    doc = {
        "agent": {"state_dir": str(directory / "state"), "log_level": "warning"},
        "controllers": [
            {
                "name": "robot",
                "driver": "sim",
                "settings": settings,
                "interlocks": {"require_production_stop": True, "require_permission": True},
                "joints": [
                    joint(n, i, chosen if n in only else points)
                    for i, n in enumerate(truth, start=1)
                ],
            }
        ],
    }
    path = directory / "agent.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@dataclass
class Run:
    code: int
    agent: Agent
    out: str

    @property
    def report(self) -> dict[str, Any]:
        (directory,) = self.agent.reports
        data: dict[str, Any] = json.loads((directory / "report.json").read_text())
        return data

    def joints(self) -> dict[str, dict[str, Any]]:
        return {j["joint"]: j for j in self.report["joints"]}


def run_agent(config_path: Path, wait_for_stop_s: float = 10.0) -> Run:
    out = io.StringIO()
    agent = Agent(load_config(config_path), once=True, wait_for_stop_s=wait_for_stop_s, out=out)

    async def main() -> int:
        code = await agent.run()
        # Nothing may outlive the run: no cycle, analysis or calibration left pending.
        assert asyncio.all_tasks() == {asyncio.current_task()}
        return code

    code = asyncio.run(main())
    return Run(code, agent, out.getvalue())


def capture_files(state: Path) -> list[Path]:
    """Every file under the state's captures/ (none when the directory was never made)."""
    return sorted(p for p in (state / "captures").rglob("*") if p.is_file())


# --- a healthy pass, run twice on the same state ---------------------------------------------


@dataclass
class TwoRuns:
    state: Path
    first: Run
    second: Run


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> TwoRuns:
    directory = tmp_path_factory.mktemp("agent")
    config = write_config(directory)
    first = run_agent(config)
    second = run_agent(config)
    return TwoRuns(directory / "state", first, second)


def test_once_exits_cleanly_with_a_json_and_a_self_contained_html_report(
    two_runs: TwoRuns,
) -> None:
    for run in (two_runs.first, two_runs.second):
        assert run.code == 0
        (directory,) = run.agent.reports
        assert directory.parent == two_runs.state / "reports"
        assert run.report["schema"]
        assert run.report["machines"] == ["robot"]
        html = (directory / "report.html").read_text()
        assert html.lstrip().lower().startswith("<!doctype html>")
        assert "<svg" in html  # plots are inline, not linked
        assert "<script src" not in html and "<link" not in html
        assert str(directory / "report.html") in run.out
    assert two_runs.first.agent.reports != two_runs.second.agent.reports


def test_the_worn_joint_alone_is_alert(two_runs: TwoRuns) -> None:
    for run in (two_runs.first, two_runs.second):
        joints = run.joints()
        assert {name: j["status"] for name, j in joints.items()} == {
            "j1": "ok",
            "j2": "alert",
            "j3": "ok",
        }
        assert run.report["summary"]["worst_status"] == "alert"
        assert joints["j2"]["indicator"] == "backlash_rad"
        assert joints["j2"]["value"] == pytest.approx(WORN_RAD, rel=0.15)
        assert joints["j1"]["value"] < 1e-4
        for j in joints.values():
            assert j["error"] is None
            assert j["result"]["calibrated"] is True
            assert Path(j["capture_path"]).is_file()
        table = {line.split()[0]: line for line in run.out.splitlines() if "robot/" in line}
        assert "ALERT" in table["robot/j2"]
        assert "OK" in table["robot/j1"] and "OK" in table["robot/j3"]


def test_history_holds_every_cycle_with_its_estimates(two_runs: TwoRuns) -> None:
    with HistoryStore(two_runs.state / "history.sqlite") as store:
        assert str(store.pragma("journal_mode")).lower() == "wal"
        cycles = store.cycles()
    assert len(cycles) == 6  # 3 joints, 2 runs
    assert sorted(c.joint for c in cycles) == ["j1", "j1", "j2", "j2", "j3", "j3"]
    for c in cycles:
        assert (c.controller, c.kind, c.outcome) == ("robot", "backlash", "ok")
        assert c.capture_path is not None and Path(c.capture_path).is_file()
        backlash = c.estimate("backlash_rad")
        assert backlash is not None and math.isfinite(backlash.value)
        assert c.status == ("alert" if c.joint == "j2" else "ok")
    stored = capture_files(two_runs.state)
    assert len(stored) == 6 and all(p.suffix == ".npz" for p in stored)
    assert sorted(str(p) for p in stored) == sorted(str(c.capture_path) for c in cycles)


def test_each_cycle_records_its_trigger_and_the_report_it_went_into(two_runs: TwoRuns) -> None:
    with HistoryStore(two_runs.state / "history.sqlite") as store:
        cycles = store.cycles()
        assert {c.trigger for c in cycles} == {"once"}
        for run in (two_runs.first, two_runs.second):
            message_id = run.report["message_id"]
            record = store.report(message_id)
            assert record is not None, message_id
            assert len(record.cycle_ids) == 3
            assert {c.report_message_id for c in cycles if c.id in record.cycle_ids} == {message_id}


def test_the_second_run_adds_one_trend_point_per_joint(two_runs: TwoRuns) -> None:
    first, second = two_runs.first.joints(), two_runs.second.joints()
    for name in BACKLASH_RAD:
        assert len(first[name]["history"]) == 1
        assert len(second[name]["history"]) == 2
        assert second[name]["history"][0] == first[name]["history"][0]
        assert second[name]["history"][1]["value"] == pytest.approx(second[name]["value"])
    with HistoryStore(two_runs.state / "history.sqlite") as store:
        for name in BACKLASH_RAD:
            assert len(store.history("robot", name, "backlash_rad")) == 2


# --- cycles that do not happen ----------------------------------------------------------------


def test_a_refused_interlock_records_the_reason_and_still_reports(tmp_path: Path) -> None:
    """Permission off: nothing moves, nothing is captured or fitted, and no calibration sweep
    is started for cycles that never ran (it would hold the exit back for many seconds)."""
    sweep = {"source": "simulation", "sweep_backlash_rad": [0.0, 6e-4, 1.2e-3, 1.8e-3]}
    run = run_agent(write_config(tmp_path, permission=False, calibration=sweep))
    state = tmp_path / "state"
    assert run.code == EX_NOPERM  # --once: the stop's cycles were refused before motion
    joints = run.joints()
    for name in BACKLASH_RAD:
        assert joints[name]["status"] == "unknown"
        assert joints[name]["error"] == "interlock: permission signal is off"
        assert "permission signal is off" in joints[name]["reason"]
        assert joints[name]["result"] is None and joints[name]["capture_path"] is None
    assert run.out.count("permission signal is") == 3  # the summary says why, per joint
    with HistoryStore(state / "history.sqlite") as store:
        cycles = store.cycles()
    assert len(cycles) == 3
    for c in cycles:
        assert c.outcome == "rejected"
        assert c.reason == "interlock: permission signal is off"
        assert c.capture_path is None and c.estimates == () and c.status is None
    assert capture_files(state) == []
    assert not (state / "calibration").exists()
    driver = run.agent.drivers["robot"]
    assert isinstance(driver, SimDriver)
    assert driver.stop_motion_calls == 1  # only close(): no motion was ever started


def test_production_resuming_mid_cycle_aborts_it_and_keeps_the_rest_queued(
    tmp_path: Path,
) -> None:
    """The stop ends 6 s after connect: by the estimate (2.9 s + 2 s margin) one cycle fits, so
    only j1 starts; paced to 8.7 s it is under way when production resumes, and is aborted. The
    other joints never start in this stop: they stay queued for the next one."""
    run = run_agent(write_config(tmp_path, stop_length_s=6.0, time_scale=3.0))
    state = tmp_path / "state"
    assert run.code == EX_UNAVAILABLE  # --once: the stop's cycle was aborted
    with HistoryStore(state / "history.sqlite") as store:
        outcomes = {c.joint: (c.outcome, c.reason, c.capture_path) for c in store.cycles()}
    assert set(outcomes) == {"j1"}
    assert outcomes["j1"][0] == "aborted"
    assert "production mode" in outcomes["j1"][1]
    assert outcomes["j1"][2] is None
    assert capture_files(state) == []
    assert {j["status"] for j in run.joints().values()} == {"unknown"}
    queued = [p.joint for p in run.agent.runners["robot"].queue.by_wait()]
    assert queued == ["j1", "j2", "j3"]  # the aborted one waited longest: first next time
    driver = run.agent.drivers["robot"]
    assert isinstance(driver, SimDriver)
    assert driver.stop_motion_calls >= 2  # the abort, then close()


def test_shutting_the_agent_down_mid_cycle_stops_the_motion(tmp_path: Path) -> None:
    """Cancelling the agent (what a SIGTERM handler does) stops the machine and disconnects."""
    config = load_config(write_config(tmp_path, time_scale=3.0))  # cycles paced to 8.7 s
    agent = Agent(config, once=False)

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        while (
            "robot" not in agent.drivers
            or (await agent.drivers["robot"].read_status()).mode is not ControllerMode.TEST_CYCLE
        ):
            assert not task.done()
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.all_tasks() == {asyncio.current_task()}
        driver = agent.drivers["robot"]
        assert isinstance(driver, SimDriver)
        assert driver.stop_motion_calls >= 2  # the cycle's stop, then close()
        assert (await driver.read_status()).mode is ControllerMode.DISCONNECTED

    asyncio.run(scenario())
    assert capture_files(tmp_path / "state") == []
    assert agent.reports == []


def test_once_without_a_production_stop_gives_up_without_a_report(tmp_path: Path) -> None:
    run = run_agent(write_config(tmp_path, production_runs_s=3600.0), wait_for_stop_s=0.5)
    assert run.code == EX_NO_STOP
    assert run.agent.reports == []
    assert not (tmp_path / "state" / "history.sqlite").exists()


class FlakyConnectDriver(SimDriver):
    """A controller that is still booting: the first `failures` connects are refused."""

    failures = 2

    async def connect(self) -> None:
        if FlakyConnectDriver.failures > 0:
            FlakyConnectDriver.failures -= 1
            raise DriverError(f"{self.controller}: connection refused")
        await super().connect()


def _run_with_driver(config: Path, cls: type[SimDriver], wait_s: float) -> tuple[int, Agent]:
    agent = Agent(
        load_config(config),
        once=True,
        wait_for_stop_s=wait_s,
        driver_factory=lambda c: cls(c.name, c.settings, c.joints),
    )
    return asyncio.run(agent.run()), agent


def test_a_controller_that_is_down_at_start_is_retried(tmp_path: Path) -> None:
    FlakyConnectDriver.failures = 2
    code, agent = _run_with_driver(write_config(tmp_path), FlakyConnectDriver, 10.0)
    assert code == 0
    assert FlakyConnectDriver.failures == 0
    assert len(agent.reports) == 1


def test_once_gives_up_on_a_controller_that_never_answers(tmp_path: Path) -> None:
    FlakyConnectDriver.failures = 10**6
    code, agent = _run_with_driver(write_config(tmp_path), FlakyConnectDriver, 1.0)
    assert code == EX_NO_CONTROLLER
    assert agent.reports == []


# --- the simulation-sweep calibration ---------------------------------------------------------


def test_a_simulation_sweep_calibrates_the_worn_joint(tmp_path: Path) -> None:
    """The worn joint is calibrated by a sweep of its model (the healthy one by points, to keep
    the test short): the sweep runs in the pool, is cached, and gives the backlash back."""
    sweep = [0.0, 6e-4, 1.2e-3, 1.8e-3, 2.4e-3]
    # The model-mismatch sweep on the stiffness only (3 levels x 3 runs), to keep the test short.
    tolerance = {"load_inertia_rel": 0.0, "damping_factor": 1.0}
    config = write_config(
        tmp_path,
        backlash_rad={"j1": 0.0, "j2": WORN_RAD},
        calibration={
            "source": "simulation",
            "sweep_backlash_rad": sweep,
            "model_tolerance": tolerance,
        },
        calibrate_only=("j2",),
    )
    run = run_agent(config, wait_for_stop_s=10.0)
    assert run.code == 0
    joints = run.joints()
    assert joints["j1"]["status"] == "ok" and joints["j2"]["status"] == "alert"
    # Calibrated on other noise of the same model: the worn joint's backlash comes back.
    assert joints["j2"]["value"] == pytest.approx(WORN_RAD, rel=0.1)
    assert joints["j1"]["value"] < 1e-4
    (cached,) = (tmp_path / "state" / "calibration").glob("*.json")
    data = json.loads(cached.read_text())
    assert data["source"] == "simulation"
    assert [d for _, d in data["points"]] == sweep
    amplitudes = [a for a, _ in data["points"]]
    assert amplitudes == sorted(amplitudes)  # the sweep's signature grows with the backlash
    # The mismatch sweep ran in the pool too: the worn joint's backlash comes with an interval
    # that has a model term, and holds the truth.
    assert {(m["parameter"], m["backlash_rad"]) for m in data["sensitivity"]} == {
        ("stiffness_nm_rad", d) for d in (6e-4, 1.8e-3, 2.4e-3)
    }
    low, high = joints["j2"]["interval"]["low"], joints["j2"]["interval"]["high"]
    assert low <= WORN_RAD <= high
    assert joints["j2"]["result"]["uncertainty"]["backlash"]["model_half_width_rad"] > 0
    html = (run.agent.reports[0] / "report.html").read_text()
    ET.fromstring(html[html.index("<svg") : html.index("</svg>") + len("</svg>")])
