"""The broker recipe of issue 31 (config/mosquitto/jha.acl.example), on a real mosquitto: one
credential per agent, each agent may write only its own machines' topics and status, the fleet
reads and writes nothing. Agent A's forged health and status for agent B's machine never reach
the fleet; its own messages do."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import psycopg

from agent.fleet.settings import load_fleet_settings
from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.fleet.conftest import write_fleet_config
from tests.fleet.running import base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until

REPO = Path(__file__).resolve().parents[2]
USERS = {"jha-fleet": "fleet-pw-1", "edge-a": "a-pw-2", "edge-b": "b-pw-3"}
# The shipped example's rules, for this test's prefix and agents.
ACL = """\
user jha-fleet
topic read jha/#

user edge-a
topic write jha/robot-a/#
topic write jha/agent/edge-a/status

user edge-b
topic write jha/robot-b/#
topic write jha/agent/edge-b/status
"""


SOURCES = textwrap.dedent("""\
    sources:
      - topic_prefix: jha
        site: plant-a
        line: line-1
    """)


def test_the_shipped_recipe_has_these_rules() -> None:
    shipped = (REPO / "config/mosquitto/jha.acl.example").read_text()
    rules = [line for line in shipped.splitlines() if line and not line.startswith("#")]
    assert rules[:2] == ["user jha-fleet", "topic read plant-a/#"]
    assert all(r.startswith(("user ", "topic write ")) for r in rules[2:])


def test_an_agent_cannot_write_another_agents_machine(tmp_path: Path, database: str) -> None:
    with MosquittoBroker(tmp_path / "broker", users=USERS, acl=ACL) as broker:
        files = write_fleet_config(
            tmp_path / "fleet",
            broker.port,
            database,
            credentials=("jha-fleet", USERS["jha-fleet"]),
            sources=SOURCES,
        )
        conninfo = load_fleet_settings(files.config).database.conninfo
        own = messages_of(machine_report("robot-a", {"J1": [1e-4, 1e-4, 1e-4]}))
        victim = messages_of(machine_report("robot-b", {"J1": [2.2e-3, 2.4e-3, 2.6e-3]}))
        forged_status = json.dumps(
            {"schema": "jha.agent_status/1", "client_id": "edge-b", "state": "offline",
             "at": "2026-12-01T00:00:00Z"}
        ).encode()  # fmt: skip
        a = RawPublisher(broker.port, "edge-a", credentials=("edge-a", USERS["edge-a"]))
        try:
            with running_fleet(files.config) as fleet:
                a.send_messages(victim)  # accepted by the broker's protocol, delivered to nobody
                a.send("jha/agent/edge-b/status", forged_status, True)
                a.send_messages(own)
                wait_until(lambda: fleet.ingest.stats().stored >= len(own), 30, "A's own")
                plan = get(base_url(fleet), "/api/plan").json()["joints"]
                stats = fleet.ingest.stats()
        finally:
            a.close()
    assert [p["machine"] for p in plan] == ["robot-a"]
    assert (stats.received, stats.stored, stats.rejected) == (len(own), len(own), 0)
    with psycopg.connect(conninfo) as conn:
        # the forged retained status for edge-b never reached the fleet
        assert conn.execute("SELECT count(*) FROM agent_status").fetchone() == (0,)


def test_the_broker_refuses_what_the_fleet_would_refuse(tmp_path: Path, database: str) -> None:
    """Issue 31, point 4: 1.2 MB and 10 MB payloads were dropped by the broker on their way out
    to the fleet (its maximum packet size) and counted nowhere, and a 10 MB retained message
    stayed in the broker's store. The recipe's `max_packet_size` (the fleet's max_payload_bytes
    plus 128 kB for topic and header, what the fleet itself accepts) makes the broker refuse
    them on the way in: the sender is disconnected, nothing is stored or retained, and the
    broker's log names the client ("disconnected due to oversize packet"). (mosquitto's older
    `message_size_limit` acknowledged and dropped them without a word: measured, not used.)"""
    limit = 1024 * 1024 + 128 * 1024  # the fleet's max_payload_bytes default + its headroom
    with MosquittoBroker(tmp_path / "broker", max_packet_size=limit) as broker:
        files = write_fleet_config(tmp_path / "fleet", broker.port, database, sources=SOURCES)
        own = messages_of(machine_report("robot-a", {"J1": [1e-4, 1e-4, 1e-4]}))
        big = RawPublisher(broker.port, "oversized")
        sender = RawPublisher(broker.port, "edge-a")
        try:
            with running_fleet(files.config) as fleet:
                acked = big.offer("jha/robot-b/J1/health", b"x" * (limit + 200_000), retain=True)
                sender.send_messages(own)
                wait_until(lambda: fleet.ingest.stats().stored >= len(own), 30, "the rest")
                stats = fleet.ingest.stats()
        finally:
            big.close()
            sender.close()
        late = RawPublisher(broker.port, "late-subscriber")
        try:
            kept = late.retained("jha/robot-b/J1/health", wait_s=1.0)
        finally:
            late.close()
        log = broker.log_file.read_text()
    assert not acked
    assert (stats.received, stats.stored, stats.rejected) == (len(own), len(own), 0)
    assert kept is None  # not retained by the broker either
    assert "Client oversized disconnected due to oversize packet" in log
