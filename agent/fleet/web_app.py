"""What the plan's web side answers, apart from how bytes reach it (agent.fleet.web): read-only
(GET and HEAD), every request authenticated by the token file's token, as a bearer token or as
the password of HTTP Basic (what a browser can send). Compared in constant time; never logged.

    /                  the plan page (filters as query parameters: site, line, machine, indicator)
    /api/plan          the plan as JSON
    /reports/<id>      a stored report's page;  /api/reports/<id>  its JSON as the agent sent it
    /api/stats         the ingest's and the web side's counters

A wrong token is answered after a delay that doubles with each failure from the same address
(LoginThrottle), so guessing costs time; a request without credentials (a browser's first) is
answered at once.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hmac
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg

from agent.fleet.page import plan_page, report_page
from agent.fleet.page_script import CSP
from agent.fleet.plan import FILTERS, PlanFilter, PlanReader
from agent.logfmt import kv

log = logging.getLogger(__name__)

_GZIP_FROM = 1024  # bytes: smaller bodies are sent as they are

HEADERS = {
    # No external resource, and no script but the plan page's own (allowed by its hash): a
    # name injected as markup could run nothing.
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain"
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds to wait before answering (a failed login); the server sleeps without a thread.
    delay_s: float = 0.0

    def header_list(self) -> list[tuple[str, str]]:
        return [
            ("Content-Type", f"{self.content_type}; charset=utf-8"),
            ("Content-Length", str(len(self.body))),
            *{**HEADERS, **self.headers}.items(),
        ]


class LoginThrottle:
    """The delay before answering a failed login: `first_s`, doubled with each further failure
    from the same address within `forget_s`, at most `max_s`. Addresses are kept in a bounded
    table (the oldest forgotten first): an attacker with many addresses fills it, and each of
    them still waits at least `first_s`."""

    def __init__(
        self, first_s: float = 1.0, max_s: float = 16.0, forget_s: float = 600.0, size: int = 4096
    ) -> None:
        self.first_s, self.max_s, self.forget_s, self.size = first_s, max_s, forget_s, size
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.failed = 0  # failed logins since start

    def failure(self, client: str, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        with self._lock:
            self.failed += 1
            count, last = self._failures.pop(client, (0, now))
            count = 1 if now - last > self.forget_s else count + 1
            self._failures[client] = (count, now)
            while len(self._failures) > self.size:
                self._failures.popitem(last=False)
            return min(self.first_s * 2 ** (count - 1), self.max_s)

    def success(self, client: str) -> None:
        with self._lock:
            self._failures.pop(client, None)


class PlanApp:
    def __init__(
        self,
        token: str,
        reader: PlanReader,
        stats: Callable[[], dict[str, Any]],
        throttle: LoginThrottle | None = None,
    ) -> None:
        self._token = token.encode("utf-8")
        self._reader = reader
        self._stats = stats
        self.throttle = throttle or LoginThrottle()

    def respond(self, method: str, target: str, headers: dict[str, str], client: str) -> Response:
        """The answer to one request; `headers` by lower-case name. Never raises."""
        if method not in ("GET", "HEAD"):
            return Response(405, b"read-only\n", headers={"Allow": "GET, HEAD"})
        given = _credential(headers.get("authorization", ""))
        if given is None or not hmac.compare_digest(given, self._token):
            challenge = {"WWW-Authenticate": 'Basic realm="jha fleet", charset="UTF-8"'}
            delay = 0.0
            if given:  # a wrong token, not a browser's first request without one
                delay = self.throttle.failure(client)
                log.warning(kv("fleet_http_login_failed", client=client, delay_s=delay))
            return Response(401, b"authorization required\n", headers=challenge, delay_s=delay)
        self.throttle.success(client)
        try:
            answer = self._route(target)
        except ValueError as exc:
            answer = Response(400, f"{exc}\n".encode())
        except psycopg.OperationalError:
            log.warning(kv("fleet_http_database_unavailable"))
            answer = Response(503, b"database unavailable, try again\n")
        except Exception as exc:  # a request must not end the server
            log.exception(kv("fleet_http_error", error=type(exc).__name__))
            answer = Response(500, b"internal error\n")
        return _gzipped(answer, headers.get("accept-encoding", ""))

    def _route(self, target: str) -> Response:
        url = urlsplit(target)
        path = url.path
        if path in ("/", "/api/plan"):
            f = _filter(url.query)
            now = datetime.now(UTC)
            if path == "/":
                page = plan_page(self._reader.plan(f, now), f, now)
                return Response(200, page.encode(), "text/html")
            joints = self._reader.plan_json(f, now)
            body = f'{{"generated_at": "{now.isoformat()}", "joints": {joints}}}'
            return Response(200, body.encode(), "application/json")
        if path.startswith("/reports/") or path.startswith("/api/reports/"):
            report_id = _report_id(path.rsplit("/", 1)[1])
            doc = None if report_id is None else self._reader.report(report_id)
            if doc is None or report_id is None:
                return Response(404, b"no such report\n")
            if path.startswith("/api/"):
                return _json(doc)
            return Response(200, report_page(report_id, doc).encode(), "text/html")
        if path == "/api/stats":
            return _json(self._stats())
        return Response(404, b"not found\n")


def _credential(header: str) -> bytes | None:
    """The token a request presents (bearer, or Basic's password), None without one."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip().encode("utf-8", "replace") or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            return b"\x00"  # malformed: a failed login, not an absent one
        return decoded.partition(b":")[2] or b"\x00"
    return None


def _json(body: Any) -> Response:
    return Response(200, json.dumps(body, allow_nan=False).encode(), "application/json")


def _gzipped(answer: Response, accept_encoding: str) -> Response:
    # A plan of 12,000 joints is megabytes of repetitive markup: gzip (level 1: most of the
    # gain for little CPU) when the client takes it.
    if len(answer.body) <= _GZIP_FROM or "gzip" not in accept_encoding:
        return answer
    extra = {**answer.headers, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
    body = gzip.compress(answer.body, compresslevel=1)
    return Response(answer.status, body, answer.content_type, extra, answer.delay_s)


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
