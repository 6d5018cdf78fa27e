"""Malformed and hostile messages: each is logged and counted, none is stored, none stops the
service; a valid message after them is stored. Then the fleet's own fuzzing of what it accepts:
mutated agent payloads through the parser into a real database, never anything but stored or
refused with a reason."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.fleet.messages import PayloadError, parse_message
from agent.fleet.settings import load_fleet_settings
from agent.fleet.store import Placement, Store, connect
from tests.fleet.agents import RawPublisher, machine_report, messages_of, payload
from tests.fleet.conftest import FleetFiles
from tests.fleet.running import running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until
from tests.support.summary import counted

PREFIXES = ("jha", "site-b/jha")


def _valid() -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    messages = messages_of(machine_report("robot1", {"J1": [4e-4, 5e-4, 6e-4]}))
    return messages[0].topic, payload(messages, 0), messages[1].topic, payload(messages, 1)


def hostile_messages() -> list[tuple[str, bytes]]:
    report_topic, report, health_topic, health = _valid()

    def with_(doc: dict[str, Any], **changes: Any) -> bytes:
        return json.dumps({**doc, **changes}).encode()

    return [
        (report_topic, b"not json"),
        (report_topic, b"\xff\xfe garbage"),
        (report_topic, b"[" * 100_000 + b"]" * 100_000),
        (report_topic, b"[1, 2, 3]"),
        (report_topic, b'{"schema": "jha.report/1", "x": NaN}'),
        (report_topic, b"1" * 5000),
        (report_topic, b" " * (1024 * 1024 + 1)),
        (report_topic, with_(report, schema="jha.report/2")),
        (report_topic, with_(report, message_id="not-a-uuid")),
        (report_topic, with_(report, machines=["someone-else"])),
        (report_topic, with_(report, created_at="yesterday")),
        (report_topic, with_(report, host="edge\u0000")),
        (report_topic, json.dumps({**report, "host": "\ud800"}).encode()),
        (report_topic, with_(report, joints=[{"controller": "other", "joint": "J1"}])),
        (report_topic, json.dumps(report).replace('"value": 0.0006', '"value": 1e999').encode()),
        (health_topic, with_(health, joint="J2")),
        (health_topic, with_(health, status="exploded")),
        (health_topic, with_(health, indicators=[])),
        (health_topic, with_(health, estimated_at="2026-01-01T00:00:00")),
        (health_topic, with_(health, forecast=[1, 2])),
        ("jha/agent/x/status", b'{"schema": "jha.agent_status/1", "client_id": "y"}'),
        (health_topic, b'{"schema": "jha.agent_status/1", "client_id": "x", "state": "online"}'),
        ("jha/%ZZ/report", with_(report)),
    ]


def test_hostile_messages_are_counted_and_never_stored(
    broker: MosquittoBroker, fleet_files: FleetFiles, caplog: pytest.LogCaptureFixture
) -> None:
    conninfo = load_fleet_settings(fleet_files.config).database.conninfo
    hostile = hostile_messages()
    sender = RawPublisher(broker.port)
    caplog.set_level(logging.WARNING, logger="agent.fleet.ingest")
    try:
        with running_fleet(fleet_files.config) as fleet:
            for topic, body in hostile:
                sender.send(topic, body)
            wait_until(lambda: fleet.ingest.stats().rejected == len(hostile), 30, "every refusal")
            good = messages_of(machine_report("robot3", {"J1": [1e-4, 1e-4, 1e-4]}))
            sender.send_messages(good)
            wait_until(lambda: fleet.ingest.stats().stored == len(good), 30, "the valid report")
            stats = fleet.ingest.stats()
    finally:
        sender.close()
    assert stats.rejected == len(hostile)
    with psycopg.connect(conninfo) as conn:
        machines = conn.execute(
            "SELECT machine FROM reports UNION SELECT machine FROM joint_health"
        )
        assert {r[0] for r in machines} == {"robot3"}
    refusals = [
        r.getMessage() for r in caplog.records if "fleet_message_rejected" in r.getMessage()
    ]
    assert len(refusals) == len(hostile)
    assert all(m.startswith("event=fleet_message_rejected ") and "reason=" in m for m in refusals)


@pytest.fixture
def store(database: str) -> Iterator[Store]:
    conn = connect(database)
    s = Store(conn, {p: Placement("s", "l") for p in PREFIXES})
    s.migrate()
    yield s
    conn.close()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_fuzzed_agent_payloads_are_stored_or_refused(store: Store, data: st.DataObject) -> None:
    tally = counted("fuzzing", "fleet: mutated agent payloads into PostgreSQL")
    tally.case()
    report_topic, report, health_topic, health = _valid()
    topic, doc = data.draw(st.sampled_from([(report_topic, report), (health_topic, health)]))
    key = data.draw(st.sampled_from(sorted(doc)))
    mutated = {**doc, key: data.draw(_JSON)}
    raw = json.dumps(mutated, allow_nan=True).encode()
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(raw)))
        raw = raw[:cut] + data.draw(st.binary(max_size=8)) + raw[cut:]
    try:
        message = parse_message(topic, raw, PREFIXES, 1024 * 1024)
    except PayloadError:
        return
    try:
        store.store_batch([message])
    except Exception as exc:  # the property: nothing the parser accepts makes the store fail
        tally.crash(f"{type(exc).__name__}: {exc}")
        raise
