"""The staged install the systemd tests inspect: the tree `make install DESTDIR=...` builds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.service.install import staged_install
from tests.support.service.systemd_sandbox import NEEDS_ROOT


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tree `make install DESTDIR=...` builds (built once per session, shared with
    tests/service/systemd/test_install.py)."""
    assert os.geteuid() == 0, NEEDS_ROOT
    return staged_install(tmp_path_factory)[0]
