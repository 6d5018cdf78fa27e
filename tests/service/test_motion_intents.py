"""Every motion has a record before it starts (agent.service.motion_intents): what the next
start makes of the intents a crash left, and a cycle whose intent cannot be written does not
move. The kill -9 of a daemon mid-motion is tests/faults/test_one_machine_processes.py."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from agent.config.model import BacklashCycleSettings, ControllerSettings, JointSettings
from agent.history.records import Outcome, Trigger
from agent.kinds.backlash.kind import backlash_cycle
from agent.kinds.base import AnalysisContext, JointJob, utcnow
from agent.kinds.registry import all_kinds
from agent.service.jobs import run_job
from agent.service.motion_intents import (
    INTERRUPTED,
    intent_path,
    record_interrupted,
    write_intent,
)
from drivers.base import CycleKind
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimSettings

JOINT = JointSettings(
    name="j1",
    index=1,
    gear_ratio=40.0,
    backlash_cycle=BacklashCycleSettings(motor_speed_rps=100.0, load_turns=2.0),
)
CTRL = ControllerSettings(name="robot", driver="sim", joints=(JOINT,))


def _job() -> JointJob:
    return JointJob(CTRL, JOINT, backlash_cycle(CTRL, JOINT), utcnow(), trigger=Trigger.SCHEDULE)


def _rows(state: Path) -> list[tuple[str, str, str, str, str]]:
    with sqlite3.connect(state / "history.sqlite") as conn:
        return conn.execute(
            "SELECT controller, joint, outcome, reason, trigger FROM cycles"
        ).fetchall()


def test_an_intent_left_without_a_capture_is_recorded_as_interrupted(tmp_path: Path) -> None:
    job = _job()
    path = intent_path(tmp_path, job, "j1")
    write_intent(path, job, "j1")
    assert json.loads(path.read_text())["trigger"] == "schedule"
    assert record_interrupted(tmp_path) == 1
    assert _rows(tmp_path) == [("robot", "j1", Outcome.ABORTED, INTERRUPTED, "schedule")]
    assert not path.exists()
    assert record_interrupted(tmp_path) == 0  # recorded once


def test_an_intent_whose_capture_was_saved_is_left_to_recovery(tmp_path: Path) -> None:
    job = _job()
    path = intent_path(tmp_path, job, "j1")
    write_intent(path, job, "j1")
    capture = tmp_path / "captures" / "robot" / "j1" / f"{path.stem}.npz"
    capture.parent.mkdir(parents=True)
    capture.write_bytes(b"the capture speaks for the motion")
    assert record_interrupted(tmp_path) == 0
    assert not path.exists() and not (tmp_path / "history.sqlite").exists()


def test_a_damaged_intent_is_quarantined_and_a_cut_write_removed(tmp_path: Path) -> None:
    folder = tmp_path / "intents" / "robot" / "j1"
    folder.mkdir(parents=True)
    (folder / "20261202T120000_000000Z.json").write_text('{"controller": 7}')
    (folder / ".20261202T120001_000000Z.json.abc.tmp").write_text("{")
    assert record_interrupted(tmp_path) == 0
    assert list(folder.iterdir()) == []
    assert [p.name for p in (tmp_path / "quarantine").iterdir()] == ["20261202T120000_000000Z.json"]


def test_a_cycle_whose_intent_cannot_be_written_does_not_move(tmp_path: Path) -> None:
    (tmp_path / "intents").write_text("a file where the folder should be")
    driver = SimDriver("robot", SimSettings(seed=1), (JOINT,))
    job = _job()

    async def go() -> JointJob:
        await driver.connect()
        return await run_job(
            driver,
            job,
            all_kinds()[CycleKind.BACKLASH],
            "j1",
            state_dir=tmp_path,
            analysis=AnalysisContext(tmp_path, pool=lambda: None),  # type: ignore
            dry_run=False,
            measured=lambda: None,
            lost=lambda: None,
        )

    done = asyncio.run(go())
    assert done.outcome is Outcome.ERROR and done.capture_path is None
    assert (done.error or "").startswith("motion record not written: ")
    assert driver.moves == [] and driver._cycles_run == 0
