"""Scaling out: two `jha fleet` processes' worth of ingest (two services, two client ids, one
MQTT 5 shared subscription group, one database) split the agents' messages between them; every
report is stored once."""

from __future__ import annotations

import contextlib
from pathlib import Path

from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.fleet.conftest import row_count, write_fleet_config
from tests.fleet.running import running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until


def test_two_services_in_one_shared_group_split_the_ingest(
    broker: MosquittoBroker, database: str, tmp_path: Path
) -> None:
    configs = []
    for n in (1, 2):
        files = write_fleet_config(
            tmp_path / f"fleet{n}", broker.port, database, client_id=f"fleet-{n}"
        )
        text = files.config.read_text().replace(
            f"client_id: fleet-{n}\n", f"client_id: fleet-{n}\n  shared_group: plant\n"
        )
        files.config.write_text(text)
        configs.append(files.config)
    reports = [machine_report(f"m{i % 7}", {"J1": [1e-4, 1e-4 + 1e-6 * i]}) for i in range(120)]
    sender = RawPublisher(broker.port)
    try:
        with contextlib.ExitStack() as stack:
            fleets = [stack.enter_context(running_fleet(c)) for c in configs]
            for r in reports:
                sender.send_messages(messages_of(r))
            wait_until(lambda: row_count(database, "reports") == len(reports), 60, "every report")
            wait_until(
                lambda: row_count(database, "joint_health") == len(reports), 60, "all health"
            )
            received = [f.ingest.stats().received for f in fleets]
            duplicates = [f.ingest.stats().duplicates for f in fleets]
    finally:
        sender.close()
    assert sum(received) == 2 * len(reports)  # each message to one of them
    assert all(n > 0 for n in received), received
    assert duplicates == [0, 0]
