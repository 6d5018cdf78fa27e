"""The daemon runs the whole-robot identification cycle itself (safety P7 in docs/safety.md): on its
own cadence and on demand, only in a production stop long enough for it, through the guarded path
(every joint at the trajectory's start pose; the interlocks watched; stop_motion on a surprise),
designed and analysed in the process pool, recorded per joint and reported with measured vs
predicted torque. The simulated controller runs the elastic 2-dof planar arm of Zollo, Lopez et al.
2014."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.cli.main import main
from agent.config.identification import IdentificationCycleSettings
from agent.config.load import load_config
from agent.errors import ConfigError
from agent.history.store import HistoryStore
from agent.kinds.base import AnalysisContext
from agent.kinds.identification.analysis import excitation_cycle
from agent.kinds.identification.kind import IdentificationKind, design_in_pool
from agent.models.robot.description import load_robot
from agent.service.daemon import Agent
from agent.service.identification import (
    IdentificationCadence,
    RunnerIdentification,
    last_identification_age_s,
)
from agent.service.queue import CycleQueue
from drivers.base import ControllerMode
from drivers.sim.driver import SimDriver
from tests.support.paths import ROOT
from tests.support.service.daemon import cycles, serve, until
from tests.support.summary import fault

PLANAR = ROOT / "config" / "robots" / "planar2.yaml"
# Short periods keep the test fast: 0.2 s settle + 0.45 s rest + 2 x 4 s + 0.45 s rest.
DESIGN = {"period_s": 4.0, "harmonics": 4, "periods": 2, "hold_s": 0.45, "maxiter": 40}
NEEDS_S = 0.2 + 2 * 4.0 + 2 * 0.45
MARGIN_S = 1.0
POINTS = [(0.0, 0.0), (1.07, 3.0e-4), (2.06, 7.0e-4), (2.86, 1.1e-3), (3.57, 1.5e-3)]


def joint(name: str, index: int, pose_rad: float) -> dict[str, Any]:
    """A robot joint with a short backlash cycle that starts where the excitation starts, so
    both kinds of cycle can follow each other without the plant moving the arm."""
    return {
        "name": name,
        "index": index,
        "gear_ratio": 40,
        "test_pose_rad": pose_rad,
        # The simulated arm's joints turn without end, so its 2-turn backlash cycles can run (a
        # real planar arm of +-pi joints refuses them: tests/service/test_travel_limits.py);
        # the excitation stays inside the robot file's limits by its design.
        "continuous_rotation": True,
        "backlash_cycle": {"motor_speed_rps": 100, "load_turns": 2, "sample_rate_hz": 500,
                           "settle_s": 0.2},
        "calibration": {
            "source": "points",
            "points": [{"amplitude_rad_s": a, "backlash_rad": d} for a, d in POINTS],
        },
    }  # fmt: skip


def controller(
    name: str,
    robot_file: Path = PLANAR,
    poses: dict[str, float] | None = None,
    ident: dict[str, Any] | None = None,
    triggers: dict[str, Any] | None = None,
    interlocks: dict[str, Any] | None = None,
    **sim: Any,
) -> dict[str, Any]:
    poses = poses or {"joint_1": 0.0, "joint_2": 0.0}
    truth = {"robot": str(PLANAR), "torque_noise_nm": 0.2, **sim.pop("robot", {})}
    settings = {
        "seed": 5,
        "robot": truth,
        "joints": {j: {"pose_rad": q} for j, q in poses.items()},
        **sim,
    }
    out: dict[str, Any] = {
        "name": name,
        "driver": "sim",
        "settings": settings,
        "triggers": triggers or {"production_stop": None, "cycle_margin_s": MARGIN_S},
        "identification": {"robot": str(robot_file), "settle_s": 0.2, "trajectory": DESIGN,
                           "every_s": 3600.0, **(ident or {})},
        "joints": [joint(j, i, q) for i, (j, q) in enumerate(poses.items(), start=1)],
    }  # fmt: skip
    if interlocks is not None:
        out["interlocks"] = interlocks
    return out


def write(path: Path, *controllers: dict[str, Any]) -> Path:
    doc = {
        "agent": {"state_dir": str(path.parent / "state"), "poll_s": 0.05},
        "controllers": list(controllers),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def at_start_pose(path: Path, **controllers: Callable[[dict[str, float]], dict[str, Any]]) -> Path:
    """The config with each sim robot standing at its excitation's start pose, as the plant's
    program leaves it before it grants the stop: the design is computed here once (the daemon
    computes the same in its pool, it is deterministic), and each controller is written with
    its joints (and backlash test poses) there."""
    first = write(path, *(make({}) for make in controllers.values()))
    config = load_config(first)
    poses = {c.name: dict(excitation_cycle(c).start_pose_rad) for c in config.controllers}
    return write(path, *(make(poses[name]) for name, make in controllers.items()))


def designed(agent: Agent, name: str) -> bool:
    ident = agent.runners[name]._ident
    return ident.kind is not None and ident.kind.make_cycle(ident.ctx, ident.ctrl, None) is not None


# --- in a stop long enough, and not in one too short ------------------------------------------


def test_the_daemon_identifies_the_robot_in_a_stop_long_enough(tmp_path: Path) -> None:
    """Controller `cell`: while its stop is announced too short for the identification
    (5 s < 9.1 s + 1 s) the queued identification is left alone, although its trajectory is
    designed; once the plant announces the stop longer it runs, and friction and stiffness of
    the worn simulated arm come out near its truth. Controller `weak` has a
    robot file whose joint_2 drive tops out at 20 N·m (the arm needs ~30): its capture is
    refused as saturated and recorded as such, and its backlash cycles in the same stop go on."""
    weak_robot = tmp_path / "planar2_weak.yaml"
    weak_robot.write_text(PLANAR.read_text().replace("torque_max_nm: 100.0", "torque_max_nm: 20.0"))
    wear = {"joint_2": {"friction_scale": 1.5, "stiffness_scale": 0.8}}
    stops = [{"at_s": 0.3, "length_s": 60.0}]
    config = at_start_pose(
        tmp_path / "agent.yaml",
        cell=lambda poses: controller("cell", poses=poses, stops=stops, robot={"wear": wear}),
        weak=lambda poses: controller(
            "weak", robot_file=weak_robot, poses=poses, stops=stops,
            triggers={"production_stop": {"min_expected_stop_s": 0}, "cycle_margin_s": MARGIN_S},
        ),
    )  # fmt: skip
    agent = Agent(load_config(config), pool_workers=2, out=io.StringIO())
    state = tmp_path / "state"
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        cell = agent.runners["cell"]
        await until(lambda: "cell" in agent.drivers, 10, "the driver")
        driver = agent.drivers["cell"]
        assert isinstance(driver, SimDriver)
        driver.inject_stop_expected(5.0)  # before the stop begins (0.3 s after connecting)
        await until(lambda: designed(agent, "cell"), 60, "the trajectory design")
        await until(
            lambda: (
                cell.last_status is not None and cell.last_status.mode is ControllerMode.STOPPED
            ),
            10,
            "the stop",
        )
        await asyncio.sleep(0.3)  # a few polls inside the short stop, with the design ready
        seen["short_stop"] = (cell.state, [p.kind for p in cell.queue.items])
        seen["ran_in_short_stop"] = cycles(state, "identification")
        seen["moved_in_short_stop"] = driver._moving
        driver.inject_stop_expected(None)  # the plant now announces the rest of its 60 s
        await until(lambda: len(cycles(state, "identification")) == 4, 90, "both identifications")
        await until(lambda: len(cycles(state, "backlash")) == 2, 60, "the weak cell's backlash")
        await until(lambda: all(c.report_message_id for c in cycles(state)), 60, "the reports")

    assert serve(agent, scenario) == 0
    state_text, queued = seen["short_stop"]
    assert queued == ["identification"] and "do not fit this stop" in state_text
    assert seen["ran_in_short_stop"] == [] and not seen["moved_in_short_stop"]

    truth = load_robot(PLANAR)
    ident = [c for c in cycles(state, "identification") if c.controller == "cell"]
    assert [(c.joint, c.outcome, c.trigger) for c in ident] == [
        ("joint_1", "ok", "schedule"), ("joint_2", "ok", "schedule")]  # fmt: skip
    scale = {"joint_1": (1.0, 1.0), "joint_2": (1.5, 0.8)}
    for c, spec in zip(ident, truth.joints, strict=True):
        friction, stiffness = scale[c.joint]
        found = {e.indicator: e.value for e in c.estimates}
        # the same tolerances as the identification's own end-to-end test
        assert found["coulomb_friction_nm"] == pytest.approx(spec.coulomb_nm * friction, rel=0.1)
        assert found["viscous_friction_nm_s_rad"] == pytest.approx(
            spec.viscous_nm_s_rad * friction, rel=0.1)  # fmt: skip
        assert spec.stiffness_nm_rad is not None
        assert found["stiffness_nm_rad"] == pytest.approx(
            spec.stiffness_nm_rad * stiffness, rel=0.02)  # fmt: skip
        assert 0.0 < found["torque_nmse_nm"] < 0.05
        assert c.capture_path and Path(c.capture_path).is_file()

    # the report of that stop: every joint's indicators, and measured vs predicted torque
    with HistoryStore(state / "history.sqlite") as store:
        report = store.report(str(ident[0].report_message_id))
    assert report is not None and report.path is not None
    doc = json.loads(Path(report.path).read_text())
    entries = {j["joint"]: j for j in (*doc["joints"], *doc.get("indicator_joints", []))}
    assert set(entries) == {"joint_1", "joint_2"}
    for entry in entries.values():
        names = {i["indicator"] for i in entry["indicators"]}
        assert {"coulomb_friction_nm", "stiffness_nm_rad", "torque_nmse_nm"} <= names
        # the first identification starts each joint's baseline: no verdict yet (NE 107 C)
        verdict = entry["identification"]
        assert (verdict["status"], verdict["ne107"]["letter"]) == ("unknown", "C")
        assert "baseline being set (1 of 3 identifications)" in (
            verdict["indicators"][0]["reason"])  # fmt: skip
    # the limits in force go into the history with the estimates (a later `jha report` judges
    # with them)
    recorded = ident[0].estimate("coulomb_friction_nm")
    assert recorded is not None
    assert recorded.detail["limits"]["coulomb_rise_watch"] == 0.3
    assert recorded.detail["limits"]["baseline_identifications"] == 3
    html = (Path(report.path).parent / "report.html").read_text()
    for name in ("joint_1", "joint_2"):
        assert f"{name}: measured vs predicted motor torque" in html
    assert html.count("<svg") >= 2

    # designed once, in the state dir; the daemon's cadence goes on from this success
    assert len(list((state / "identification").glob("excitation-*.json"))) == 2  # cell, weak
    cell_ctrl = next(c for c in agent.config.controllers if c.name == "cell")
    age = last_identification_age_s(state, cell_ctrl)
    assert age is not None and age < 60

    # the weak cell: refused as saturated, recorded as a refusal with its reason, no data
    weak = [c for c in cycles(state, "identification") if c.controller == "weak"]
    assert [(c.joint, c.outcome) for c in weak] == [
        ("joint_1", "rejected"), ("joint_2", "rejected")]  # fmt: skip
    for c in weak:
        assert c.estimates == () and "saturated" in c.reason and "joint_2" in c.reason
    weak_ctrl = next(c for c in agent.config.controllers if c.name == "weak")
    assert last_identification_age_s(state, weak_ctrl) is None
    backlash = cycles(state, "backlash")
    assert [(c.controller, c.outcome) for c in backlash] == [("weak", "ok"), ("weak", "ok")]


# --- an operator entering mid-cycle -----------------------------------------------------------


def test_an_operator_entering_mid_cycle_stops_it_and_nothing_is_recorded_as_data(
    tmp_path: Path,
) -> None:
    config = at_start_pose(
        tmp_path / "agent.yaml",
        cell=lambda poses: controller(
            "cell", poses=poses, stops=[{"at_s": 0.0, "length_s": 600.0}], time_scale=1.0,
            operator_present=False, interlocks={"require_operator_absent": True},
        ),
    )  # fmt: skip
    agent = Agent(load_config(config), pool_workers=1, out=io.StringIO())
    state = tmp_path / "state"
    timing: dict[str, float] = {}

    async def scenario() -> None:
        await until(lambda: "cell" in agent.drivers, 10, "the driver")
        driver = agent.drivers["cell"]
        assert isinstance(driver, SimDriver)
        await until(lambda: driver._moving, 60, "the identification to start moving")
        # past the simulation's own computing, into the paced motion (9.1 s of real time)
        await asyncio.sleep(2.5)
        assert driver._moving and driver.stop_motion_calls == 0
        driver.inject_operator(True)
        entered = time.monotonic()
        await until(lambda: driver.stop_motion_calls >= 1, 5, "stop_motion")
        await until(lambda: not driver._moving, 5, "the motion to end")
        timing["stopped_after_s"] = time.monotonic() - entered
        await until(lambda: len(cycles(state, "identification")) == 2, 20, "the abort record")
        timing["queued"] = len(agent.runners["cell"].queue)

    assert serve(agent, scenario) == 0
    assert timing["stopped_after_s"] < 2.0  # watcher polls every 10 ms; ~6 s of motion were left
    assert timing["queued"] == 1  # aborted: it stays queued for a later stop
    recorded = cycles(state, "identification")
    assert [(c.joint, c.outcome) for c in recorded] == [
        ("joint_1", "aborted"), ("joint_2", "aborted")]  # fmt: skip
    for c in recorded:
        assert c.estimates == () and "an operator is present" in c.reason
        assert c.capture_path is None
    assert not (state / "captures").exists()  # no capture was kept
    # One cycle of two joints ran: a row per joint must say it was aborted.
    fault("operator enters mid identification: stopped, aborts recorded", 2 - len(recorded))


def test_a_dry_run_checks_every_joint_s_start_pose_but_never_moves(tmp_path: Path) -> None:
    config = at_start_pose(
        tmp_path / "agent.yaml",
        cell=lambda poses: controller("cell", poses=poses, stops=[{"at_s": 0.0,
                                                                   "length_s": 600.0}]),
    )  # fmt: skip
    agent = Agent(load_config(config), pool_workers=1, dry_run=True, out=io.StringIO())
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        await until(lambda: len(agent.reports) == 1, 60, "the dry run's report")
        driver = agent.drivers["cell"]
        assert isinstance(driver, SimDriver)
        seen["moved"] = (driver._cycles_run, driver.stop_motion_calls)
        driver.inject_pose("joint_2", 0.5)  # away from the start pose: the next check refuses
        await agent.handle_request(
            {"cmd": "cycle_now", "controller": "cell", "identification": True}
        )
        await until(lambda: len(agent.reports) == 2, 30, "the refused dry run's report")
        seen["moved_after"] = driver._cycles_run

    assert serve(agent, scenario) == 0
    assert seen["moved"] == (0, 0) and seen["moved_after"] == 0
    first, second = (json.loads((d / "report.json").read_text()) for d in agent.reports)
    assert {j["outcome"] for j in first["joints"]} == {"dry_run"}
    reasons = " ".join(j["reason"] for j in second["joints"])
    assert "joint joint_2 stands at 0.5000 rad" in reasons
    # nothing moved: no history entry for the dry run; the refusal is recorded with its reason
    refused = cycles(tmp_path / "state", "identification")
    assert [(c.joint, c.outcome) for c in refused] == [
        ("joint_1", "rejected"), ("joint_2", "rejected")]  # fmt: skip
    assert all("interlock" in c.reason for c in refused)


# --- on demand, over the control socket -------------------------------------------------------


def test_cycle_now_identification_queues_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = controller("plain")
    del plain["identification"]
    config = write(
        tmp_path / "agent.yaml",
        # production never stops: what is queued stays queued
        controller("cell", ident={"every_s": None}, production_runs_s=3600.0),
        {**plain, "settings": {"production_runs_s": 3600.0}},
    )
    agent = Agent(load_config(config), pool_workers=1, out=io.StringIO())
    codes: dict[str, int] = {}
    replies: dict[str, Any] = {}

    async def scenario() -> None:
        sock = tmp_path / "state" / "control.sock"
        await until(sock.exists, 10, "the control socket")
        base = ["--config", str(config)]
        assert agent.runners["cell"].queue.items == ()  # every_s null: on demand only
        codes["now"] = await asyncio.to_thread(
            main, ["cycle", "now", "--controller", "cell", "--identification", *base]
        )
        codes["plain"] = await asyncio.to_thread(
            main, ["cycle", "now", "--controller", "plain", "--identification", *base]
        )
        codes["status"] = await asyncio.to_thread(main, ["status", "--json", *base])
        replies["with_joint"] = await agent.handle_request(
            {"cmd": "cycle_now", "controller": "cell", "identification": True, "joint": "joint_1"}
        )
        replies["not_bool"] = await agent.handle_request(
            {"cmd": "cycle_now", "controller": "cell", "identification": "yes"}
        )
        replies["again"] = await agent.handle_request(
            {"cmd": "cycle_now", "controller": "cell", "identification": True}
        )
        replies["pending"] = agent.runners["cell"].queue.to_dict()["pending"]
        await until(lambda: designed(agent, "cell"), 60, "the design it started")  # fmt: skip

    assert serve(agent, scenario) == 0
    out, err = capsys.readouterr()
    assert codes == {"now": 0, "plain": 69, "status": 0}
    assert "cell: all (identification, every joint): queued" in out
    assert "controller plain has no identification: section" in err
    status = json.loads(out[out.index("{") :])
    (pending,) = status["controllers"]["cell"]["pending"]
    assert pending["kind"] == "identification" and pending["joint"] == "all"
    assert pending["reason"] == "on_demand" and pending["estimate_s"] == pytest.approx(NEEDS_S)
    for bad in ("with_joint", "not_bool"):
        assert replies[bad]["ok"] is False and "identification" in replies[bad]["error"]
    assert replies["again"]["ok"] is True and replies["again"]["kind"] == "identification"
    assert len(replies["pending"]) == 1  # asked twice, queued once
    assert cycles(tmp_path / "state") == []  # nothing ran: no stop


# --- the parts, in-process --------------------------------------------------------------------


def test_the_design_is_cached_in_the_state_dir_by_settings_and_robot_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "agent.yaml", controller("cell")))
    ctrl = config.controllers[0]
    cache = tmp_path / "designs"
    cycle, cached = design_in_pool(ctrl, cache)
    (path,) = cache.glob("excitation-*.json")
    assert not cached and cycle == excitation_cycle(ctrl)
    again, cached = design_in_pool(ctrl, cache)
    assert cached and again == cycle
    path.write_text("{damaged")  # designed again, and the file replaced
    again, cached = design_in_pool(ctrl, cache)
    assert not cached and again == cycle and json.loads(path.read_text())["trajectory"]
    other = tmp_path / "planar2_copy.yaml"  # another robot file: another design entry
    other.write_text(PLANAR.read_text().replace("speed_max_rad_s: 3.0", "speed_max_rad_s: 2.5"))
    changed = load_config(write(tmp_path / "agent.yaml", controller("cell", robot_file=other)))
    design_in_pool(changed.controllers[0], cache)
    assert len(list(cache.glob("excitation-*.json"))) == 2


def test_the_cadence_goes_on_from_the_last_success() -> None:
    noon = dt.datetime(2026, 11, 25, 12, 0)
    settings = IdentificationCycleSettings(robot=str(PLANAR), every_s=100.0)
    fresh = IdentificationCadence(settings)  # nothing in the history: due at once
    assert fresh.due(1000.0, noon) and not fresh.due(1050.0, noon) and fresh.due(1100.0, noon)
    recent = IdentificationCadence(settings)
    recent.seed(30.0, 1000.0)  # the last success was 30 s ago: due 70 s from now
    assert not recent.due(1069.0, noon) and recent.due(1070.0, noon)
    night = IdentificationCadence(replace(settings, window="22:00-06:00"))
    assert not night.due(1000.0, noon) and night.due(1000.0, noon.replace(hour=23))
    on_demand = IdentificationCadence(replace(settings, every_s=None))
    assert not on_demand.active and not on_demand.due(0.0, noon)


def test_cadence_settings_errors_name_the_file_line_and_field(tmp_path: Path) -> None:
    config = write(
        tmp_path / "agent.yaml",
        controller("a", ident={"every_s": -1.0}),
        controller("b", ident={"window": "25:00-06:00"}),
        controller("c", ident={"every_s": None, "window": "22:00-06:00"}),
    )
    with pytest.raises(ConfigError) as err:
        load_config(config)
    text = str(err.value)
    lines = config.read_text().splitlines()

    def line_of(fragment: str, after: int = 0) -> int:
        return next(i for i, ln in enumerate(lines, 1) if i > after and fragment in ln)

    assert f"{config}:{line_of('every_s: -1.0')}: controllers[0].identification.every_s" in text
    assert f"{config}:{line_of('window: 25:00-06:00')}: controllers[1].identification.window" in (
        text)  # fmt: skip
    assert "expected times of day" in text
    assert "controllers[2].identification.window" in text and "expected every_s with a window" in (
        text)  # fmt: skip
    ok = load_config(write(tmp_path / "ok.yaml", controller("a", ident={"window": "22:00-06:00"})))
    ident = ok.controllers[0].identification
    assert ident is not None and ident.window == "22:00-06:00" and ident.every_s == 3600.0


def test_a_trajectory_that_cannot_be_designed_is_refused_and_dropped(tmp_path: Path) -> None:
    """max_condition_number below what the optimiser reaches: the design fails in the pool
    (a thread pool here), the queued identification leaves the queue, and a new request is
    refused with the reason instead of waiting for ever."""
    config = load_config(
        write(tmp_path / "agent.yaml", controller("cell", ident={"max_condition_number": 1.5}))
    )
    ctrl = config.controllers[0]
    woken: list[bool] = []

    async def scenario() -> tuple[CycleQueue, str]:
        with ThreadPoolExecutor(1) as pool:
            ctx = AnalysisContext(tmp_path / "state", lambda: pool)
            ident = RunnerIdentification(
                ctrl, IdentificationKind(), ctx, lambda: woken.append(True)
            )
            ident.capabilities = SimDriver.capabilities
            pending = ident.request("on_demand", streaming_only=False)
            queue = CycleQueue().add(pending)
            # designing (no await since the request: its result cannot be in): not planned
            assert ident.plannable(queue) == (queue, CycleQueue())
            await until(lambda: bool(woken), 20, "the design to end")
            kept, _ = ident.plannable(queue)
            with pytest.raises(ValueError) as err:
                ident.request("on_demand", streaming_only=False)
            return kept, str(err.value)

    kept, error = asyncio.run(scenario())
    assert kept == CycleQueue()  # dropped: this config cannot run it
    assert "cannot be designed" in error and "max_condition_number" in error
