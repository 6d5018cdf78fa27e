"""Faults during ingest, with real peers: PostgreSQL restarted, the broker restarted. Nothing
is lost (every report the agents sent is stored) and nothing is stored twice (the tables are
keyed by message id, and the counts say so)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from agent.fleet.settings import load_fleet_settings
from tests.fleet.agents import RawPublisher, machine_report, messages_of, publish_reports
from tests.fleet.conftest import row_count, write_fleet_config
from tests.fleet.running import base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until
from tests.peers.postgres import PostgresCluster
from tests.support.summary import fault


@pytest.fixture
def own_cluster() -> Iterator[PostgresCluster]:
    with PostgresCluster() as pg:
        yield pg


def test_postgresql_restarted_during_ingest(
    broker: MosquittoBroker, own_cluster: PostgresCluster, tmp_path: Path
) -> None:
    files = write_fleet_config(tmp_path / "fleet", broker.port, own_cluster.conninfo)
    conninfo = load_fleet_settings(files.config).database.conninfo
    reports = [machine_report(f"m{n % 4}", {"J1": [1e-4, 1e-4 + 1e-6 * n]}) for n in range(200)]
    sender = RawPublisher(broker.port)
    try:
        with running_fleet(files.config) as fleet:
            agent = threading.Thread(
                target=lambda: [sender.send_messages(messages_of(r)) for r in reports]
            )
            agent.start()
            wait_until(
                lambda: row_count(conninfo, "reports", restarting_is=-1) >= 30,
                60,
                "the first reports",
            )
            own_cluster.restart()
            agent.join(120)
            wait_until(
                lambda: row_count(conninfo, "reports", restarting_is=-1) == len(reports),
                60,
                "every report",
            )
            wait_until(
                lambda: row_count(conninfo, "joint_health", restarting_is=-1) == len(reports),
                60,
                "all health",
            )
            stats = fleet.ingest.stats()
            # The web side found its way back to the database too.
            assert get(base_url(fleet), "/api/plan").status == 200
    finally:
        sender.close()
    with psycopg.connect(conninfo) as conn:
        ids = {r[0] for r in conn.execute("SELECT report_id::text FROM reports")}
    lost = len({r.message_id for r in reports} - ids)
    fault("fleet: PostgreSQL restarted during ingest of 200 reports", records_lost=lost)
    assert lost == 0
    assert stats.db_errors >= 1  # the restart was seen, and survived
    assert stats.rejected == 0


def test_broker_restarted_during_ingest(
    broker: MosquittoBroker, database: str, tmp_path: Path
) -> None:
    files = write_fleet_config(tmp_path / "fleet", broker.port, database)
    reports = [
        machine_report(f"r{n % 3}", {"J1": [2e-4, 2e-4 + 1e-6 * n], "J2": [3e-4, 3e-4]})
        for n in range(120)
    ]
    with running_fleet(files.config) as fleet:
        # The agent's own publisher: store-and-forward across the broker's absence.
        agent = threading.Thread(
            target=publish_reports,
            args=(broker.port, tmp_path / "agent", reports),
            kwargs={"reconnect_min_s": 0.05, "reconnect_max_s": 0.2},
        )
        agent.start()
        wait_until(
            lambda: row_count(database, "reports", restarting_is=-1) >= 20, 60, "the first reports"
        )
        broker.restart()  # SIGTERM: mosquitto saves the fleet's session, then comes back
        agent.join(180)
        assert not agent.is_alive()
        wait_until(
            lambda: row_count(database, "reports", restarting_is=-1) == len(reports),
            60,
            "every report",
        )
        # The agent drops an unsent health message for a newer one of the same joint; whatever
        # got through, each joint's newest health is its machine's last report's. A report's
        # health messages follow it and may be committed in the next batch: waited for.
        newest = {f"r{n % 3}": r.message_id for n, r in enumerate(reports)}
        expected = sorted((m, j, newest[m]) for m in newest for j in ("J1", "J2"))
        wait_until(lambda: _latest(database) == expected, 60, "each joint's newest health")
        stats = fleet.ingest.stats()
    with psycopg.connect(database) as conn:
        ids = {r[0] for r in conn.execute("SELECT report_id::text FROM reports")}
    lost = len({r.message_id for r in reports} - ids)
    fault("fleet: broker restarted during ingest of 120 reports", records_lost=lost)
    assert lost == 0
    assert stats.rejected == 0


def _latest(database: str) -> list[tuple[str, str, str]]:
    """(machine, joint, report id) of each joint's newest health, sorted."""
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT h.machine, h.joint, h.report_id::text FROM joint_latest l"
            " JOIN joint_health h USING (message_id)"
        ).fetchall()
    return sorted((str(m), str(j), str(r)) for m, j, r in rows)
