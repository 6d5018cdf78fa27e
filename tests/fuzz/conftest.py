"""Fixtures of the fuzz targets."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SHM = Path("/dev/shm")


@pytest.fixture
def shm_path() -> Iterator[Path]:
    """A private directory in memory (/dev/shm when the system has it): a target writes a file
    per case, thousands of them, and the disk is not what is under test."""
    path = Path(tempfile.mkdtemp(prefix="jha-fuzz-", dir=SHM if SHM.is_dir() else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)
