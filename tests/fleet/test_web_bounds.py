"""The plan's web side cannot be starved (agent.fleet.web), with real PostgreSQL and mosquitto:
3,000 idle connections and a database restart leave real requests answered and the ingest
reconnecting; a slow sender is closed at the whole-request deadline; oversized request lines
and heads are answered 414 and 431; a wrong token is answered later and later."""

from __future__ import annotations

import contextlib
import logging
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.fleet.conftest import TOKEN, write_fleet_config
from tests.fleet.running import FleetProcess, base_url, get, running_fleet
from tests.peers.mosquitto_broker import MosquittoBroker, free_port, wait_until
from tests.peers.postgres import PostgresCluster
from tests.support.summary import fault, security

IDLE = 3000


@pytest.fixture
def own_cluster() -> Iterator[PostgresCluster]:
    with PostgresCluster() as pg:
        yield pg


def _raise_own_file_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= wanted, "raise the hard limit"


def _status_line(sock: socket.socket) -> bytes:
    sock.settimeout(30)
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0]


def test_three_thousand_idle_connections_and_a_database_restart(
    broker: MosquittoBroker, own_cluster: PostgresCluster, tmp_path: Path
) -> None:
    # The idle connections are given 300 s for their requests: a request answered while they
    # are held open was not answered by waiting them out.
    port = free_port()
    files = write_fleet_config(
        tmp_path / "fleet",
        broker.port,
        own_cluster.conninfo,
        http_port=port,
        http_settings="request_timeout_s: 300",
    )
    # systemd's default soft limit for a service: 3,000 connections would exhaust it.
    fleet = FleetProcess(files.config, tmp_path / "fleet.log", fd_limit=1024)
    sender = RawPublisher(broker.port)
    idle: list[socket.socket] = []
    try:
        fleet.wait_subscribed()
        base = f"http://127.0.0.1:{port}"
        _raise_own_file_limit(IDLE + 256)
        for n in range(IDLE):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            if n % 3 == 0:  # a third start a request and never finish it
                with contextlib.suppress(ConnectionResetError):  # closed to make room
                    s.sendall(b"GET / HTTP/1.1\r\nHost: plant\r\nX-Slow: ")
            idle.append(s)
        own_cluster.restart()
        started = time.monotonic()
        # Answered while every idle connection is still held open by this test.
        wait_until(lambda: get(base, "/api/plan").status == 200, 60, "the plan after restart")
        answered_s = time.monotonic() - started
        report = machine_report("after-restart", {"J1": [1e-4, 1.1e-4]})
        sender.send_messages(messages_of(report))
        stored = False
        deadline = time.monotonic() + 60
        while not stored and time.monotonic() < deadline:
            stored = get(base, "/api/plan?machine=after-restart").json()["joints"] != []
            time.sleep(0.2)
        http = get(base, "/api/stats").json()["http"]
        log = fleet.log_text()
    finally:
        for s in idle:
            s.close()
        sender.close()
        fleet.stop()
    print(
        f"{IDLE} idle connections + PostgreSQL restart: plan answered {answered_s:.2f} s after "
        f"the restart; {http['evicted']} evicted, {http['open']} open"
    )
    fault(f"fleet: {IDLE} idle HTTP connections, PostgreSQL restarted", int(not stored))
    assert stored, "the ingest did not store a report sent after the restart"
    assert http["evicted"] >= IDLE - 256  # the oldest waiting ones made room
    assert http["open"] <= 256
    assert "Too many open files" not in log
    assert "fleet_database_reconnect_failed" not in log or "fleet_database_reconnected" in log


@pytest.fixture
def fleet_base(
    broker: MosquittoBroker, database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fleet in this process; `@pytest.mark.parametrize("fleet_base", [SECONDS], indirect=True)`
    sets its request deadline (1 s unless said), its cap is 16 connections."""
    timeout_s = getattr(request, "param", 1.0)
    files = write_fleet_config(
        tmp_path / "fleet",
        broker.port,
        database,
        http_settings=f"request_timeout_s: {timeout_s}\nmax_connections: 16",
    )
    with running_fleet(files.config) as fleet:
        yield base_url(fleet)


def _stats(base: str) -> dict[str, int]:
    return dict(get(base, "/api/stats").json()["http"])


def test_a_slow_sender_is_closed_at_the_whole_request_deadline(
    fleet_base: str,
) -> None:
    base = fleet_base
    host, port = base.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(b"GET /api/plan HTTP/1.1\r\nHost: plant\r\n")
    lines = 0
    try:
        # A header line every 0.2 s: each read would meet a per-read timeout; the deadline
        # for the whole head (1 s here) is what ends it.
        while lines < 600:
            time.sleep(0.2)
            s.sendall(b"X-Slow: still coming\r\n")
            lines += 1
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        s.close()
    closed = lines < 600
    security("fleet: a slow sender's connection is closed at the request deadline", closed)
    assert closed
    assert _stats(base)["timed_out"] >= 1
    assert get(base, "/api/plan").status == 200


def test_oversized_request_line_and_head_are_answered_414_and_431(
    fleet_base: str, caplog: pytest.LogCaptureFixture
) -> None:
    base = fleet_base
    host, port = base.removeprefix("http://").split(":")
    caplog.set_level(logging.INFO)
    line = socket.create_connection((host, int(port)), timeout=30)
    line.sendall(b"GET /?" + b"a" * 65536 + b" HTTP/1.1\r\nHost: plant\r\n\r\n")
    status_line = _status_line(line)
    line.close()
    head = socket.create_connection((host, int(port)), timeout=30)
    head.sendall(b"GET / HTTP/1.1\r\nHost: plant\r\n" + b"X-Big: " + b"b" * 40000 + b"\r\n\r\n")
    status_head = _status_line(head)
    head.close()
    security(
        "fleet: a 64 kB request line answered 414, a 40 kB header 431",
        status_line.startswith(b"HTTP/1.1 414") and status_head.startswith(b"HTTP/1.1 431"),
    )
    assert status_line.startswith(b"HTTP/1.1 414"), status_line
    assert status_head.startswith(b"HTTP/1.1 431"), status_head
    assert _stats(base)["too_long"] == 2
    assert not [r for r in caplog.records if r.exc_info]  # answered, not a traceback
    assert get(base, "/api/plan").status == 200


def test_wrong_tokens_are_answered_later_and_later(
    fleet_base: str,
) -> None:
    base = fleet_base
    assert get(base, "/api/plan", token=None).status == 401  # a browser's first: no failure
    waited = []
    for _ in range(2):
        started = time.monotonic()
        assert get(base, "/api/plan", token="guess-" + TOKEN[:4]).status == 401
        waited.append(time.monotonic() - started)
    # The delays are 1 s, then 2 s: a lower bound a loaded machine can only exceed.
    security("fleet: a wrong token is answered after a doubling delay", waited[1] >= 2.0)
    assert waited[0] >= 1.0 and waited[1] >= 2.0, waited
    assert get(base, "/api/plan").status == 200
    assert _stats(base)["login_failures"] == 2


# 300 s: the idle connections are closed to make room, not by their deadline.
@pytest.mark.parametrize("fleet_base", [300.0], indirect=True)
def test_connections_over_the_cap_close_the_oldest_idle_one(
    fleet_base: str,
) -> None:
    base = fleet_base
    host, port = base.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(40)]
    try:
        assert get(base, "/api/plan").status == 200  # 40 idle against a cap of 16
        stats = _stats(base)
        # The first ones were closed to make room: reading them ends at once.
        idle[0].settimeout(30)
        with contextlib.suppress(ConnectionResetError):
            assert idle[0].recv(1) == b""
    finally:
        for s in idle:
            s.close()
    assert stats["evicted"] >= 40 - 16
    assert stats["open"] <= 16
