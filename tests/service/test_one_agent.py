"""One agent per state directory (agent.service.instance_lock): a second `jha run` on the same
config exits 75 naming the first's pid and leaves its control socket alone; the lock goes with
its holder, kill -9 included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.errors import EX_TEMPFAIL
from agent.service.instance_lock import AlreadyRunning, hold_state_dir
from tests.support.paths import ROOT
from tests.support.service.faults import config, kill9, start, terminate, wait_for
from tests.support.summary import security


def _second(config_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--config", str(config_path), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def _status(config_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "status", "--config", str(config_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_a_second_daemon_on_the_same_state_directory_exits_75_and_touches_nothing(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    # Production never stops: the first daemon idles, holding the directory.
    path = config(tmp_path / "agent.yaml", state, stops=[{"at_s": 3600.0, "length_s": 1.0}])
    first = start(path, tmp_path / "first.log")
    try:
        sock = state / "control.sock"
        wait_for(sock.exists, 30.0, "the first daemon's control socket", first)
        inode = sock.stat().st_ino
        for args in ((), ("--once", "--wait-for-stop", "1")):
            second = _second(path, *args)
            assert second.returncode == EX_TEMPFAIL, second.stderr
            assert f"another agent (pid {first.pid})" in second.stderr, second.stderr
            assert "one agent per state directory" in second.stderr
        # The first one's socket is the same file and still answers.
        answer = _status(path)
        untouched = sock.stat().st_ino == inode and answer.returncode == 0
        security("a second daemon on one state directory leaves the first's socket", untouched)
        assert sock.stat().st_ino == inode
        assert answer.returncode == 0, answer.stderr
        assert first.poll() is None
    finally:
        assert terminate(first) == 0
    # Stopped: the next one starts.
    again = start(path, tmp_path / "again.log")
    try:
        wait_for(lambda: _status(path).returncode == 0, 30.0, "the next daemon", again)
    finally:
        kill9(again)
    # Killed without a word: the kernel dropped its lock, nobody has to clear it.
    lock = hold_state_dir(state)
    try:
        assert (state / "agent.lock").read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()


def test_the_lock_names_its_holder_and_is_taken_once(tmp_path: Path) -> None:
    held = hold_state_dir(tmp_path)
    try:
        with pytest.raises(AlreadyRunning, match=rf"another agent \(pid {os.getpid()}\)") as info:
            hold_state_dir(tmp_path)
        assert info.value.exit_code == EX_TEMPFAIL
    finally:
        held.release()
    again = hold_state_dir(tmp_path)  # free again once released
    try:
        assert (tmp_path / "agent.lock").read_text() == f"{os.getpid()}\n"
    finally:
        again.release()
