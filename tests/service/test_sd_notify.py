"""sd_notify over NOTIFY_SOCKET (paths and abstract addresses), the watchdog period, logfmt."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import socket
import time
from pathlib import Path

import pytest

from agent.logfmt import kv, quote, redact, register_secret, setup_logging
from agent.sd_notify import Notifier, watchdog_period_s


def receiver(address: str | bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2.0)
    return sock


def test_messages_reach_a_path_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with receiver(str(path)) as sock:
        n = Notifier({"NOTIFY_SOCKET": str(path)})
        assert n.ready()
        assert n.status("waiting  for\n a stop")
        assert not n.status("waiting for a stop")  # unchanged: not sent again
        assert n.reloading()
        assert n.stopping()
        got = [sock.recv(4096).decode() for _ in range(4)]
        n.close()
    assert got[0] == "READY=1"
    assert got[1] == "STATUS=waiting for a stop"
    assert got[2].startswith("RELOADING=1\nMONOTONIC_USEC=")
    assert got[3] == "STOPPING=1"


def test_an_abstract_address() -> None:
    name = f"jha-test-{os.getpid()}-{time.monotonic_ns()}"
    with receiver(b"\0" + name.encode()) as sock:
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.watchdog()
        assert sock.recv(64) == b"WATCHDOG=1"
        n.close()


def test_without_notify_socket_everything_is_a_no_op() -> None:
    n = Notifier({})
    assert not n.enabled
    assert not n.ready() and not n.status("x") and not n.stopping()
    asyncio.run(n.watchdog_loop())  # returns at once: no watchdog asked for


def test_a_vanished_socket_is_logged_not_raised(tmp_path: Path) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert not n.ready()


def test_the_watchdog_period_respects_watchdog_pid() -> None:
    me = str(os.getpid())
    assert watchdog_period_s({"WATCHDOG_USEC": "3000000"}) == 3.0
    assert watchdog_period_s({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": me}) == 3.0
    assert watchdog_period_s({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_period_s({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_period_s({"WATCHDOG_USEC": "soon"}) is None
    assert watchdog_period_s({}) is None


def test_pings_come_at_half_the_period(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with receiver(str(path)) as sock:
        n = Notifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000"})
        assert n.watchdog_s == pytest.approx(0.2)

        async def main() -> None:
            task = asyncio.create_task(n.watchdog_loop())
            await asyncio.sleep(0.55)
            task.cancel()

        started = time.monotonic()
        asyncio.run(main())
        times = []
        sock.settimeout(0.05)
        while True:
            try:
                assert sock.recv(64) == b"WATCHDOG=1"
            except TimeoutError:
                break
            times.append(time.monotonic() - started)
        n.close()
    assert 5 <= len(times) <= 7  # at 0, 0.1, ..., 0.5 s


# --- logfmt --------------------------------------------------------------------------------


def test_values_are_quoted_only_when_needed() -> None:
    assert quote("plain") == "plain"
    assert quote("two words") == '"two words"'
    assert quote('say "hi"') == '"say \\"hi\\""'
    assert quote("a=b") == '"a=b"'
    assert quote("") == '""'
    assert kv("cycle_refused", joint="j1", reason="permission signal is off", none=None) == (
        'event=cycle_refused joint=j1 reason="permission signal is off"'
    )


def test_secrets_are_redacted_whoever_logs_them() -> None:
    register_secret("hunter2-very-secret")
    stream = io.StringIO()
    handler = setup_logging("debug", stream)
    try:
        log = logging.getLogger("jha.test")
        log.info("event=connect url=mqtts://plant password=abc123 token='tok en' user=agent")
        log.warning(kv("oops", detail="the key is hunter2-very-secret"))
        log.info("not an event, api_key: XYZ")
        try:
            raise ValueError("bad password=zzz")
        except ValueError:
            log.exception(kv("crash"))
    finally:
        logging.getLogger().removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4  # one line per event, the traceback included
    text = stream.getvalue()
    for secret in ("abc123", "tok en", "hunter2-very-secret", "XYZ", "zzz"):
        assert secret not in text
    assert "user=agent" in lines[0] and "password=***" in lines[0]
    for line in lines:
        assert line.startswith("time=") and " level=" in line and " logger=jha.test " in line
        assert " event=" in line
    assert "traceback=" in lines[3]
    assert redact("nothing to hide") == "nothing to hide"
