"""A bench per test: the board's config and link; every board started on it is closed after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.drivers.serial_board import Bench


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    for p in b.peers:
        p.close()
