"""systemd's notify protocol over NOTIFY_SOCKET, in stdlib (no libsystemd binding needed).

READY=1 once the daemon watches its controllers, STATUS= whenever what it does changes,
WATCHDOG=1 every WATCHDOG_USEC / 2, RELOADING=1 ... READY=1 around a reload, STOPPING=1 on the
way out. Without NOTIFY_SOCKET (run by hand, in tests) every call is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Mapping

log = logging.getLogger(__name__)

# The worst lateness of the watchdog pings over this long is what lateness_s() reports: a
# scraper that looks every 15-60 s still sees a ping that came late between two looks.
LATENESS_WINDOW_S = 60.0


def _address(raw: str) -> str | bytes:
    # "@name" is a Linux abstract socket: the leading "@" stands for a NUL byte.
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    return raw


def watchdog_period_s(environ: Mapping[str, str] | None = None) -> float | None:
    """The watchdog timeout systemd asked for, in seconds; None when there is no watchdog (or it
    is meant for another process: WATCHDOG_PID names the one to ping)."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    pid = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1e6


class Notifier:
    """One datagram per message to the socket systemd gave us; failures are logged, not raised
    (a lost notification must not take the service down)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self._address = _address(raw) if raw else None
        self.watchdog_s = watchdog_period_s(env) if raw else None
        self._sock: socket.socket | None = None
        self._status: str | None = None
        # (monotonic time, seconds late) of each ping in the window, and when the next is due;
        # read from a metrics thread, hence the lock.
        self._late: deque[tuple[float, float]] = deque()
        self._next_ping_at: float | None = None
        self._late_lock = threading.Lock()
        if self._address is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, *lines: str) -> bool:
        if self._sock is None or self._address is None:
            return False
        try:
            self._sock.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:  # systemd gone or socket full: nothing useful to do but say so
            log.warning("event=sd_notify_failed error=%r", str(exc))
            return False
        return True

    def ready(self) -> bool:
        return self.send("READY=1")

    def status(self, text: str) -> bool:
        """STATUS=..., sent only when it changed (one line, as systemctl status shows it)."""
        text = " ".join(text.split())
        if text == self._status:
            return False
        self._status = text
        return self.send(f"STATUS={text}")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets systemd (Type=notify-reload) match this to its reload request.
        return self.send("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    async def watchdog_loop(self) -> None:
        """Ping at half the period systemd asked for, until cancelled. Sleeps to absolute
        deadlines so a late wake-up does not push every later ping back."""
        if self.watchdog_s is None or self._sock is None:
            return
        loop = asyncio.get_running_loop()
        half_s = self.watchdog_s / 2
        next_at = loop.time()
        while True:
            self._pinged(loop.time() - next_at)
            self.watchdog()
            next_at += half_s
            now = loop.time()
            if next_at < now:  # the loop was blocked: ping now, then resume the rhythm
                next_at = now
            with self._late_lock:  # on the monotonic clock lateness_s() reads from any thread
                self._next_ping_at = next_at + (time.monotonic() - loop.time())
            await asyncio.sleep(next_at - now)

    def _pinged(self, late_s: float) -> None:
        now = time.monotonic()
        with self._late_lock:
            self._late.append((now, max(0.0, late_s)))
            while self._late and self._late[0][0] < now - LATENESS_WINDOW_S:
                self._late.popleft()

    def lateness_s(self) -> float | None:
        """How late the watchdog pings came: the worst over the last LATENESS_WINDOW_S, or how
        far the next one is overdue now if that is more (an event loop that hangs pings no
        more; this tells it while systemd's timeout runs). None before the first ping (or
        without a watchdog)."""
        now = time.monotonic()
        with self._late_lock:
            if self._next_ping_at is None:
                return None
            recent = [late for at, late in self._late if at >= now - LATENESS_WINDOW_S]
            overdue = now - self._next_ping_at
        return max([*recent, overdue, 0.0])

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
