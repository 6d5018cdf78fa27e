"""The capture-file tests (test_files_*.py) run in their own temporary directory: they ask for
it with `pytestmark = pytest.mark.usefixtures("_in_tmp")`."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Relative paths, so error messages read exactly "cap.csv:57: ...".
    monkeypatch.chdir(tmp_path)
