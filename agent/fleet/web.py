"""The plan over HTTP: read-only (GET and HEAD), bound to the configured address, every request
authenticated by the token file's token, as a bearer token or as the password of HTTP Basic
(what a browser can send). Compared in constant time; never logged.

    /                  the plan page (filters as query parameters: site, line, machine, indicator)
    /api/plan          the plan as JSON
    /reports/<id>      a stored report's page;  /api/reports/<id>  its JSON as the agent sent it
    /api/stats         the ingest's counters
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hmac
import json
import logging
import ssl
import sys
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg

from agent.fleet.page import plan_page, report_page
from agent.fleet.page_script import CSP
from agent.fleet.plan import FILTERS, PlanFilter, PlanReader
from agent.logfmt import kv

log = logging.getLogger(__name__)

_GZIP_FROM = 1024  # bytes: smaller bodies are sent as they are

_HEADERS = {
    # No external resource, and no script but the plan page's own (allowed by its hash): a
    # name injected as markup could run nothing.
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class PlanServer:
    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        reader: PlanReader,
        stats: Callable[[], dict[str, Any]],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        handler = _handler(token.encode("utf-8"), reader, stats)
        self.httpd = _Server((host, port), handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            # The handshake happens in the request's own thread (Handler.setup), not in the
            # accepting one: a client that connects and stalls must not hold up the others.
            self.httpd.socket = tls.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="jha-fleet-http", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that fails (a plain HTTP client on the HTTPS port, a failed handshake,
        a reset) is logged in one line, not as a traceback on stderr."""
        exc = sys.exc_info()[1]
        log.info(
            kv(
                "fleet_http_connection_failed",
                client=client_address[0] if client_address else "",
                error=" ".join(f"{type(exc).__name__}: {exc}".split())[:200],
            )
        )


def _handler(
    token: bytes, reader: PlanReader, stats: Callable[[], dict[str, Any]]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "jha-fleet"
        sys_version = ""
        # A client that connects and says nothing holds a thread: it is dropped after this.
        timeout = 30

        def setup(self) -> None:
            if isinstance(self.request, ssl.SSLSocket):
                self.request.settimeout(self.timeout)
                self.request.do_handshake()  # here, in this request's thread (PlanServer)
            super().setup()

        def do_GET(self) -> None:
            if not self._authorized():
                self._send(
                    401,
                    b"authorization required\n",
                    "text/plain",
                    {"WWW-Authenticate": 'Basic realm="jha fleet", charset="UTF-8"'},
                )
                return
            try:
                self._route()
            except ValueError as exc:
                self._send(400, f"{exc}\n".encode(), "text/plain")
            except psycopg.OperationalError:
                log.warning(kv("fleet_http_database_unavailable"))
                self._send(503, b"database unavailable, try again\n", "text/plain")
            except Exception as exc:  # a request must not end the server
                log.exception(kv("fleet_http_error", error=type(exc).__name__))
                self._send(500, b"internal error\n", "text/plain")

        def do_HEAD(self) -> None:
            self.do_GET()

        def _refuse(self) -> None:
            self._send(405, b"read-only\n", "text/plain", {"Allow": "GET, HEAD"})

        do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

        def _authorized(self) -> bool:
            header = self.headers.get("Authorization", "")
            scheme, _, value = header.partition(" ")
            given = b""
            if scheme.lower() == "bearer":
                given = value.strip().encode("utf-8", "replace")
            elif scheme.lower() == "basic":
                try:
                    decoded = base64.b64decode(value.strip(), validate=True)
                except (binascii.Error, ValueError):
                    return False
                given = decoded.partition(b":")[2]
            return bool(given) and hmac.compare_digest(given, token)

        def _route(self) -> None:
            url = urlsplit(self.path)
            path = url.path
            if path in ("/", "/api/plan"):
                f = _filter(url.query)
                now = datetime.now(UTC)
                if path == "/":
                    page = plan_page(reader.plan(f, now), f, now)
                    self._send(200, page.encode(), "text/html")
                else:
                    joints = reader.plan_json(f, now)
                    body = f'{{"generated_at": "{now.isoformat()}", "joints": {joints}}}'
                    self._send(200, body.encode(), "application/json")
            elif path.startswith("/reports/") or path.startswith("/api/reports/"):
                report_id = _report_id(path.rsplit("/", 1)[1])
                doc = None if report_id is None else reader.report(report_id)
                if doc is None or report_id is None:
                    self._send(404, b"no such report\n", "text/plain")
                elif path.startswith("/api/"):
                    self._json(doc)
                else:
                    self._send(200, report_page(report_id, doc).encode(), "text/html")
            elif path == "/api/stats":
                self._json(stats())
            else:
                self._send(404, b"not found\n", "text/plain")

        def _json(self, body: Any) -> None:
            self._send(200, json.dumps(body, allow_nan=False).encode(), "application/json")

        def _send(
            self, code: int, body: bytes, kind: str, extra: dict[str, str] | None = None
        ) -> None:
            extra = dict(extra or {})
            # A plan of 12,000 joints is megabytes of repetitive markup: gzip (level 1: most
            # of the gain for little CPU) when the client takes it.
            if len(body) > _GZIP_FROM and "gzip" in self.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body, compresslevel=1)
                extra["Content-Encoding"] = "gzip"
                extra["Vary"] = "Accept-Encoding"
            self.send_response(code)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            for k, v in {**_HEADERS, **extra}.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # The query is left out: filters name machines, and nothing secret travels there,
            # but a line per request with the path is what an operator needs.
            log.info(
                kv(
                    "fleet_http",
                    client=self.client_address[0],
                    request=urlsplit(self.path).path[:200],
                    status=args[1] if len(args) > 1 else None,
                )
            )

    return Handler


def _filter(query: str) -> PlanFilter:
    params = parse_qs(query, keep_blank_values=False)
    unknown = sorted(set(params) - {*FILTERS, "history"})
    if unknown:
        raise ValueError(f"unknown filter {unknown[0]!r}: expected one of {', '.join(FILTERS)}")
    chosen = {k: v[-1] for k, v in params.items() if v[-1] and k in FILTERS}
    if any("\x00" in v or len(v) > 256 for v in chosen.values()):
        raise ValueError("a filter holds NUL or is longer than 256 characters")
    history = params.get("history", ["0"])[-1]
    if history not in ("0", "1"):
        raise ValueError("history: expected 0 or 1")
    return PlanFilter(**chosen, history=history == "1")


def _report_id(text: str) -> str | None:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None
