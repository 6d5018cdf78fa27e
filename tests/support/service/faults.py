"""Fault injection of the daemon run as `jha run` in a subprocess.

Shared here: the config of a paced simulated controller, starting and stopping the daemon, and
an audit of a state directory after a fault (history, captures, reports). Used by
tests/faults/ (test_broker_flap.py adds a flapping broker; the publisher's own MQTT faults, kill -9
included, are in tests/publish/test_mqtt.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.capture.files import load_capture
from agent.report.index import report_dirs
from tests.support.paths import ROOT

# 200 motor rev/s through 40:1 is 0.2 s per load turn: 0.1 s settle + 2 turns = 0.5 s a cycle
# with time_scale 1, so a kill in the first seconds lands in cycles, saves and report writes.
CYCLE = {"motor_speed_rps": 200, "load_turns": 2, "sample_rate_hz": 500, "settle_s": 0.1}


def config(
    path: Path,
    state_dir: Path,
    stops: list[dict[str, float]],
    joints: int = 2,
    publish: dict[str, Any] | None = None,
    disk_reserve_mb: float = 0.0,
    motion_log: Path | None = None,
) -> Path:
    """A config of one paced sim controller with `joints` joints, no calibration; `publish`
    is the config's publish section (none by default). No disk reserve by default: the fault
    tests put the state directory on tiny file systems. `motion_log`: the sim's record of its
    motions (drivers.sim.motion_log)."""
    doc: dict[str, Any] = {
        "agent": {
            "state_dir": str(state_dir),
            "log_level": "info",
            "poll_s": 0.05,
            "disk_reserve_mb": disk_reserve_mb,
        },
        "controllers": [
            {
                "name": "robot",
                "driver": "sim",
                "settings": {
                    "seed": 1,
                    "time_scale": 1.0,
                    "stops": stops,
                    **({} if motion_log is None else {"motion_log": str(motion_log)}),
                },
                "triggers": {"cycle_margin_s": 0.1},
                # An aborted cycle leaves the bench joint up to ~15 rad off its test pose (it
                # runs at 31 rad/s): back at 30 rad/s it is ready again within one stop.
                "interlocks": {"return_speed_rad_s": 30.0},
                "joints": [
                    {
                        "name": f"j{i}",
                        "index": i,
                        "gear_ratio": 40,
                        "backlash_cycle": dict(CYCLE),
                        "calibration": {"source": "none"},
                    }
                    for i in range(1, joints + 1)
                ],
            }
        ],
    }
    if publish is not None:
        doc["publish"] = publish
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def start(
    config_path: Path,
    log_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    nofile: int | None = None,
) -> subprocess.Popen[bytes]:
    """`jha run --config` in its own process group (so its pool workers can be reaped too);
    `env` is added to the environment; `nofile` is its descriptor limit (soft and hard), as
    systemd's LimitNOFILE= sets it."""

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    log = log_path.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "run", "--config", str(config_path), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
            env=None if env is None else {**os.environ, **env},
            preexec_fn=None if nofile is None else limit,
        )
    finally:
        log.close()  # the child holds its own copy


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the daemon, then whatever it left in its group (pool workers), and reap it."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def terminate(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> int:
    """SIGTERM as systemd stops the service; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            kill9(proc)


@dataclass
class Audit:
    """What a state directory holds after a fault, and what is wrong with it."""

    cycles: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # id -> row
    reports: int = 0
    captures: int = 0
    orphan_captures: int = 0  # saved, then killed before the history named them
    stale_tmp: list[Path] = field(default_factory=list)  # atomic writes cut short
    orphan_reports: int = 0  # written, then killed before the history pointed to them
    problems: list[str] = field(default_factory=list)


def _db_rows(db: Path, audit: Audit) -> tuple[set[str], set[str]]:
    """Integrity of the history; fills audit.cycles; the capture and report paths it names."""
    conn = sqlite3.connect(db, timeout=10)
    try:
        (check,) = conn.execute("PRAGMA integrity_check").fetchone()
        if check != "ok":
            audit.problems.append(f"{db}: integrity_check says {check}")
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        if fk:
            audit.problems.append(f"{db}: foreign_key_check lists {fk}")
        rows = conn.execute(
            "SELECT id, controller, joint, kind, started_at, outcome, capture_path FROM cycles"
        ).fetchall()
        audit.cycles = {int(r[0]): tuple(r) for r in rows}
        named = {str(r[6]) for r in rows if r[6] is not None}
        report_paths = {
            str(p) for (p,) in conn.execute("SELECT path FROM reports") if p is not None
        }
        audit.reports = len(report_paths)
        return named, report_paths
    finally:
        conn.close()


def audit(state: Path) -> Audit:
    """Check every invariant a fault must not break; problems are collected, not raised."""
    out = Audit()
    db = state / "history.sqlite"
    named: set[str] = set()
    report_paths: set[str] = set()
    if db.exists():
        named, report_paths = _db_rows(db, out)
    for path in sorted(named):
        if not Path(path).exists():
            out.problems.append(f"cycle capture_path {path} does not exist")
    out.stale_tmp = sorted(p for p in state.rglob(".*.tmp"))
    for tmp in out.stale_tmp:
        if str(tmp) in named:
            out.problems.append(f"the history names the temporary file {tmp}")
    for npz in sorted(state.glob("captures/**/*.npz")):
        if npz.name.startswith("."):
            continue
        out.captures += 1
        out.orphan_captures += str(npz) not in named
        try:
            load_capture(npz)  # validates: >= 2 samples, finite, time strictly increasing
        except Exception as exc:  # any failure to load is a torn capture
            out.problems.append(f"{npz}: does not load: {type(exc).__name__}: {exc}")
    # reports/latest is a link to one of them, not a report of its own (agent.report.index)
    kept = sorted(d for d in report_dirs(state / "reports")) if (state / "reports").is_dir() else []
    for report_json in [d / "report.json" for d in kept if (d / "report.json").exists()]:
        try:
            json.loads(report_json.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            out.problems.append(f"{report_json}: not JSON: {exc}")
        html = report_json.with_name("report.html")
        if str(report_json) not in report_paths:
            out.orphan_reports += 1
        elif not html.exists():
            out.problems.append(f"{html}: missing, though the history names its report")
    for html in [d / "report.html" for d in kept if (d / "report.html").exists()]:
        if not html.read_text(errors="replace").rstrip().endswith("</html>"):
            out.problems.append(f"{html}: incomplete (does not end with </html>)")
    return out


def lost(before: dict[int, tuple[Any, ...]], after: Audit) -> int:
    """Rows recorded before the fault that are gone or changed after it, plus torn files."""
    gone = sum(1 for i, row in before.items() if after.cycles.get(i) != row)
    return gone + len(after.problems)


def wait_for(check: Any, timeout_s: float, what: str, proc: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited ({proc.returncode}) waiting for {what}")
        time.sleep(0.05)


def cycle_count(state: Path) -> int:
    """Cycles recorded so far, read while the daemon runs (WAL: readers do not block it)."""
    db = state / "history.sqlite"
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("SELECT count(*) FROM cycles").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0  # the schema is being created
