"""`jha fleet` killed -9 (a child process, a real broker keeping its persistent session, a real
PostgreSQL): nothing is lost and nothing is stored twice. A message is acknowledged only after
its commit, so the broker redelivers whatever the killed service had not acknowledged."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg

from agent.fleet.ingest import FAILPOINT_ENV
from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.fleet.conftest import row_count, write_fleet_config
from tests.fleet.running import FleetProcess, get
from tests.peers.mosquitto_broker import MosquittoBroker, free_port, wait_until
from tests.support.summary import fault


def test_killed_after_commit_before_ack_the_redelivery_changes_nothing(
    broker: MosquittoBroker, database: str, tmp_path: Path
) -> None:
    port = free_port()
    files = write_fleet_config(tmp_path / "fleet", broker.port, database, http_port=port)
    report = machine_report("robot1", {f"J{i}": [1e-4, 2e-4, 3e-4] for i in range(1, 7)})
    messages = messages_of(report)
    first = FleetProcess(files.config, tmp_path / "fleet1.log", {FAILPOINT_ENV: "after_commit"})
    first.wait_subscribed()
    sender = RawPublisher(broker.port)
    try:
        sender.send_messages(messages)
    finally:
        sender.close()
    # It dies at its first commit, before any acknowledgement (the fault point is os._exit).
    assert first.proc.wait(30) == 137
    committed = row_count(database, "reports") + row_count(database, "joint_health")
    assert committed >= 1
    second = FleetProcess(files.config, tmp_path / "fleet2.log")
    try:
        second.wait_subscribed()
        base = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: (
                row_count(database, "joint_health") == 6 and row_count(database, "reports") == 1
            ),
            30,
            "every message stored",
        )
        wait_until(
            lambda: get(base, "/api/stats").json()["duplicates"] == committed,
            30,
            "the redelivered messages seen as duplicates",
        )
        stats = get(base, "/api/stats").json()
    finally:
        assert second.stop() == 0
    # Everything the first process committed came again (it had acknowledged nothing) and
    # was recognised; the rest was new.
    assert stats["duplicates"] == committed
    assert stats["stored"] == len(messages) - committed
    assert row_count(database, "joint_health") == 6 and row_count(database, "reports") == 1
    fault("fleet: kill -9 after commit, before ack", records_lost=0)


def test_killed_mid_stream_loses_nothing(
    broker: MosquittoBroker, database: str, tmp_path: Path
) -> None:
    files = write_fleet_config(tmp_path / "fleet", broker.port, database)
    reports = [
        machine_report(f"m{n % 5}", {"J1": [1e-4, 2e-4 + 1e-6 * n], "J2": [3e-4, 3e-4]})
        for n in range(150)
    ]
    first = FleetProcess(files.config, tmp_path / "fleet1.log")
    first.wait_subscribed()
    # Each report's exact messages (the agent's payload builder), none superseded: the agent's
    # outbox would drop an unsent health message for a newer one of the same joint.
    sender = RawPublisher(broker.port)
    agent = threading.Thread(target=lambda: [sender.send_messages(messages_of(r)) for r in reports])
    agent.start()
    wait_until(lambda: row_count(database, "reports") >= 20, 60, "the first reports stored")
    first.kill9()
    agent.join(120)
    sender.close()
    assert not agent.is_alive()
    second = FleetProcess(files.config, tmp_path / "fleet2.log")
    try:
        wait_until(lambda: row_count(database, "reports") == len(reports), 60, "every report")
        wait_until(
            lambda: row_count(database, "joint_health") == 2 * len(reports), 60, "all health"
        )
    finally:
        assert second.stop() == 0
    with psycopg.connect(database) as conn:
        ids = {r[0] for r in conn.execute("SELECT report_id::text FROM reports")}
    lost = len({r.message_id for r in reports} - ids)
    fault("fleet: kill -9 mid-stream of 150 reports", records_lost=lost)
    assert lost == 0
    assert row_count(database, "joint_health") == 2 * len(reports)
