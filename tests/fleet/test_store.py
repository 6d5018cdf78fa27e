"""agent.fleet.store against a real PostgreSQL (monthly partitions included): a batch larger
than any the ingest makes is stored whole, a message repeated inside one batch is stored once,
the newest-health pointer follows the newest report whatever the rows' order, and a batch that
fails leaves nothing behind. One statement stores each kind of row: two statuses of one agent
in a batch, and health rows whose optional columns are all empty, must still be stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from agent.fleet.messages import HealthMessage, Message, ReportMessage, parse_message
from agent.fleet.store import BatchResult, Placement, Store, connect
from tests.fleet.agents import machine_report, messages_of

PREFIX = "jha"


@pytest.fixture
def store(database: str) -> Iterator[Store]:
    conn = connect(database)
    s = Store(conn, {PREFIX: Placement("site", "line")})
    s.migrate()
    yield s
    conn.close()


def parsed(machine: str, joints: int, end: datetime | None = None) -> list[Message]:
    """One agent's report and its joints' health messages, as the ingest parses them."""
    report = machine_report(machine, {f"J{j}": [1e-4, 2e-4, 3e-4] for j in range(joints)}, end)
    return [
        parse_message(m.topic, m.payload, (PREFIX,), 1 << 20) for m in messages_of(report, PREFIX)
    ]


def test_a_batch_of_4000_messages_is_stored_whole(store: Store) -> None:
    messages = [m for i in range(500) for m in parsed(f"cell{i:03d}", 7)]
    healths = sum(isinstance(m, HealthMessage) for m in messages)
    result = store.store_batch(messages)
    assert (result.stored, result.duplicates) == (len(messages), 0)
    counts = store.counts()
    assert counts["reports"] == 500 and counts["joint_health"] == healths
    assert counts["joint_latest"] == healths and counts["machines"] == 500


def test_a_message_repeated_inside_one_batch_is_stored_once(store: Store) -> None:
    messages = parsed("robot1", 3)
    result = store.store_batch(messages + messages[::-1] + messages)
    assert (result.stored, result.duplicates) == (len(messages), 2 * len(messages))
    assert store.counts()["joint_health"] == 3
    again = store.store_batch(messages)
    assert (again.stored, again.duplicates) == (0, len(messages))


def test_the_newest_health_pointer_follows_the_newest_report_in_a_batch(store: Store) -> None:
    now = datetime.now(UTC)
    older, newer = parsed("robot1", 2, now - timedelta(days=1)), parsed("robot1", 2, now)
    store.store_batch(newer + older)  # newest first: the older rows must not win
    latest = store.conn.execute(
        "SELECT l.joint, h.report_created_at FROM joint_latest l"
        " JOIN joint_health h USING (message_id) ORDER BY l.joint"
    ).fetchall()
    store.conn.commit()
    want = next(m for m in newer if isinstance(m, ReportMessage)).created_at
    assert [j for j, _ in latest] == ["J0", "J1"] and all(at == want for _, at in latest)


def test_a_batch_that_fails_leaves_nothing(store: Store) -> None:
    good = parsed("robot1", 2)
    # A message under a prefix this store has no placement for (a configuration fault).
    first = messages_of(machine_report("robot2", {"J0": [1e-4]}), "other")[0]
    unknown_prefix = parse_message(first.topic, first.payload, ("other",), 1 << 20)
    with pytest.raises(KeyError):
        store.store_batch([*good, unknown_prefix])
    assert set(store.counts().values()) == {0}
    assert store.store_batch(good).stored == len(good)


def test_statuses_of_one_agent_in_one_batch_leave_the_newest_to_arrive(store: Store) -> None:
    # One statement upserts a batch's statuses, and an upsert may not touch a row twice.
    def status(state: str, at: str) -> Message:
        payload = json.dumps(
            {"schema": "jha.agent_status/1", "client_id": "edge1", "state": state, "at": at}
        ).encode()
        return parse_message(f"{PREFIX}/agent/edge1/status", payload, (PREFIX,), 1 << 20)

    batch = [status("online", "2026-11-27T08:00:00Z"), status("offline", "2026-11-27T09:00:00Z")]
    assert store.store_batch(batch) == BatchResult(2, 0)
    assert store.conn.execute("SELECT state FROM agent_status").fetchall() == [("offline",)]
    store.conn.commit()
    # A retained status delivered again replaces the stored one, as each did one by one.
    assert store.store_batch(batch[:1]).stored == 1
    state = store.conn.execute("SELECT state, at FROM agent_status").fetchall()
    store.conn.commit()
    assert state == [("online", datetime(2026, 11, 27, 8, tzinfo=UTC))]


def test_health_without_its_optional_fields_is_stored_with_them_empty(store: Store) -> None:
    # Every optional column of the batch empty: arrays of NULL only.
    messages = parsed("robot1", 2)
    bare = []
    for m in messages:
        if isinstance(m, HealthMessage):
            doc = json.loads(m.text)
            doc.update(forecast=None, recommendation=None, reason=None, history=[])
            doc["indicators"][0].update(value=None, unit=None)
            topic = f"{PREFIX}/robot1/{m.joint}/health"
            bare.append(parse_message(topic, json.dumps(doc).encode(), (PREFIX,), 1 << 20))
    assert all(isinstance(m, HealthMessage) and m.forecast is None for m in bare)
    assert store.store_batch(bare).stored == 2
    rows = store.conn.execute(
        "SELECT value, unit, next_limit, forecast_at, reason, recommendation, spark, indicators"
        " FROM joint_health ORDER BY joint"
    ).fetchall()
    store.conn.commit()
    assert (
        rows
        == [(None, None, None, None, None, None, None, ["backlash_rad", "amplitude_rad_s"])] * 2
    )


def _shifted(m: Message, seconds: float) -> Message:
    """The same message (same id) with its report time moved: a replay with another time."""
    doc = json.loads(m.text)
    key = "created_at" if isinstance(m, ReportMessage) else "report_created_at"
    doc[key] = (datetime.fromisoformat(doc[key]) + timedelta(seconds=seconds)).isoformat()
    topic = (
        f"{PREFIX}/{m.machine}/report"
        if isinstance(m, ReportMessage)
        else f"{PREFIX}/{m.machine}/{m.joint}/health"
    )
    return parse_message(topic, json.dumps(doc).encode(), (PREFIX,), 1 << 20)


def test_an_id_replayed_with_another_time_is_refused_not_stored_twice(store: Store) -> None:
    """Issue 31, point 3: since the monthly partitions the keys hold the time, and a replay of a
    report id with created_at one second earlier added a second row (/api/reports/<id> then
    returned either). Each id is claimed once: the replay is refused and counted."""
    messages = parsed("robot1", 2)
    assert store.store_batch(messages).stored == len(messages)
    replays = [_shifted(m, -1.0) for m in messages]
    result = store.store_batch(replays)
    assert result == BatchResult(0, len(messages), len(messages))
    counts = store.counts()
    assert counts["reports"] == 1 and counts["joint_health"] == 2
    report_id = next(m.report_id for m in messages if isinstance(m, ReportMessage))
    rows = store.conn.execute(
        "SELECT created_at FROM reports WHERE report_id = %s", (report_id,)
    ).fetchall()
    store.conn.commit()
    assert rows == [(next(m.created_at for m in messages if isinstance(m, ReportMessage)),)]
    # A plain redelivery is a duplicate, not a replay; inside one batch the first copy wins.
    assert store.store_batch(messages) == BatchResult(0, len(messages), 0)
    fresh = parsed("robot2", 1)
    both = store.store_batch(fresh + [_shifted(m, 3600.0) for m in fresh])
    assert (both.stored, both.replayed) == (len(fresh), len(fresh))
