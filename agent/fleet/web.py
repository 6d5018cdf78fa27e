"""The plan's HTTP server: bounded, so that clients who connect and say nothing cannot starve it.

One asyncio loop on a thread of its own holds every connection (an idle one costs a few kB, not
a thread); HTTP/1.1 is parsed by h11; the answers (agent.fleet.web_app) are computed on a small
pool of threads, because PostgreSQL is queried through blocking psycopg.

The bounds (HttpLimits, from the `http:` settings):
  - at most `max_connections` open: a new connection beyond it closes the oldest one that is
    waiting for its request (never one being answered), so a real request always gets in and
    the process keeps file descriptors for PostgreSQL and the broker;
  - a whole-request deadline: a request's head (its line and headers) must be complete within
    `request_timeout_s` of the connection's start or the previous answer (a header every few
    seconds no longer keeps a connection for ever), including the TLS handshake;
  - a request line over `max_line_bytes` is answered 414, a head over `max_head_bytes` 431;
  - an answer must be taken by the client within `write_timeout_s`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import h11

from agent.fleet.web_app import PlanApp, Response
from agent.logfmt import kv

log = logging.getLogger(__name__)

_READ_BYTES = 65536


@dataclass(frozen=True)
class HttpLimits:
    max_connections: int = 256
    request_timeout_s: float = 10.0
    write_timeout_s: float = 30.0
    max_line_bytes: int = 8192
    max_head_bytes: int = 32768
    workers: int = 4  # threads computing answers (each may hold the database's connection)


@dataclass
class HttpCounters:
    """What the web side did since start (/api/stats "http"); written on the loop's thread."""

    open: int = 0
    accepted: int = 0
    requests: int = 0
    evicted: int = 0  # closed to admit a newer connection (max_connections)
    refused: int = 0  # closed at once: max_connections all being answered
    timed_out: int = 0  # no whole request head within request_timeout_s
    too_long: int = 0  # answered 414 or 431
    malformed: int = 0  # answered 400
    failed: int = 0  # reset, failed TLS handshake, or an answer not taken in time
    login_failures: int = 0


class _Close(Exception):
    """End this connection (after what was already sent)."""


@dataclass(eq=False)
class _Connection:
    transport: asyncio.Transport
    client: str
    answering: bool = False
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


class _StreamProtocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, which, for a TLS listener, reads nothing before the handshake
    starts: a client's hello that arrived before the connection's task ran would otherwise be
    read as plain bytes into the stream, and the handshake would wait for it for ever."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        connected: Any,
        made: Callable[[asyncio.Transport], None],
        hold_reading: bool,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__(reader, connected, loop=loop)
        self._made = made
        self._hold_reading = hold_reading

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if self._hold_reading:
            transport.pause_reading()  # loop.start_tls resumes it under the TLS layer
        self._made(transport)  # before the connection's task exists (super() starts it)
        super().connection_made(transport)


class PlanServer:
    def __init__(
        self,
        host: str,
        port: int,
        app: PlanApp,
        tls: ssl.SSLContext | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        self.app = app
        self.limits = limits or HttpLimits()
        self.counters = HttpCounters()
        self._tls = tls
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # Bound here, not on the loop's thread: a port in use fails `jha fleet` at start.
        self._socket = socket.create_server((host, port), family=family, backlog=1024)
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="jha-fleet-web")
        self._loop = asyncio.new_event_loop()
        self._connections: dict[asyncio.Transport, _Connection] = {}  # oldest first
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="jha-fleet-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stats(self) -> dict[str, int]:
        return {**asdict(self.counters), "login_failures": self.app.throttle.failed}

    def stop(self) -> None:
        if self._thread.is_alive() and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(10)
        self._socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        self._socket.setblocking(False)
        accepting = asyncio.create_task(self._accept())
        await self._stopping.wait()
        accepting.cancel()
        tasks = [t for c in self._connections.values() for t in c.tasks]
        for transport in list(self._connections):
            transport.abort()
        for t in tasks:
            t.cancel()
        await asyncio.gather(accepting, *tasks, return_exceptions=True)

    async def _accept(self) -> None:
        """One connection at a time, room made before the next is taken: at most
        max_connections + 1 sockets (asyncio's own server takes up to its backlog at once,
        1,024 sockets before any of them is seen)."""
        loop = asyncio.get_running_loop()

        def protocol() -> _StreamProtocol:
            reader = asyncio.StreamReader(limit=_READ_BYTES, loop=loop)
            return _StreamProtocol(
                reader, self._connection, self._register, self._tls is not None, loop
            )

        while True:
            try:
                sock, peer = await loop.sock_accept(self._socket)
            except OSError as exc:  # out of file descriptors: wait, do not spin
                self.counters.failed += 1
                log.warning(kv("fleet_http_accept_failed", error=_words(exc)))
                await asyncio.sleep(0.5)
                continue
            if not self._room():
                sock.close()
                continue
            try:
                await loop.connect_accepted_socket(protocol, sock)
            except OSError as exc:
                sock.close()
                log.info(kv("fleet_http_connection_failed", client=peer[0], error=_words(exc)))

    def _register(self, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername")
        self._connections[transport] = _Connection(transport, str(peer[0]) if peer else "")
        self.counters.accepted += 1
        self.counters.open = len(self._connections)

    def _room(self) -> bool:
        """Room for one more: the oldest connection waiting for a request is closed when full;
        when every one is being answered, the new one is refused (its client may retry)."""
        if len(self._connections) < self.limits.max_connections:
            return True
        victim = next((t for t, c in self._connections.items() if not c.answering), None)
        if victim is None:
            self.counters.refused += 1
            return False
        del self._connections[victim]
        self.counters.evicted += 1
        victim.abort()
        return True

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        transport = cast(asyncio.Transport, writer.transport)
        c = self._connections.get(transport)
        if c is None:  # closed to make room before its task ran
            writer.close()
            return
        if (task := asyncio.current_task()) is not None:
            c.tasks.append(task)
        try:
            await self._converse(c, reader, writer)
        except _Close:
            pass
        except (ConnectionError, ssl.SSLError, OSError, asyncio.IncompleteReadError) as exc:
            self.counters.failed += 1
            log.info(kv("fleet_http_connection_failed", client=c.client, error=_words(exc)))
        except asyncio.CancelledError:
            pass  # the server stops (asyncio's stream callback cannot take a cancelled task)
        finally:
            self._connections.pop(transport, None)
            self.counters.open = len(self._connections)
            writer.close()

    async def _converse(
        self, c: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.request_timeout_s
        if self._tls is not None:
            await self._within(
                writer.start_tls(self._tls, ssl_handshake_timeout=self.limits.request_timeout_s),
                deadline,
            )
        h = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_bytes)
        while True:
            request = await self._request(h, reader, writer, deadline)
            c.answering = True
            self.counters.requests += 1
            method = request.method.decode("ascii", "replace")
            target = request.target.decode("latin-1")
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers}
            answer = await loop.run_in_executor(
                self._pool, self.app.respond, method, target, headers, c.client
            )
            if answer.delay_s > 0:
                await asyncio.sleep(answer.delay_s)
            closing = method not in ("GET", "HEAD")  # a body we did not read may follow
            await self._answer(h, writer, answer, closing, with_body=method != "HEAD")
            path = target.split("?")[0][:200]  # filters name machines: left out of the log
            log.info(kv("fleet_http", client=c.client, request=path, status=answer.status))
            if closing or h.our_state is h11.MUST_CLOSE:
                raise _Close
            try:
                h.start_next_cycle()
            except h11.LocalProtocolError:
                raise _Close from None
            c.answering = False
            deadline = loop.time() + self.limits.request_timeout_s

    async def _request(
        self,
        h: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        deadline: float,
    ) -> h11.Request:
        """The next request, complete before `deadline`: a GET or HEAD to its end (a body it
        should not have is read and dropped, up to max_head_bytes), any other at its head (it
        is refused and the connection closed, so its body is never read)."""
        first_line = bytearray()  # the request line's bytes so far (414)
        request: h11.Request | None = None
        dropped = 0
        while True:
            try:
                event = h.next_event()
            except h11.RemoteProtocolError as exc:
                await self._refuse(writer, exc.error_status_hint, str(exc) or "malformed request")
                raise _Close from None
            if isinstance(event, h11.Request):
                # h11 bounds a head only while it is incomplete: one that came whole in one
                # read is measured here.
                size = len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
                if size > self.limits.max_head_bytes:
                    await self._refuse(writer, 431, "request head too large")
                if event.method not in (b"GET", b"HEAD"):
                    return event
                request = event
            elif isinstance(event, h11.Data):
                dropped += len(event.data)
                if dropped > self.limits.max_head_bytes:
                    await self._refuse(writer, 400, "a GET with a body")
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                return request
            elif event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                raise _Close
            if event is not h11.NEED_DATA:
                continue
            data = await self._within(reader.read(_READ_BYTES), deadline)
            if not data:
                raise _Close  # the client is gone (or never said anything)
            if request is None and b"\n" not in first_line:
                first_line += data[: self.limits.max_line_bytes + 2 - len(first_line)]
                end = first_line.find(b"\n")
                if (end < 0 and len(first_line) > self.limits.max_line_bytes) or (
                    end > self.limits.max_line_bytes
                ):
                    await self._refuse(writer, 414, "request line too long")
            h.receive_data(bytes(data))

    async def _within(self, step: Any, deadline: float) -> Any:
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(step, max(remaining, 0.0))
        except TimeoutError:
            self.counters.timed_out += 1
            raise _Close from None

    async def _refuse(self, writer: asyncio.StreamWriter, status: int, reason: str) -> None:
        """Answer a request that cannot be parsed (414, 431, 400) and close: its framing is
        unknown, so nothing after it on this connection can be trusted."""
        if status in (414, 431):
            self.counters.too_long += 1
        else:
            self.counters.malformed += 1
        words = {414: "URI Too Long", 431: "Request Header Fields Too Large"}
        phrase = words.get(status, "Bad Request")
        body = f"{reason}\n".encode()
        writer.write(
            f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        await self._drain(writer)
        log.info(kv("fleet_http_refused", status=status, reason=reason[:100]))
        raise _Close

    async def _answer(
        self,
        h: h11.Connection,
        writer: asyncio.StreamWriter,
        answer: Response,
        closing: bool,
        with_body: bool,
    ) -> None:
        headers = [("Server", "jha-fleet"), *answer.header_list()]
        if closing:
            headers.append(("Connection", "close"))
        out = h.send(h11.Response(status_code=answer.status, headers=headers)) or b""
        if with_body:  # h11 frames a HEAD answer without one (keeping the GET's length)
            out += h.send(h11.Data(data=answer.body)) or b""
        out += h.send(h11.EndOfMessage()) or b""
        writer.write(out)
        await self._drain(writer)

    async def _drain(self, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)
        except TimeoutError:
            self.counters.failed += 1
            raise _Close from None


def _words(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
