"""Fuzz the MQTT outbox the agent reads back on restart (agent/publish/mqtt/outbox.py).

Near-valid input is a real outbox file written by Outbox.put (report and health messages),
then damaged the ways a disk or an older / newer agent could: a column holding a value of
another type (SQLite keeps whatever it is given), an unknown kind, a dropped table, a changed
user_version, or bytes flipped and cut in the file itself. Property: Outbox() and pending()
either give QueuedMessages whose OutMessage fields have their declared types (the sender hands
them to paho as they are), or raise OutboxError naming the file; never another exception.

Files live on /dev/shm when there is one: the outbox commits with synchronous=FULL, and the
fsyncs, not the code under test, would otherwise take most of the budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.publish.mqtt.outbox import OutboxError
from tests.fuzz.cases.outbox import REGRESSIONS, damaged_outboxes, names_file, outbox_case
from tests.fuzz.harness import Oracle, fuzz


@pytest.mark.parametrize(
    "case",
    REGRESSIONS,
    ids=("payload-text", "kind-bogus", "schema-name-not-utf8"),
)
def test_outbox_damaged_row_regression(case: tuple[str, Any], shm_path: Path) -> None:
    oracle = Oracle("outbox regressions", expected=(OutboxError,), place=names_file)
    oracle.call(outbox_case, case, oracle, shm_path)


def test_fuzz_outbox_restart(shm_path: Path) -> None:
    oracle = Oracle("MQTT outbox records", expected=(OutboxError,), place=names_file)
    fuzz(oracle, damaged_outboxes(), lambda case: outbox_case(case, oracle, shm_path))
