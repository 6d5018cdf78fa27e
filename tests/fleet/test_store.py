"""agent.fleet.store against a real PostgreSQL (monthly partitions included): a batch larger
than any the ingest makes is stored whole, a message repeated inside one batch is stored once,
the newest-health pointer follows the newest report whatever the rows' order, and a batch that
fails leaves nothing behind."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from agent.fleet.messages import HealthMessage, Message, ReportMessage, parse_message
from agent.fleet.store import Placement, Store, connect
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
