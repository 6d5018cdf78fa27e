"""The daemon as systemd runs it: a subprocess with a NOTIFY_SOCKET of the test's own.

It must say READY, ping the watchdog at half of WATCHDOG_USEC while cycles and analyses run,
report what it does in STATUS, refuse a broken config on SIGHUP (keeping the old one, saying why
with file:line), and on SIGTERM say STOPPING and exit 0 within 5 s, also in the middle of a
cycle, leaving no half-written file.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.history.store import HistoryStore
from agent.service.control_socket import request

JHA = Path(sys.executable).parent / "jha"
WATCHDOG_S = 1.0  # WATCHDOG_USEC = 1 s: a ping is due every 0.5 s
# Generous for a shared two-core machine: a ping must come within half the period of its due
# time, i.e. never later than the full watchdog timeout after the previous one.
MAX_GAP_S = WATCHDOG_S * 0.75
POINTS = [(0.0, 0.0), (1.07, 3.0e-4), (2.06, 7.0e-4), (2.86, 1.1e-3), (3.57, 1.5e-3)]


def config_doc(state: Path, **sim: Any) -> dict[str, Any]:
    joint = {
        "index": 1,
        "gear_ratio": 40,
        "backlash_cycle": {
            "motor_speed_rps": 100,
            "load_turns": 4,
            "sample_rate_hz": 500,
            "settle_s": 0.3,
        },
        "thresholds": {"backlash_watch_rad": 4.0e-4, "backlash_alert_rad": 8.0e-4},
        "calibration": {
            "source": "points",
            "points": [{"amplitude_rad_s": a, "backlash_rad": d} for a, d in POINTS],
        },
    }
    settings = {
        "seed": 5,
        "production_runs_s": 1.0,
        "stop_length_s": 3600.0,
        "time_scale": 1.0,
        **sim,
    }
    return {
        "agent": {"state_dir": str(state), "log_level": "info", "poll_s": 0.1},
        "controllers": [
            {
                "name": "robot",
                "driver": "sim",
                "settings": settings,
                "joints": [
                    {**joint, "name": "j1", "index": 1},
                    {**joint, "name": "j2", "index": 2},
                ],
            }
        ],
    }


# Linux's SO_TIMESTAMP (asm-generic/socket.h; the socket module does not name it): a struct
# timeval of two longs with every datagram, stamped when the sender wrote it.
SO_TIMESTAMP = 29


def sent_at(ancillary: list[tuple[int, int, bytes]]) -> float:
    """The kernel's SCM_TIMESTAMP of one datagram (wall clock, seconds)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMP:
            sec, usec = struct.unpack("qq", data[:16])
            return sec + usec * 1e-6
    raise AssertionError("a notification without its SO_TIMESTAMP")


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    config: Path
    stderr: Path
    messages: list[tuple[float, str]] = field(default_factory=list)

    def drain(self, timeout_s: float) -> None:
        """Read every notification that arrives within timeout_s, each stamped with the time the
        daemon sent it (SO_TIMESTAMP, set by the kernel at sendmsg): when this test process is
        scheduled late, two pings read together keep their own times, and the gaps judged are
        the daemon's, not this reader's."""
        end = time.monotonic() + timeout_s
        while (left := end - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(16))
            except TimeoutError:
                return
            sent = sent_at(ancillary)
            self.messages.extend((sent, line) for line in data.decode().splitlines())

    def wait_for(self, match: Callable[[str], bool], timeout_s: float, after: int = 0) -> int:
        """Index of the first message from `after` on that matches; fails after timeout_s."""
        end = time.monotonic() + timeout_s
        while True:
            for i in range(after, len(self.messages)):
                if match(self.messages[i][1]):
                    return i
            left = end - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                shown = [m for _, m in self.messages[after:] if m != "WATCHDOG=1"]
                pytest.fail(
                    f"no matching notification; got {shown[-15:]}\n"
                    f"{self.stderr.read_text()[-3000:]}"
                )
            self.drain(min(left, 0.2))

    def log(self) -> str:
        return self.stderr.read_text()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def _start(**sim: Any) -> Daemon:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
        sock_path = tmp_path / "notify.sock"
        sock.bind(str(sock_path))
        config = tmp_path / "agent.yaml"
        config.write_text(yaml.safe_dump(config_doc(tmp_path / "state", **sim), sort_keys=False))
        stderr = tmp_path / "stderr.log"
        env = {k: v for k, v in os.environ.items() if k not in ("RUNTIME_DIRECTORY",)}
        env.update(NOTIFY_SOCKET=str(sock_path), WATCHDOG_USEC=str(int(WATCHDOG_S * 1e6)))
        with stderr.open("wb") as err:
            proc = subprocess.Popen(
                [str(JHA), "run", "--config", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                start_new_session=True,  # its pool workers go with it if a test kills it
            )
        daemon = Daemon(proc, sock, config, stderr)
        started.append(daemon)
        return daemon

    yield _start
    for d in started:
        if d.proc.poll() is None:
            os.killpg(d.proc.pid, signal.SIGKILL)
            d.proc.wait()
        d.sock.close()


def _stop(daemon: Daemon) -> tuple[int, float, int]:
    """SIGTERM: (exit code, seconds to exit, index of STOPPING=1)."""
    mark = len(daemon.messages)
    sent = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    try:
        code = daemon.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(daemon.proc.pid, signal.SIGKILL)
        pytest.fail("the daemon did not exit within 10 s of SIGTERM")
    took = time.monotonic() - sent
    daemon.drain(0.2)
    stopping = daemon.wait_for(lambda m: m == "STOPPING=1", 1.0, after=mark)
    return code, took, stopping


def test_ready_watchdog_status_reload_rejected_and_stopping(
    start: Callable[..., Daemon], tmp_path: Path
) -> None:
    d = start()
    ready = d.wait_for(lambda m: m == "READY=1", 60)
    # Production runs 1 s, then the stop: both cycles (each ~1.3 s of motion) and their fits.
    first_cycle = d.wait_for(lambda m: m.startswith("STATUS=") and "cycle j1" in m, 30, ready)
    d.wait_for(lambda m: m.startswith("STATUS=") and "cycle j2" in m, 30, first_cycle)
    done = d.wait_for(
        lambda m: m.startswith("STATUS=") and "idle" in m and "analysing" not in m, 90, first_cycle
    )
    statuses = [m for _, m in d.messages[ready : done + 1] if m.startswith("STATUS=")]
    assert len(statuses) >= 4, statuses  # it said what it was doing at each step
    assert any("analysing" in s for s in statuses), statuses
    # the fits' progress is in STATUS= too (k of n fitted), and in the log
    assert any("fitted" in s for s in statuses), statuses
    assert "event=analysed" in d.log() and "done=2/2" in d.log()

    pings = [t for t, m in d.messages[ready : done + 1] if m == "WATCHDOG=1"]
    cycle_start = d.messages[first_cycle][0]
    busy = [t for t in pings if t >= cycle_start]
    assert len(busy) >= 3, "no watchdog pings while the cycles ran"
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert max(gaps) <= MAX_GAP_S, gaps
    assert sorted(gaps)[len(gaps) // 2] == pytest.approx(WATCHDOG_S / 2, abs=0.1)

    with HistoryStore(tmp_path / "state" / "history.sqlite") as store:
        assert sorted(c.outcome for c in store.cycles()) == ["ok", "ok"]

    # A broken config on SIGHUP: refused with file:line, the old one kept, READY again.
    good = d.config.read_text()
    d.config.write_text(good.replace("gear_ratio: 40", "gear_ratio: -40", 1))
    mark = len(d.messages)
    d.proc.send_signal(signal.SIGHUP)
    reloading = d.wait_for(lambda m: m == "RELOADING=1", 10, mark)
    d.wait_for(lambda m: m == "READY=1", 10, reloading)
    time.sleep(0.3)
    log = d.log()
    assert "event=reload_rejected" in log
    rejected = next(line for line in log.splitlines() if "event=reload_rejected" in line)
    assert f"{d.config}:" in rejected and "gear_ratio" in rejected
    assert d.proc.poll() is None
    status = request(tmp_path / "state" / "control.sock", {"cmd": "status"})
    assert status["ok"] and list(status["controllers"]) == ["robot"]

    code, took, _ = _stop(d)
    assert code == 0
    assert took < 5.0
    assert "Traceback" not in d.log()


def test_sigterm_mid_cycle_stops_the_motion_and_exits_cleanly(
    start: Callable[..., Daemon], tmp_path: Path
) -> None:
    d = start(time_scale=4.0)  # each cycle paced to ~5 s
    ready = d.wait_for(lambda m: m == "READY=1", 60)
    d.wait_for(lambda m: m.startswith("STATUS=") and "cycle j1" in m, 30, ready)
    time.sleep(0.5)
    code, took, _ = _stop(d)
    assert code == 0
    assert took < 5.0
    log = d.log()
    assert "event=cycle_abort" in log and "agent shutting down" in log
    state = tmp_path / "state"
    leftovers = [p for p in state.rglob("*") if p.is_file() and ".tmp" in p.name]
    assert leftovers == []
    assert not list((state / "captures").rglob("*.npz")) if (state / "captures").exists() else True
    assert not (state / "control.sock").exists()
    if (state / "history.sqlite").exists():
        with HistoryStore(state / "history.sqlite") as store:
            assert [c.outcome for c in store.cycles()] in ([], ["aborted"])
    assert json.dumps(log.count("event=stopped")) == "1"


def test_sigterm_while_analyses_run_exits_within_5_s(start: Callable[..., Daemon]) -> None:
    d = start(time_scale=0.0)  # instant cycles: the fits are what is running
    ready = d.wait_for(lambda m: m == "READY=1", 60)
    d.wait_for(lambda m: m.startswith("STATUS=") and "analysing" in m, 30, ready)
    code, took, _ = _stop(d)
    assert code == 0
    assert took < 5.0
