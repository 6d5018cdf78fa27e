"""Real peers of the fleet tests: one throwaway PostgreSQL cluster for the package (a fresh
database per test), a mosquitto broker per test, the fleet's settings file for both, and a
`plant`: a running fleet fed three machines' messages (hostile names, a stale machine)."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from agent.report.model import Report
from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.peers.mosquitto_broker import MosquittoBroker, wait_until
from tests.peers.postgres import PostgresCluster

TOKEN = "s3cret-fleet-token"
_numbers = itertools.count()


@pytest.fixture(scope="package")
def cluster() -> Iterator[PostgresCluster]:
    with PostgresCluster(dbname="postgres_setup") as pg:
        yield pg


@pytest.fixture
def database(cluster: PostgresCluster) -> str:
    """The conninfo of a new, empty database."""
    name = f"fleet_{next(_numbers)}"
    setup = cluster.conninfo.replace(f"dbname={cluster.dbname}", "dbname=postgres")
    with psycopg.connect(setup, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return cluster.conninfo.replace(f"dbname={cluster.dbname}", f"dbname={name}")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    with MosquittoBroker(tmp_path / "broker", persistence=True) as b:
        yield b


def row_count(conninfo: str, table: str, *, restarting_is: int | None = None) -> int:
    """Rows in `table`; `restarting_is` is returned instead while the database refuses
    connections (a test restarting it), else that error is raised."""
    try:
        with psycopg.connect(conninfo, connect_timeout=2) as conn:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            return 0 if row is None else int(row[0])
    except psycopg.OperationalError:
        if restarting_is is None:
            raise
        return restarting_is


@dataclass(frozen=True)
class FleetFiles:
    config: Path
    token_file: Path


def write_fleet_config(
    directory: Path,
    broker_port: int,
    conninfo: str,
    *,
    http_port: int = 0,
    stale_after_s: float = 86400.0,
    client_id: str = "jha-fleet-test",
    sources: str = "",
    read_conninfo: str | None = None,
    credentials: tuple[str, str] | None = None,
    http_settings: str = "",
) -> FleetFiles:
    directory.mkdir(parents=True, exist_ok=True)
    token = directory / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    sources = sources or textwrap.dedent("""\
        sources:
          - topic_prefix: jha
            site: plant-a
            line: line-1
          - topic_prefix: site-b/jha
            site: plant-b
            line: line-7
        """)
    # The plan read from a replica (database.read_conninfo), the ingest still on conninfo.
    replica = "" if read_conninfo is None else f'  read_conninfo: "{read_conninfo}"\n'
    config = directory / "fleet.yaml"
    config.write_text(
        textwrap.dedent(f"""\
        broker:
          host: 127.0.0.1
          port: {broker_port}
          tls: false
          client_id: {client_id}
          reconnect_min_s: 0.05
          reconnect_max_s: 0.5
        """)
        + _broker_login(directory, credentials)
        + sources
        + textwrap.dedent(f"""\
        database:
          conninfo: "{conninfo}"
        """)
        + replica
        + textwrap.dedent(f"""\
        http:
          host: 127.0.0.1
          port: {http_port}
          token_file: {token}
        """)
        + "".join(f"  {line}\n" for line in http_settings.splitlines())
        + f"stale_after_s: {stale_after_s}\n"
    )
    return FleetFiles(config, token)


def _broker_login(directory: Path, credentials: tuple[str, str] | None) -> str:
    if credentials is None:
        return ""
    secret = directory / "broker-password"
    secret.write_text(credentials[1] + "\n")
    secret.chmod(0o600)
    return f"  username: {credentials[0]}\n  password_file: {secret}\n"


@pytest.fixture
def fleet_files(tmp_path: Path, broker: MosquittoBroker, database: str) -> FleetFiles:
    return write_fleet_config(tmp_path / "fleet", broker.port, database)


HOSTILE_MACHINE = "<img src=x onerror=alert(1)>"
HOSTILE_JOINT = "\"><script>alert('j')</script>"


@dataclass(frozen=True)
class Plant:
    base: str
    reports: dict[str, Report]


@pytest.fixture
def plant(broker: MosquittoBroker, fleet_files: FleetFiles) -> Iterator[Plant]:
    now = datetime.now(UTC)
    reports = {
        "press1": machine_report(
            "press1",
            {
                "J1": [2.1e-3, 2.3e-3, 2.5e-3],  # alert
                "J2": [1.0e-3, 1.3e-3, 1.6e-3],  # watch, the alert limit in about a day
                "J3": [3e-4, 3e-4, 3e-4],  # ok
            },
        ),
        "hostile": machine_report(HOSTILE_MACHINE, {HOSTILE_JOINT: [1.0e-3, 1.05e-3, 1.1e-3]}),
        "old": machine_report("old-robot", {"J1": [2e-4, 2e-4, 2e-4]}, end=now - timedelta(days=3)),
    }
    prefixes = {"press1": "jha", "hostile": "site-b/jha", "old": "site-b/jha"}
    from tests.fleet.running import base_url, running_fleet  # it imports TOKEN from here

    sender = RawPublisher(broker.port)
    try:
        with running_fleet(fleet_files.config) as fleet:
            total = 0
            for key, report in reports.items():
                messages = messages_of(report, prefixes[key])
                total += len(messages)
                sender.send_messages(messages)
            wait_until(lambda: fleet.ingest.stats().stored == total, 30, "every message")
            yield Plant(base_url(fleet), reports)
    finally:
        sender.close()
