"""Sites: an agent publishes to its site's mosquitto, which forwards to the central one through a
bridge (QoS 1, a persistent bridge session); `jha fleet` subscribes on the central side. The
report arrives once, with its site and line, also when the bridge was down while the agent
published (the site broker queues for the bridge)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent.fleet.service import FleetService
from tests.fleet.agents import machine_report, publish_reports
from tests.fleet.conftest import row_count, write_fleet_config
from tests.fleet.running import base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until

PREFIX = "site-b/jha"


def bridge_lines(central_port: int) -> str:
    """What a site's mosquitto.conf adds to forward its agents' topics (docs: README, Fleet)."""
    return (
        "connection plant-central\n"
        f"address 127.0.0.1:{central_port}\n"
        f"topic {PREFIX}/# out 1\n"
        "cleansession false\n"
        "bridge_protocol_version mqttv311\n"
        "restart_timeout 1 2\n"
    )


def plan_of(fleet: FleetService) -> list[dict[str, Any]]:
    joints: list[dict[str, Any]] = get(base_url(fleet), "/api/plan").json()["joints"]
    return joints


@pytest.fixture
def site_broker(tmp_path: Path, broker: MosquittoBroker) -> Iterator[MosquittoBroker]:
    site = MosquittoBroker(tmp_path / "site", persistence=True)
    with site.conf_file.open("a") as f:
        f.write(bridge_lines(broker.port))
    site.start()
    yield site
    site.stop()


def test_a_site_broker_bridged_to_the_central_one(
    broker: MosquittoBroker, site_broker: MosquittoBroker, database: str, tmp_path: Path
) -> None:
    files = write_fleet_config(tmp_path / "fleet", broker.port, database)
    first = machine_report("lathe-4", {"X": [2e-4, 2.5e-4, 3e-4], "Z": [1.2e-3, 1.4e-3, 1.6e-3]})
    second = machine_report("lathe-4", {"X": [2e-4, 2.5e-4, 3.1e-4]})
    with running_fleet(files.config) as fleet:
        publish_reports(site_broker.port, tmp_path / "agent", [first], topic_prefix=PREFIX)
        wait_until(lambda: row_count(database, "reports") == 1, 30, "the bridged report")
        # The central broker away: the site broker keeps the bridge's messages until it is back.
        broker.stop()
        publish_reports(site_broker.port, tmp_path / "agent", [second], topic_prefix=PREFIX)
        broker.start()
        wait_until(lambda: row_count(database, "reports") == 2, 60, "the report queued at the site")
        wait_until(lambda: len(plan_of(fleet)) == 2, 30, "both joints in the plan")
        plan = plan_of(fleet)
        stats = fleet.ingest.stats()
    with psycopg.connect(database) as conn:
        ids = sorted(r[0] for r in conn.execute("SELECT report_id::text FROM reports"))
    assert ids == sorted([first.message_id, second.message_id])
    assert stats.rejected == 0
    assert {(p["site"], p["line"], p["machine"]) for p in plan} == {
        ("plant-b", "line-7", "lathe-4")
    }
    newest = {p["joint"]: p["report_id"] for p in plan}
    assert newest == {"X": second.message_id, "Z": first.message_id}
