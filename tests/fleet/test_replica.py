"""The plan read from a PostgreSQL streaming replica (database.read_conninfo), the ingest and the
migrations on the primary: a real hot standby (tests.peers.postgres, pg_basebackup -R -X stream)
fed by a real primary, the reports sent through a real mosquitto. The replica keeps answering
while the primary is stopped, and the ingest waits for the primary and loses nothing; a replica
that is away or not ready is a 503 for the web side, never a stopped ingest."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest

from agent.fleet.migrate import migrations
from agent.report.model import Report
from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.fleet.conftest import row_count, write_fleet_config
from tests.fleet.running import base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until
from tests.peers.postgres import PostgresCluster
from tests.support.summary import fault

UNAVAILABLE = b"database unavailable, try again\n"  # agent/fleet/web.py's 503


@pytest.fixture
def primary() -> Iterator[PostgresCluster]:
    with PostgresCluster() as pg:
        yield pg


@pytest.fixture
def replica(primary: PostgresCluster) -> Iterator[PostgresCluster]:
    """A standby of `primary` taken before the fleet migrates it (the schema arrives by
    replay, as on a new site), not started: each test starts it when it wants it."""
    standby = primary.standby()
    try:
        yield standby
    finally:
        standby.destroy()


def reports_of(machines: Sequence[str], per_machine: int) -> list[Report]:
    """`per_machine` reports of each machine, two joints each, a different value every time."""
    return [
        machine_report(m, {"J1": [1e-4, 1e-4 + 1e-6 * n], "J2": [2e-4, 2e-4 + 1e-6 * n]})
        for n in range(per_machine)
        for m in machines
    ]


def newest_of(reports: Sequence[Report]) -> set[str]:
    """The report each machine's joints show in the plan: its machine's last one sent."""
    return set({r.machines[0]: r.message_id for r in reports}.values())


def plan_report_ids(base: str) -> set[str] | None:
    """The report ids the plan shows, or None while it does not answer 200."""
    r = get(base, "/api/plan")
    return {j["report_id"] for j in r.json()["joints"]} if r.status == 200 else None


def stored_ids(conninfo: str) -> list[str]:
    with psycopg.connect(conninfo, connect_timeout=5) as conn:
        return [row[0] for row in conn.execute("SELECT report_id::text FROM reports")]


def send(sender: RawPublisher, reports: Sequence[Report]) -> None:
    for r in reports:
        sender.send_messages(messages_of(r))


def test_the_plan_is_served_from_the_replica_through_a_primary_outage(
    broker: MosquittoBroker, primary: PostgresCluster, replica: PostgresCluster, tmp_path: Path
) -> None:
    replica.start()
    files = write_fleet_config(
        tmp_path / "fleet", broker.port, primary.conninfo, read_conninfo=replica.conninfo
    )
    before = reports_of(["a0", "a1", "a2"], 2)
    during = reports_of(["b0", "b1", "b2", "b3"], 10)  # sent while the primary is stopped
    sender = RawPublisher(broker.port)
    try:
        with running_fleet(files.config) as fleet:
            base = base_url(fleet)
            send(sender, before)
            wait_until(
                lambda: row_count(primary.conninfo, "reports") == len(before), 60, "the ingest"
            )
            # Stored on the primary, shown once the replica has replayed it.
            wait_until(lambda: plan_report_ids(base) == newest_of(before), 60, "the replay")

            primary.stop()
            # Read from the replica alone: the page, the JSON and a stored report.
            assert plan_report_ids(base) == newest_of(before)
            page = get(base, "/")
            assert page.status == 200 and all(m in page.text for m in ("a0", "a1", "a2"))
            shown = get(base, f"/api/reports/{before[-1].message_id}")
            assert shown.status == 200 and shown.json()["message_id"] == before[-1].message_id
            send(sender, during)
            wait_until(lambda: fleet.ingest.stats().db_errors >= 1, 60, "the ingest to fail")
            assert fleet.alive()  # the ingest waits for the primary, the web side serves
            assert plan_report_ids(base) == newest_of(before)
            assert row_count(replica.conninfo, "reports") == len(before)

            primary.start()
            sent = before + during
            wait_until(
                lambda: row_count(primary.conninfo, "reports", restarting_is=-1) == len(sent),
                90,
                "the ingest to catch up",
            )
            wait_until(lambda: replica.replayed(primary), 60, "the replica to catch up")
            assert plan_report_ids(base) == newest_of(sent)
            stats = fleet.ingest.stats()
    finally:
        sender.close()
    on_replica = stored_ids(replica.conninfo)
    lost = len({r.message_id for r in sent} - set(on_replica))
    duplicated = len(on_replica) - len(set(on_replica))
    fault("fleet: primary stopped, plan read from the replica", records_lost=lost)
    assert (lost, duplicated) == (0, 0)
    assert sorted(on_replica) == sorted(stored_ids(primary.conninfo))
    assert row_count(replica.conninfo, "joint_health") == 2 * len(sent)
    assert stats.rejected == 0


def test_a_replica_that_is_away_is_a_503_and_the_ingest_goes_on(
    broker: MosquittoBroker,
    primary: PostgresCluster,
    replica: PostgresCluster,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agent.fleet.service")
    files = write_fleet_config(
        tmp_path / "fleet", broker.port, primary.conninfo, read_conninfo=replica.conninfo
    )
    reports = reports_of(["c0", "c1"], 5)
    sender = RawPublisher(broker.port)
    try:
        with running_fleet(files.config) as fleet:  # the replica is not running
            base = base_url(fleet)
            send(sender, reports)
            wait_until(
                lambda: row_count(primary.conninfo, "reports") == len(reports), 60, "the ingest"
            )
            for path in ("/", "/api/plan", f"/api/reports/{reports[0].message_id}"):
                answer = get(base, path)
                assert (answer.status, answer.body) == (503, UNAVAILABLE), path
            assert get(base, "/api/stats").status == 200  # the ingest's, not the database's
            assert fleet.alive()

            replica.start()
            wait_until(lambda: plan_report_ids(base) == newest_of(reports), 60, "the replica")
    finally:
        sender.close()
    events = [r.getMessage() for r in caplog.records if r.name == "agent.fleet.service"]
    away = [e for e in events if "fleet_plan_database_unavailable" in e]
    assert len(away) == 1, events  # once when it went, not once a request
    assert "database=replica" in away[0]
    assert any("fleet_plan_database_back database=replica" in e for e in events)


def test_a_database_without_the_schema_is_not_read_as_a_replica(
    broker: MosquittoBroker,
    cluster: PostgresCluster,
    database: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """read_conninfo on a database that has not replayed the migrations (a replica far
    behind, or not a replica of conninfo at all): 503, not the tables' absence as a 500."""
    empty = "fleet_not_a_replica"
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {empty}")
    read_conninfo = cluster.conninfo.replace(f"dbname={cluster.dbname}", f"dbname={empty}")
    files = write_fleet_config(
        tmp_path / "fleet", broker.port, database, read_conninfo=read_conninfo
    )
    with running_fleet(files.config) as fleet:
        answer = get(base_url(fleet), "/api/plan")
    assert (answer.status, answer.body) == (503, UNAVAILABLE)
    newest = len(migrations())
    assert f"replayed schema version 0 of {newest}" in caplog.text
