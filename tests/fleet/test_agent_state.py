"""A machine's agent, online or offline, on the plan: the agent's own publisher names itself in
every message (agent_client_id), its retained status topic says online at connection and
offline at a clean close (and by its last will when the connection is lost); the plan joins the
two, in the JSON and on the page."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from agent.publish.mqtt.publisher import MqttPublisher
from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.fleet.conftest import FleetFiles
from tests.fleet.running import base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until
from tests.support.publish.mqtt import settings_for


def _plan(base: str) -> list[dict[str, Any]]:
    joints: list[dict[str, Any]] = get(base, "/api/plan").json()["joints"]
    return joints


def _page_machines(base: str) -> list[list[int]]:
    """The page's machines as its script reads them: [site, line, name, stale, offline]."""
    found = re.search(r'id="plan-data">(.*?)</script>', get(base, "/").text, re.S)
    assert found is not None, "the page has no data block"
    data = json.loads(found.group(1))
    strings = data["t"]
    return [[strings[i] for i in m] for m in data["m"]]


def test_the_plan_says_when_a_machines_agent_is_offline(
    broker: MosquittoBroker, fleet_files: FleetFiles, tmp_path: Path
) -> None:
    report = machine_report("press7", {"J1": [4e-4, 5e-4, 6e-4], "J2": [5e-4, 6e-4, 7e-4]})
    with running_fleet(fleet_files.config) as fleet:
        base = base_url(fleet)

        async def online_then_closed() -> None:
            pub = MqttPublisher(settings_for(broker.port, client_id="edge-07"), tmp_path / "a")
            await pub.start()
            await pub.publish(report)
            assert await asyncio.to_thread(pub.wait_idle, 30), "the agent's outbox did not drain"
            await asyncio.to_thread(
                wait_until,
                lambda: {p["agent"]["state"] for p in _plan(base) if p["agent"]} == {"online"},
                30,
                "the plan to show the agent online",
            )
            plan = _plan(base)
            assert {p["agent"]["client_id"] for p in plan} == {"edge-07"}
            assert [m[4] for m in _page_machines(base)] == [""]  # no offline tag
            await pub.close()  # a clean close publishes the retained offline status

        asyncio.run(online_then_closed())
        wait_until(
            lambda: {p["agent"]["state"] for p in _plan(base)} == {"offline"},
            30,
            "the plan to show the agent offline",
        )
        plan = _plan(base)
        assert len(plan) == 2 and all(p["agent"]["since"] for p in plan)
        # Not stale: the machine reported minutes ago; its agent is what is gone.
        assert not any(p["stale"] for p in plan)
        (machine,) = _page_machines(base)
        assert machine[2] == "press7" and machine[4] != ""
        assert "1 with their agent offline" in get(base, "/").text


def test_a_machine_whose_agent_does_not_name_itself_has_no_agent_state(
    broker: MosquittoBroker, fleet_files: FleetFiles
) -> None:
    """Messages from agents before agent_client_id: the plan leaves the agent unknown."""
    old = messages_of(machine_report("lathe2", {"X": [1e-4, 2e-4]}))
    with running_fleet(fleet_files.config) as fleet:
        sender = RawPublisher(broker.port, client_id="old-agent")
        try:
            sender.send_messages(old)
        finally:
            sender.close()
        wait_until(lambda: fleet.ingest.stats().stored == len(old), 30, "the old agent's messages")
        (row,) = _plan(base_url(fleet))
        assert row["machine"] == "lathe2" and row["agent"] is None
        (machine,) = _page_machines(base_url(fleet))
        assert machine[4] == ""
