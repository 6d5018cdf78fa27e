"""The GRBL-protocol peer as a fixture: `peer(*options)` starts one on a pseudo-terminal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.drivers.grbl import Peer, grbl_peers


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Callable[..., Peer]]:
    yield from grbl_peers(tmp_path)
