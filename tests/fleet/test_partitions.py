"""The history by month (migration 0004): rows land in their month's partition, or in the default
one when no partition holds their month yet (and move into it when it is made); a retention
drops whole months, and a joint whose newest health went with them leaves the plan; the service
keeps this month's and next month's partitions and applies database.retention_months."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from agent.fleet.messages import parse_message
from agent.fleet.plan import PlanFilter, PlanReader
from agent.fleet.store import Placement, Store, connect
from tests.fleet.agents import machine_report, messages_of
from tests.fleet.conftest import write_fleet_config
from tests.fleet.running import running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until


def _store(database: str) -> Store:
    store = Store(connect(database), {"jha": Placement("plant-a", "line-1")})
    store.migrate()
    return store


def _stored(store: Store, machine: str, end: datetime) -> None:
    report = machine_report(machine, {"J1": [4e-4, 5e-4]}, end=end)
    store.store_batch(
        [parse_message(m.topic, m.payload, ("jha",), 1 << 20) for m in messages_of(report)]
    )


def _where(database: str, table: str) -> dict[str, int]:
    """Rows per partition of `table`."""
    with psycopg.connect(database) as conn:
        rows = conn.execute(f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1")
        return {str(name): int(n) for name, n in rows}


def test_months_partitions_the_default_and_the_retention(database: str) -> None:
    store = _store(database)
    now = datetime.now(UTC)
    this_month = f"y{now:%Y}m{now:%m}"
    _stored(store, "press-now", now)
    _stored(store, "press-2019", datetime(2019, 5, 14, 8, 0, tzinfo=UTC))
    assert _where(database, "joint_health") == {
        f"joint_health_{this_month}": 1,
        "joint_health_other": 1,  # no partition held May 2019
    }
    assert _where(database, "reports") == {f"reports_{this_month}": 1, "reports_other": 1}
    # Its month's partition made: the waiting rows move into it.
    with store.conn.cursor() as cur:
        cur.execute("SELECT fleet_month_partition('2019-05-01T00:00:00Z')")
    store.conn.commit()
    assert _where(database, "joint_health") == {
        f"joint_health_{this_month}": 1,
        "joint_health_y2019m05": 1,
    }
    # A duplicate still inserts nothing, in its partition as in the default one.
    _stored(store, "press-2019", datetime(2019, 5, 14, 8, 0, tzinfo=UTC))
    assert store.counts()["joint_health"] == 3  # a new report (new ids) of the same machine

    reader = PlanReader(lambda: psycopg.connect(database, autocommit=True), 1e7)
    assert {r.machine for r in reader.plan(PlanFilter())} == {"press-now", "press-2019"}
    # A retention of 12 months drops May 2019 (two reports) and keeps this month.
    assert store.keep_partitions(12) == 2  # reports_y2019m05 and joint_health_y2019m05
    assert _where(database, "joint_health") == {f"joint_health_{this_month}": 1}
    assert {r.machine for r in reader.plan(PlanFilter())} == {"press-now"}
    # Next month's partition is there before the month starts.
    ahead = (now.replace(day=1) + timedelta(days=32)).strftime("y%Ym%m")
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (f"joint_health_{ahead}",)).fetchone() != (
            None,
        )
    store.conn.close()


def test_the_service_keeps_the_partitions_and_its_retention(
    broker: MosquittoBroker, database: str, tmp_path: Path
) -> None:
    store = _store(database)
    _stored(store, "lathe-2018", datetime(2018, 3, 2, tzinfo=UTC))
    with store.conn.cursor() as cur:
        cur.execute("SELECT fleet_month_partition('2018-03-02T00:00:00Z')")
    store.conn.commit()
    store.conn.close()
    files = write_fleet_config(tmp_path / "fleet", broker.port, database)
    text = files.config.read_text().replace("database:\n", "database:\n  retention_months: 24\n")
    files.config.write_text(text)
    with running_fleet(files.config):
        wait_until(
            lambda: (
                "joint_health_y2018m03" not in _where(database, "joint_health")
                and _where(database, "joint_health") == {}
            ),
            30,
            "the service to drop March 2018",
        )


def test_dropping_a_month_gives_up_on_a_reader_that_holds_the_table(database: str) -> None:
    """A reader inside a long transaction on joint_health blocks the DROP of a partition: the
    writer's call gives up at its lock timeout instead of holding up the ingest, the connection
    stays usable, and once the reader is gone the month is dropped."""
    store = _store(database)
    _stored(store, "press-2019", datetime(2019, 5, 14, 8, 0, tzinfo=UTC))
    with store.conn.cursor() as cur:
        cur.execute("SELECT fleet_month_partition('2019-05-01T00:00:00Z')")
    store.conn.commit()
    with psycopg.connect(database) as reader:
        reader.execute("SELECT count(*) FROM joint_health").fetchone()  # holds ACCESS SHARE
        with pytest.raises(psycopg.errors.LockNotAvailable):
            store.keep_partitions(12, lock_timeout_s=0.2)
        assert "joint_health_y2019m05" in _where(database, "joint_health")
        _stored(store, "press-now", datetime.now(UTC))  # the writer's connection still works
        reader.rollback()
    assert store.keep_partitions(12, lock_timeout_s=0.2) == 2
    assert "joint_health_y2019m05" not in _where(database, "joint_health")
    store.conn.close()
