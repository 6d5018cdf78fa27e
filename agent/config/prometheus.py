"""`publish.prometheus`: an opt-in scrape endpoint (agent.publish.prometheus.exporter)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PrometheusSettings:
    # Loopback by default: open it to the plant network deliberately (and firewall it).
    listen: str = field(default="127.0.0.1", metadata={"min_len": 1})
    port: int = field(default=9464, metadata={"ge": 0, "le": 65535, "doc": "0: any free port"})
    # A scraper needs one connection at a time: a few spare, and no client may hold more.
    max_connections: int = field(
        default=16, metadata={"ge": 1, "le": 1024, "doc": "served at once; more are closed"}
    )
    request_timeout_s: float = field(
        default=10.0,
        metadata={"gt": 0.0, "le": 300.0, "doc": "a connection's whole life, reading included"},
    )
