"""A mosquitto broker per test (tests/peers/mosquitto_broker.py), stopped after it; and one
secure OPC UA health server (tests/support/publish/opcua_server.py) that the test_opcua_server_*.py
modules share: its first start builds asyncua's standard address space, seconds of CPU, so it
is started once for the package (test_mqtt_security.py has a `pki` of its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.publish.opcua_server.server import OpcUaHealthServer
from tests.peers.mosquitto_broker import MosquittoBroker
from tests.support.publish.opcua_server import (
    Pki,
    Started,
    make_pki,
    run,
    secure_settings,
    start_watching_the_loop,
)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    with MosquittoBroker(tmp_path / "broker") as b:
        yield b


@pytest.fixture(scope="package")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("health_pki"))


@pytest.fixture(scope="package")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One state directory for the package's OPC UA servers: the first one leaves asyncua's standard
    address space there as a shelf, and the others start from it in a fraction of the time."""
    return tmp_path_factory.mktemp("health_state")


@pytest.fixture(scope="package")
def started(pki: Pki, state: Path) -> Iterator[Started]:
    s = OpcUaHealthServer(secure_settings(pki), state)
    took, gap = run(start_watching_the_loop(s))
    yield Started(s, took, gap)
    run(s.close())


@pytest.fixture(scope="package")
def server(started: Started) -> OpcUaHealthServer:
    return started.server
