"""The scrape endpoint's HTTP server: prometheus_client's WSGI app behind a server that no client
can use to take the agent's descriptors or threads.

prometheus_client's own `start_http_server` gives every connection a thread and waits on it
forever: a few thousand idle connections took every descriptor of the daemon (no stop could
start, `jha status` timed out). Here at most `max_connections` are served at once (more are
closed at once and counted), and each has `request_timeout_s` in all, reading and writing
included, then its socket is shut down.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr (the journal would take one line per scrape)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class BoundedMetricsServer(ThreadingWSGIServer):
    """ThreadingWSGIServer with a connection cap and a whole-request deadline."""

    max_connections = 16
    request_timeout_s = 10.0

    def server_activate(self) -> None:
        super().server_activate()
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self.refused = 0  # connections closed at once: the cap was reached
        self.cut = 0  # connections shut down at their deadline
        self.failed = 0  # requests that ended in an error (cut, reset, garbage)
        self.held = self.held_max = 0  # connections served now, and at most at once
        self._count = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._count:
            self.held += 1
            self.held_max = max(self.held_max, self.held)
        deadline = threading.Timer(self.request_timeout_s, self._cut, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            request.settimeout(self.request_timeout_s)
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            with self._count:
                self.held -= 1
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback per failed request on stderr: a client cut at its
        # deadline is this server working, not a fault for the journal.
        with self._count:
            self.failed += 1

    def _cut(self, request: socket.socket) -> None:
        self.cut += 1
        with contextlib.suppress(OSError):  # already closed by its thread
            request.shutdown(socket.SHUT_RDWR)


def start_metrics_server(
    registry: CollectorRegistry,
    listen: str,
    port: int,
    max_connections: int,
    request_timeout_s: float,
) -> BoundedMetricsServer:
    """Serve `registry` on listen:port in a daemon thread; the server (shutdown() stops it)."""

    class Server(BoundedMetricsServer):
        pass

    Server.address_family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    Server.max_connections = max_connections
    Server.request_timeout_s = request_timeout_s
    httpd = make_server(listen, port, make_wsgi_app(registry), Server, handler_class=_QuietHandler)
    assert isinstance(httpd, BoundedMetricsServer)
    threading.Thread(target=httpd.serve_forever, name="prometheus", daemon=True).start()
    return httpd
