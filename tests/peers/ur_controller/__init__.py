"""A Universal Robots controller emulator at the protocol level, for the real ur_rtde clients.

It speaks RTDE on 30004 (protocol 2, real framing and recipes), the dashboard on 29999 and takes
scripts on 30003; it recognises ur_rtde's control script and plays its register handshake on an
emulated arm whose physics joint is Giovannitti et al. 2022's model (agent.models.joint). The ports
are fixed by ur_rtde, so every emulator binds its own loopback address 127.0.0.N (Linux routes all
of 127.0.0.0/8 to loopback).

`UrEmulator` starts one as a subprocess and talks to its control port (see __main__ for the
requests); `free_host()` finds an address whose UR ports are free.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
UR_PORTS = (29999, 30003, 30004)
_hosts = itertools.count(20 + os.getpid() % 100)


def free_host() -> str:
    """A 127.0.0.N none of whose UR ports is taken (each test gets its own address)."""
    for _ in range(230):
        n = 2 + next(_hosts) % 250
        host = f"127.0.0.{n}"
        try:
            for port in UR_PORTS:
                with socket.create_server((host, port)):
                    pass
        except OSError:
            continue
        return host
    raise RuntimeError("no free 127.0.0.N with the UR ports free")


# Controller seconds the emulator runs before start() returns.
_WARM_UP_S = 0.5


class UrEmulator:
    """One emulator process; a context manager that kills it on exit."""

    def __init__(self, host: str, *args: str) -> None:
        self.host = host
        self.args = args
        fd, self._log_path = tempfile.mkstemp(prefix="ur_emulator_", suffix=".log")
        self._log = os.fdopen(fd, "wb")
        self.proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._reader: Any = None

    def start(self, timeout_s: float = 15.0) -> UrEmulator:
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.peers.ur_controller", "--exit-with-stdin"),
                *("--host", self.host, *self.args),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"READY") or not line:
                break
        if not line.startswith(b"READY"):
            text = self.log_text()
            self.close()
            raise RuntimeError(f"emulator did not start: {text}")
        port = int(line.split()[1])
        self._sock = socket.create_connection((self.host, port), timeout=5.0)
        self._reader = self._sock.makefile("rb")
        # A real controller has been running long before an agent connects: hand the emulator
        # over once its cycle runs steadily, not while its process is still starting up.
        while time.monotonic() < deadline and self.state()["timestamp"] < _WARM_UP_S:
            time.sleep(0.02)
        return self

    def call(self, op: str, **kw: Any) -> Any:
        assert self._sock is not None
        self._sock.sendall((json.dumps({"op": op, **kw}) + "\n").encode())
        reply = json.loads(self._reader.readline())
        if not reply["ok"]:
            raise RuntimeError(reply["error"])
        return reply["result"]

    def state(self) -> dict[str, Any]:
        return dict(self.call("state"))

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_dead(self, timeout_s: float = 5.0) -> int | None:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5.0)

    def log_text(self) -> str:
        return Path(self._log_path).read_text(errors="replace")

    def __enter__(self) -> UrEmulator:
        return self.start() if self.proc is None else self

    def close(self) -> None:
        """Kill the process and delete its log."""
        self.kill()
        self._log.close()
        Path(self._log_path).unlink(missing_ok=True)

    def __exit__(self, *exc: object) -> None:
        self.close()
