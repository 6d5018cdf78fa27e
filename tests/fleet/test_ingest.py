"""Ingest of real agent messages (the agent's own publisher, through a real mosquitto, into a real
PostgreSQL): what is stored, idempotency, and what a plan built from it says."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import psycopg

from agent.fleet.ingest import REPLAYED
from agent.fleet.settings import load_fleet_settings
from tests.fleet.agents import RawPublisher, machine_report, messages_of, publish_reports
from tests.fleet.conftest import FleetFiles
from tests.fleet.running import base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until


def rows(conninfo: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(conninfo) as conn:
        return list(conn.execute(sql).fetchall())


def test_agent_reports_are_stored_with_health_and_status(
    broker: MosquittoBroker, fleet_files: FleetFiles, tmp_path: Path
) -> None:
    conninfo = load_fleet_settings(fleet_files.config).database.conninfo
    reports = [
        machine_report("robot1", {"J1": [4e-4, 5e-4, 6e-4], "J2": [1.1e-3, 1.3e-3, 1.5e-3]}),
        machine_report("robot2", {"J1": [2.2e-3, 2.4e-3, 2.6e-3]}),
    ]
    with running_fleet(fleet_files.config) as fleet:
        publish_reports(broker.port, tmp_path / "agent", reports)
        wait_until(lambda: fleet.ingest.stats().stored >= 2 + 3 + 2, 30, "reports and health")
        stats = fleet.ingest.stats()
        assert stats.rejected == 0
        plan = get(base_url(fleet), "/api/plan?history=1").json()["joints"]
    ids = {r[0] for r in rows(conninfo, "SELECT report_id::text FROM reports")}
    assert ids == {r.message_id for r in reports}
    health = rows(
        conninfo, "SELECT machine, joint, status, report_id::text FROM joint_health ORDER BY 1, 2"
    )
    assert [(m, j, s) for m, j, s, _ in health] == [
        ("robot1", "J1", "ok"),
        ("robot1", "J2", "watch"),
        ("robot2", "J1", "alert"),
    ]
    assert {h[3] for h in health} == ids
    # The agent's retained status: online at connection, offline at its clean close.
    (state,) = rows(conninfo, "SELECT state FROM agent_status WHERE client_id = 'jha-test'")
    assert state[0] in ("online", "offline")
    # The plan: alert first, then watch, then ok; every row carries site and line of its prefix.
    assert [(p["machine"], p["joint"], p["status"]) for p in plan] == [
        ("robot2", "J1", "alert"),
        ("robot1", "J2", "watch"),
        ("robot1", "J1", "ok"),
    ]
    assert {(p["site"], p["line"]) for p in plan} == {("plant-a", "line-1")}
    watch = plan[1]
    assert watch["forecast"]["limit"] == "alert"
    low, high = watch["forecast"]["interval"]
    assert low is not None and low <= watch["forecast"]["at"]
    assert high is None or watch["forecast"]["at"] <= high
    assert watch["recommendation"]["action"]
    assert [p["value"] for p in watch["history"]] == [1.1e-3, 1.3e-3, 1.5e-3]
    assert watch["report_url"] == f"/reports/{reports[0].message_id}"
    assert not any(p["stale"] for p in plan)


def test_the_same_messages_twice_change_nothing(
    broker: MosquittoBroker, fleet_files: FleetFiles
) -> None:
    conninfo = load_fleet_settings(fleet_files.config).database.conninfo
    report = machine_report("cell9", {"A1": [1e-4, 2e-4, 3e-4], "A2": [5e-4, 5e-4, 5e-4]})
    messages = messages_of(report)
    sender = RawPublisher(broker.port)
    try:
        with running_fleet(fleet_files.config) as fleet:
            sender.send_messages(messages)
            wait_until(lambda: fleet.ingest.stats().stored == 3, 30, "one report, two joints")
            before = rows(conninfo, "SELECT * FROM joint_health ORDER BY message_id")
            sender.send_messages(messages)  # a replay: the same ids
            sender.send_messages(messages)
            wait_until(lambda: fleet.ingest.stats().duplicates == 6, 30, "the replays")
            stats = fleet.ingest.stats()
    finally:
        sender.close()
    assert (stats.stored, stats.duplicates, stats.rejected) == (3, 6, 0)
    assert rows(conninfo, "SELECT count(*) FROM reports") == [(1,)]
    assert rows(conninfo, "SELECT * FROM joint_health ORDER BY message_id") == before


def _with(payload: bytes, **fields: str) -> bytes:
    doc = json.loads(payload)
    doc.update(fields)
    return json.dumps(doc).encode()


def test_a_time_stamp_from_the_future_and_an_id_replayed_with_another_time_are_refused(
    broker: MosquittoBroker, fleet_files: FleetFiles
) -> None:
    """Issue 31, points 1 and 3, in the fleet itself (whatever the broker lets through): a
    health stamped in the year 8999 used to be stored and hide the genuine agent's later alert
    for good (the newest pointer only moves forward), and hold the machine fresh; a report id
    replayed with another time added a second row. Both are refused and counted, by reason."""
    conninfo = load_fleet_settings(fleet_files.config).database.conninfo
    genuine = messages_of(machine_report("robot2", {"J1": [2.2e-3, 2.4e-3, 2.6e-3]}))
    health = next(m for m in genuine if m.topic.endswith("/health"))
    report = next(m for m in genuine if m.topic.endswith("/report"))
    forged = _with(
        health.payload,
        message_id=str(uuid.uuid4()),
        estimated_at="8999-01-01T00:00:00+00:00",
        report_created_at="8999-01-01T00:00:00+00:00",
    )
    created = datetime.fromisoformat(json.loads(report.payload)["created_at"])
    replay = _with(report.payload, created_at=(created - timedelta(seconds=1)).isoformat())
    sender = RawPublisher(broker.port, client_id="hostile")
    try:
        with running_fleet(fleet_files.config) as fleet:
            sender.send(health.topic, forged, False)
            wait_until(lambda: fleet.ingest.stats().rejected >= 1, 30, "the forged health")
            sender.send_messages(genuine)
            wait_until(lambda: fleet.ingest.stats().stored == len(genuine), 30, "the genuine")
            sender.send(report.topic, replay, False)
            wait_until(lambda: fleet.ingest.stats().rejected >= 2, 30, "the replay")
            stats = fleet.ingest.stats()
            plan = get(base_url(fleet), "/api/plan").json()["joints"]
    finally:
        sender.close()
    assert stats.rejected_by_reason == {
        "time stamp ahead of the fleet's clock": 1,
        REPLAYED: 1,
    }
    assert rows(conninfo, "SELECT count(*) FROM reports") == [(1,)]
    assert rows(conninfo, "SELECT count(*) FROM joint_health") == [(1,)]
    assert [(p["machine"], p["status"]) for p in plan] == [("robot2", "alert")]
    (last,) = rows(conninfo, "SELECT last_report_at FROM machines WHERE machine = 'robot2'")
    assert last[0] == created
