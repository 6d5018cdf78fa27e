"""The service daemon: idle memory and watchdog punctuality while analyses run.

1. RSS of an idle `jha run` with two simulated controllers and no production stop, read from
   /proc after READY (pool workers included if any are alive): target <= 120 MB.
2. The worst lateness of a WATCHDOG=1 ping while both controllers' cycles are analysed, the
   daemon under a NOTIFY_SOCKET of the bench's own with WATCHDOG_USEC set: a ping is due every
   half period; target: never later than half the period (so systemd never fires).
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

JHA = Path(sys.executable).parent / "jha"
RSS_TARGET_MB = 120.0
WATCHDOG_USEC = 1_000_000
POINTS = [(0.0, 0.0), (1.07, 3.0e-4), (2.06, 7.0e-4), (2.86, 1.1e-3), (3.57, 1.5e-3)]


def _controller(name: str, joints: int, **sim: Any) -> dict[str, Any]:
    joint = {
        "gear_ratio": 40,
        "backlash_cycle": {"motor_speed_rps": 100, "load_turns": 12, "sample_rate_hz": 500},
        "thresholds": {"backlash_watch_rad": 4.0e-4, "backlash_alert_rad": 8.0e-4},
        "calibration": {
            "source": "points",
            "points": [{"amplitude_rad_s": a, "backlash_rad": d} for a, d in POINTS],
        },
    }
    return {
        "name": name,
        "driver": "sim",
        "settings": {
            "seed": 7,
            **sim,
            "joints": {f"axis{i}": {"backlash_rad": 1e-4 * i} for i in range(1, joints + 1)},
        },
        "joints": [{**joint, "name": f"axis{i}", "index": i} for i in range(1, joints + 1)],
    }


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


class _Daemon:
    def __init__(self, directory: Path, controllers: list[dict[str, Any]]) -> None:
        self.config = directory / "agent.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "agent": {"state_dir": str(directory / "state"), "log_level": "info"},
                    "controllers": controllers,
                },
                sort_keys=False,
            )
        )
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock_path = directory / "notify.sock"
        self.sock.bind(str(sock_path))
        env = dict(os.environ, NOTIFY_SOCKET=str(sock_path), WATCHDOG_USEC=str(WATCHDOG_USEC))
        env.pop("RUNTIME_DIRECTORY", None)
        self.stderr = directory / "stderr.log"
        with self.stderr.open("wb") as err:
            self.proc = subprocess.Popen(
                [str(JHA), "run", "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
            )
        self.messages: list[tuple[float, str]] = []

    def drain(self, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while (left := end - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                return
            now = time.monotonic()
            self.messages += [(now, m) for m in data.decode().splitlines()]

    def wait_for(self, text: str, timeout_s: float) -> float:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for t, m in self.messages:
                if text in m:
                    return t
            if self.proc.poll() is not None:
                break
            self.drain(0.2)
        raise RuntimeError(
            f"no {text!r} from the daemon; stderr:\n{self.stderr.read_text()[-2000:]}"
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()


def idle_rss(settle_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = _Daemon(
            Path(tmp),
            [
                _controller("robot1", 6, production_runs_s=1e6),
                _controller("robot2", 6, production_runs_s=1e6),
            ],
        )
        try:
            d.wait_for("READY=1", 60)
            d.drain(settle_s)
            pids = [d.proc.pid, *_descendants(d.proc.pid)]
            total_mb = sum(_rss_kb(p) for p in pids) / 1024
            main_mb = _rss_kb(d.proc.pid) / 1024
        finally:
            d.stop()
    verdict = "OK" if total_mb <= RSS_TARGET_MB else "OVER TARGET"
    print(
        f"idle daemon, 2 simulated controllers: RSS {total_mb:.1f} MB "
        f"(main {main_mb:.1f} MB, {len(pids) - 1} child process(es)); "
        f"target <= {RSS_TARGET_MB:.0f} MB: {verdict}"
    )


def watchdog_under_load(joints: int) -> None:
    half_s = WATCHDOG_USEC / 2e6
    with tempfile.TemporaryDirectory() as tmp:
        d = _Daemon(
            Path(tmp),
            [
                _controller("robot1", joints, production_runs_s=0.5),
                _controller("robot2", joints, production_runs_s=0.5),
            ],
        )
        try:
            ready = d.wait_for("READY=1", 60)
            started = time.monotonic()
            deadline = started + 600
            while time.monotonic() < deadline:
                d.drain(0.5)
                reports = d.stderr.read_text().count("event=report ")
                if reports >= 2:
                    break
            busy_s = time.monotonic() - started
            d.drain(0.6)
        finally:
            d.stop()
    pings = [t for t, m in d.messages if m == "WATCHDOG=1" and t >= ready]
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    worst_late_s = max(g - half_s for g in gaps)
    verdict = "OK" if worst_late_s <= half_s else "LATE"
    print(
        f"watchdog while {2 * joints} cycles are captured and analysed ({busy_s:.1f} s, "
        f"{len(pings)} pings, due every {half_s:.2f} s): worst gap {max(gaps):.3f} s, "
        f"worst lateness {1e3 * worst_late_s:.0f} ms; target <= half the period "
        f"({1e3 * half_s:.0f} ms): {verdict}"
    )


def main(quick: bool = False) -> None:
    idle_rss(settle_s=2.0 if quick else 5.0)
    watchdog_under_load(joints=2 if quick else 6)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
