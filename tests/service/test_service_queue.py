"""The service in-process on simulated controllers: cycles queued by production stops and by the
schedule, spread over several short stops, never run in a stop too short for them."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from pathlib import Path

from agent.config.load import load_config
from agent.service.daemon import Agent
from drivers.base import ControllerMode
from drivers.sim.driver import SimDriver
from tests.support.service.agent_config import controller, write
from tests.support.service.daemon import cycles, serve, until

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
