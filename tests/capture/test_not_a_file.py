"""A FIFO (or a directory) named like a capture is refused at once, never opened: opened, a FIFO
blocks its reader forever (`jha analyze`, and the daemon's recovery of captures/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.capture.files import load_capture
from agent.errors import CaptureError
from agent.service.recovery import find_orphans
from tests.support.paths import ROOT


@pytest.mark.parametrize("name", ["c.npz", "c.csv"])
def test_a_fifo_is_refused_without_being_opened(tmp_path: Path, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    with pytest.raises(CaptureError, match="expected a capture file, found a FIFO"):
        load_capture(fifo)
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(CaptureError, match="found a directory"):
        load_capture(tmp_path / "d.npz")


def test_the_cli_names_the_fifo_and_exits_65(tmp_path: Path) -> None:
    fifo = tmp_path / "c.npz"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "analyze", "backlash", str(fifo)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 65, proc.stderr
    assert f"{fifo}: expected a capture file, found a FIFO" in proc.stderr


def test_a_fifo_among_the_captures_is_moved_aside_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "captures" / "robot" / "j1"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "20261202T000000Z.npz")
    assert find_orphans(tmp_path) == []
    assert (tmp_path / "quarantine" / "robot" / "j1" / "20261202T000000Z.npz").exists()
    assert not (folder / "20261202T000000Z.npz").exists()
