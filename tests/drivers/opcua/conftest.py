"""The OPC UA peer controller's config, and one peer process shared by a module's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.peers.opcua.harness import PeerProcess, config_text
from tests.support.drivers.opcua import start_peer


@pytest.fixture
def peer_config(tmp_path: Path) -> Path:
    path = tmp_path / "peer.yaml"
    path.write_text(config_text())
    return path


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, PeerProcess]]:
    """One peer for the tests that leave it as they found it (faults act once)."""
    directory = tmp_path_factory.mktemp("opcua_shared")
    config = directory / "peer.yaml"
    config.write_text(config_text())
    # 10x real time: a cycle takes half a second, so a stop sent on a fault in chunk 2 reaches
    # the controller while it still moves, even on a loaded machine.
    p = start_peer(config, directory, "--speedup", "10")
    yield config, p
    p.stop()
