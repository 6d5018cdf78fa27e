"""The fleet service in this process (most tests) or as `jha fleet` in a child process (the
kill -9 tests), and an HTTP client for its plan."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.fleet.service import FleetService
from agent.fleet.settings import load_fleet_settings
from tests.fleet.conftest import TOKEN
from tests.peers.mosquitto_broker import wait_until


@contextlib.contextmanager
def running_fleet(config: Path) -> Iterator[FleetService]:
    service = FleetService(load_fleet_settings(config))
    service.start()
    try:
        wait_until(service.ingest.subscribed.is_set, 20, "the fleet to subscribe")
        yield service
    finally:
        service.stop()


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def get(base: str, path: str, token: str | None = TOKEN, basic: bool = False) -> Response:
    request = urllib.request.Request(base + path)
    if token is not None:
        if basic:
            pair = base64.b64encode(f"planner:{token}".encode()).decode()
            request.add_header("Authorization", f"Basic {pair}")
        else:
            request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return Response(r.status, dict(r.headers), r.read())
    except urllib.error.HTTPError as e:
        return Response(e.code, dict(e.headers), e.read())


def base_url(service: FleetService) -> str:
    host, port = service.web.address
    return f"http://{host}:{port}"


class FleetProcess:
    """`jha fleet --config FILE` as a child process; its log goes to a file."""

    def __init__(
        self,
        config: Path,
        log_file: Path,
        env: dict[str, str] | None = None,
        fd_limit: int | None = None,
    ) -> None:
        """`fd_limit`: the soft RLIMIT_NOFILE the service runs under (systemd's default for a
        service is 1024; jha-fleet.service sets 4096)."""
        self.log_file = log_file
        with open(log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent.cli.main", "fleet", "--config", str(config)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                preexec_fn=None if fd_limit is None else lambda: _limit_files(fd_limit),
            )

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace")

    def wait_subscribed(self, timeout_s: float = 30) -> None:
        wait_until(
            lambda: self._alive() and "event=fleet_mqtt_subscribed" in self.log_text(),
            timeout_s,
            "jha fleet to connect",
        )

    def _alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"jha fleet exited {self.proc.returncode}: {self.log_text()}")
        return True

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        return self.proc.returncode


def _limit_files(soft: int) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
