"""The CAN driver's config for a socketcand peer, and the peers a test starts on it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.config.load import load_config
from agent.config.model import ControllerSettings
from tests.peers.can_harness import Peer, config_text, peer_args


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent.yaml"
    path.write_text(config_text("socketcand", "can0", 29536))
    return path


@pytest.fixture
def socketcand(config_file: Path) -> Iterator[Callable[..., tuple[Peer, ControllerSettings]]]:
    """Start a socketcand peer (with peer options); gives it and the controller config for it."""
    peers: list[Peer] = []

    def start(*extra: str) -> tuple[Peer, ControllerSettings]:
        peer = Peer("tests.peers.socketcand_peer", peer_args(config_file, *extra))
        peers.append(peer)
        port = peer.wait("listening")["port"]
        ctrl = load_config(config_file).controllers[0]
        return peer, dataclasses.replace(
            ctrl, settings=dataclasses.replace(ctrl.settings, port=port)
        )

    yield start
    for peer in peers:
        peer.stop()
