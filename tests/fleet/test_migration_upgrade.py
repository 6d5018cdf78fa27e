"""A fleet database written by the first schema (0001: jsonb documents, the newest-health pointer
written by the service) upgraded in place by today's migrations: every row kept, the documents
the same JSON, the indicator names backfilled, and the plan read from it as before. A plant that
ran the first version must not lose its history to an upgrade."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
from psycopg.types.json import Jsonb

from agent.fleet.messages import parse_message
from agent.fleet.migrate import migrate, migrations
from agent.fleet.plan import PlanFilter, PlanReader
from agent.fleet.store import Placement, Store, connect
from tests.fleet.agents import machine_report, messages_of, payload

_OLD_HEALTH = (
    "INSERT INTO joint_health (message_id, report_id, prefix, machine, joint, status, ne107,"
    " indicator, value, unit, estimated_at, report_created_at, spark, document)"
    " VALUES (%s, %s, 'jha', %s, %s, %s, 'normal', %s, %s, 'rad', %s, %s, '1,2 3,4', %s)"
)


def _as_first_version(conninfo: str) -> tuple[dict[str, object], dict[str, object]]:
    """Schema 0001 only, and one report with one joint's health written as that version did."""
    first = migrations()[0]
    messages = messages_of(machine_report("press1", {"J1": [4e-4, 5e-4]}))
    report, health = payload(messages, 0), payload(messages, 1)
    at = datetime.now(UTC)
    with psycopg.connect(conninfo) as conn:
        conn.execute(
            "CREATE TABLE schema_version (version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(first.sql)
        conn.execute("INSERT INTO schema_version VALUES (1, %s)", (first.name,))
        conn.execute(
            "INSERT INTO reports (report_id, prefix, machine, created_at, document)"
            " VALUES (%s, 'jha', 'press1', %s, %s)",
            (report["message_id"], at, Jsonb(report)),
        )
        conn.execute(
            _OLD_HEALTH,
            (
                health["message_id"],
                report["message_id"],
                "press1",
                "J1",
                health["status"],
                health["indicator"],
                5e-4,
                at,
                at,
                Jsonb(health),
            ),
        )
        conn.execute(
            "INSERT INTO joint_latest VALUES ('jha', 'press1', 'J1', %s, %s, %s)",
            (health["message_id"], at, at),
        )
        conn.execute(
            "INSERT INTO machines VALUES ('jha', 'press1', 'plant-a', 'line-1', %s)", (at,)
        )
    return report, health


def test_a_first_version_database_upgrades_with_its_rows(database: str) -> None:
    report, health = _as_first_version(database)
    with connect(database) as conn:
        applied = migrate(conn)
        conn.commit()
    assert applied == [m.name for m in migrations()[1:]]
    with psycopg.connect(database) as conn:
        (doc, names) = conn.execute(
            "SELECT document, indicators FROM joint_health WHERE message_id = %s",
            (health["message_id"],),
        ).fetchone() or (None, None)
        (stored_report,) = conn.execute("SELECT document FROM reports").fetchone() or (None,)
    assert doc == health and stored_report == report  # the same JSON, now as json
    assert names == [i["name"] for i in health["indicators"]]  # type: ignore[attr-defined]
    # The plan reads the upgraded rows, the backfilled names included.
    reader = PlanReader(lambda: psycopg.connect(database, autocommit=True), 86400.0)
    (row,) = reader.plan(PlanFilter(indicator="amplitude_rad_s"))
    assert (row.machine, row.joint, row.report_id) == ("press1", "J1", report["message_id"])
    assert row.agent_state is None  # the first version knew no agent


def test_after_the_upgrade_the_trigger_moves_the_pointer(database: str) -> None:
    """New health stored by today's service moves the pointer the first version wrote."""
    _as_first_version(database)
    newer = messages_of(machine_report("press1", {"J1": [4e-4, 5e-4, 7e-4]}))
    with connect(database) as conn:
        store = Store(conn, {"jha": Placement("plant-a", "line-1")})
        store.migrate()
        store.store_batch([parse_message(m.topic, m.payload, ("jha",), 1 << 20) for m in newer])
        (latest,) = conn.execute(
            "SELECT h.report_id::text FROM joint_latest l JOIN joint_health h USING (message_id)"
        ).fetchone() or (None,)
    assert latest == payload(newer, 0)["message_id"]
