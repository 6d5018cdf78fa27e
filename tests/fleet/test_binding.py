"""One agent, one machine, in the fleet itself (agent.fleet.binding; issue 31, point 1): with
`sources[].agents`, a report, health or retained status from another agent than the machine's
is refused and counted, whatever the broker let through; `jha fleet check` and `jha config
check` warn where nothing binds agents or a client logs in with no credential of its own."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from agent.cli.main import main
from agent.fleet.binding import Bindings
from agent.fleet.messages import parse_message
from agent.fleet.settings import AgentBinding, SourceSettings, fleet_issues
from agent.publish.mqtt.payloads import report_messages, status_payload, status_topic
from tests.fleet.agents import RawPublisher, machine_report
from tests.fleet.conftest import write_fleet_config
from tests.fleet.running import base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until
from tests.support.summary import security

BOUND = textwrap.dedent("""\
    sources:
      - topic_prefix: jha
        site: plant-a
        line: line-1
        agents:
          - client_id: edge-a
            machines: [robot-1, robot-2]
          - client_id: edge-b
            machines: [press-1]
      - topic_prefix: site-b/jha
        site: plant-b
        line: line-7
    """)


def _count(conninfo: str, sql: str) -> int:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def _messages(machine: str, client_id: str | None, prefix: str = "jha") -> list[tuple[str, bytes]]:
    report = machine_report(machine, {"J1": [1e-4, 1.1e-4]})
    now = datetime.now(UTC).isoformat()
    return [(m.topic, m.payload) for m in report_messages(report, prefix, now, client_id)]


def _problems(messages: list[tuple[str, bytes]]) -> list[str | None]:
    sources = (
        SourceSettings(
            "jha",
            "plant-a",
            "line-1",
            (AgentBinding("edge-a", ("robot-1", "robot-2")), AgentBinding("edge-b", ("press-1",))),
        ),
        SourceSettings("site-b/jha", "plant-b", "line-7"),
    )
    bindings = Bindings.of(sources)
    prefixes = tuple(s.topic_prefix for s in sources)
    return [bindings.problem(parse_message(t, p, prefixes, 1 << 20)) for t, p in messages]


def test_each_message_must_come_from_its_machines_agent() -> None:
    assert set(_problems(_messages("robot-2", "edge-a"))) == {None}
    forged = _problems(_messages("robot-2", "edge-b"))
    assert forged and all(
        p == "agent binding: machine 'robot-2' is bound to agent 'edge-a', found 'edge-b'"
        for p in forged
    )
    unnamed = _problems(_messages("press-1", None))
    assert all(p is not None and "found no agent_client_id" in p for p in unnamed)
    unbound = _problems(_messages("robot-9", "edge-a"))
    assert all(p is not None and "'robot-9' is bound to no agent of jha" in p for p in unbound)
    # A prefix without agents binds nothing.
    assert set(_problems(_messages("robot-2", "edge-b", "site-b/jha"))) == {None}
    status = [
        (status_topic("jha", c), status_payload(c, False, None, "x")) for c in ("edge-b", "x")
    ]
    assert _problems(status) == [None, "agent binding: a status of 'x', an agent not bound to jha"]


def test_a_machine_bound_twice_is_a_config_error(tmp_path: Path, database: str) -> None:
    twice = BOUND.replace("machines: [press-1]", "machines: [press-1, robot-2]")
    files = write_fleet_config(tmp_path, 1883, database, sources=twice)
    _, issues = fleet_issues(files.config)
    line = files.config.read_text().splitlines().index("        machines: [press-1, robot-2]") + 1
    assert [(i.line, i.path) for i in issues] == [(line, "sources[0].agents[1].machines[1]")]
    assert "bound to one agent, found 'robot-2' again (agents[0])" in issues[0].message


def test_the_fleet_refuses_and_counts_what_another_agent_says_of_a_machine(
    broker: MosquittoBroker, database: str, tmp_path: Path
) -> None:
    files = write_fleet_config(tmp_path / "fleet", broker.port, database, sources=BOUND)
    forged_report = _messages("robot-1", "edge-b")  # edge-b names itself, honestly
    forged_status = (status_topic("jha", "intruder"), status_payload("intruder", True, None, "x"))
    genuine = _messages("robot-1", "edge-a")
    sender = RawPublisher(broker.port, client_id="edge-b")
    try:
        with running_fleet(files.config) as fleet:
            for topic, payload in forged_report:
                sender.send(topic, payload)
            sender.send(*forged_status, retain=True)
            wait_until(
                lambda: fleet.ingest.stats().rejected == len(forged_report) + 1, 30, "refusals"
            )
            for topic, payload in genuine:
                sender.send(topic, payload)
            wait_until(lambda: fleet.ingest.stats().stored == len(genuine), 30, "the genuine")
            stats = fleet.ingest.stats()
            plan = get(base_url(fleet), "/api/plan").json()["joints"]
    finally:
        sender.send(forged_status[0], b"", retain=True)  # leave no retained message behind
        sender.close()
    refused = stats.rejected_by_reason == {"agent binding": len(forged_report) + 1}
    security("fleet: another agent's report and a stranger's status refused", refused)
    assert refused, stats.rejected_by_reason
    assert _count(database, "SELECT count(*) FROM reports") == 1
    assert [p["machine"] for p in plan] == ["robot-1"]
    assert _count(database, "SELECT count(*) FROM agent_status WHERE client_id = 'intruder'") == 0


def _fleet_check(config: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["fleet", "check", "--config", str(config)]) == 0
    return [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]


def test_fleet_check_warns_of_unbound_sources_and_a_fleet_without_credential(
    tmp_path: Path, database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    loose = write_fleet_config(tmp_path / "loose", 1883, database)
    warned = _fleet_check(loose.config, capsys)
    assert any("broker: warning: the fleet has no credential of its own" in w for w in warned)
    assert any("sources[0]: warning: no agents bound to jha" in w for w in warned)
    assert any("sources[1]: warning: no agents bound to site-b/jha" in w for w in warned)
    bound = BOUND.replace(
        "line: line-7\n", "line: line-7\n    agents: [{client_id: c, machines: [m]}]\n"
    )
    tight = write_fleet_config(
        tmp_path / "tight", 1883, database, sources=bound, credentials=("jha-fleet", "pw")
    )
    assert _fleet_check(tight.config, capsys) == []


def test_config_check_warns_of_an_agent_without_credential(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        textwrap.dedent("""\
        controllers:
          - name: cell
            driver: sim
            joints:
              - name: j1
                index: 1
                gear_ratio: 40
                backlash_cycle: {motor_speed_rps: 100, load_turns: 2, sample_rate_hz: 500}
                calibration: {source: none}
        publish:
          mqtt:
            host: broker.plant.example
            client_id: edge-a
        """)
    )
    assert main(["config", "check", str(path)]) == 0
    err = capsys.readouterr().err
    assert "publish.mqtt: warning: this agent has no credential of its own at the broker" in err
