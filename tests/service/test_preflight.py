"""Before a stop's cycles move anything, the agent must be able to record them; `jha run --once`
says with its exit code what became of the stop (agent.service.exit_codes)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.service.exit_codes import EX_CANTCREAT, EX_NOPERM, EX_OK
from agent.service.preflight import FREE_FDS_NEEDED, preflight
from tests.support.service.faults import config, cycle_count

ROOT = Path(__file__).resolve().parents[2]
STOPS = [{"at_s": 0.2, "length_s": 30.0}]


def test_a_ready_state_directory_passes(tmp_path: Path) -> None:
    check = preflight(tmp_path / "state", 10_000_000, 2, 1_000_000)
    assert check.ok and check.free_bytes is not None and check.free_bytes > check.needed_bytes
    assert not any(p.name.startswith(".preflight") for p in (tmp_path / "state").iterdir())


def test_too_little_room_for_the_stop_and_the_reserve_is_refused(tmp_path: Path) -> None:
    check = preflight(tmp_path, 0, 1, reserve_bytes=10**18)
    assert not check.ok and "MB free, the stop needs" in check.describe()
    assert "disk_reserve_mb" in check.describe()


def test_a_damaged_history_is_refused(tmp_path: Path) -> None:
    (tmp_path / "history.sqlite").write_bytes(b"SQLite format 3\0" + os.urandom(4096))
    check = preflight(tmp_path, 0, 1, 0)
    assert not check.ok
    assert "history" in check.describe() and str(tmp_path / "history.sqlite") in check.describe()


def test_no_file_descriptors_to_spare_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    used = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(
        resource, "getrlimit", lambda _: (used + FREE_FDS_NEEDED // 2, resource.RLIM_INFINITY)
    )
    check = preflight(tmp_path, 0, 1, 0)
    assert not check.ok and "file descriptors left" in check.describe()


def _once(cfg: Path, tmp_path: Path) -> tuple[int, str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "run",
            "--config",
            str(cfg),
            "--once",
            "--wait-for-stop",
            "20",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_once_on_a_full_disk_moves_nothing_and_exits_73(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(state)], check=True
    )
    try:
        filler = state / "filler"
        with filler.open("wb") as f:  # leave 64 kB: less than the stop's captures and reports
            f.write(b"\0" * (2 * 1024 * 1024 - 64 * 1024))
        code, out = _once(config(tmp_path / "agent.yaml", state, STOPS), tmp_path)
        recorded = cycle_count(state)
        moved = out.count("event=captured") + out.count("event=capture_not_saved")
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)
    assert code == EX_CANTCREAT, out[-3000:]
    assert "event=preflight_failed" in out and "MB free, the stop needs" in out
    assert moved == 0 and recorded == 0


def test_once_exits_77_when_an_interlock_refuses_the_cycles(tmp_path: Path) -> None:
    cfg = config(tmp_path / "agent.yaml", tmp_path / "state", STOPS)
    doc = yaml.safe_load(cfg.read_text())
    doc["controllers"][0]["settings"]["permission"] = False
    cfg.write_text(yaml.safe_dump(doc))
    code, out = _once(cfg, tmp_path)
    assert code == EX_NOPERM, out[-3000:]
    assert "permission signal is off" in out


def test_once_exits_0_when_every_cycle_was_recorded(tmp_path: Path) -> None:
    state = tmp_path / "state"
    code, out = _once(config(tmp_path / "agent.yaml", state, STOPS), tmp_path)
    assert code == EX_OK, out[-3000:]
    assert cycle_count(state) == 2
