"""A mosquitto broker per test (tests/peers/mosquitto_broker.py), stopped after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.peers.mosquitto_broker import MosquittoBroker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoBroker]:
    with MosquittoBroker(tmp_path / "broker") as b:
        yield b
