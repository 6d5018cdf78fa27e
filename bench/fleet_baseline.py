"""Baselines of the fleet benchmark (bench_fleet), measured on each burst of the same run:

- transport: mosquitto's own C client (`mosquitto_sub`, a persistent MQTT 5 session at QoS 1)
  receiving and acknowledging the burst the fleet's session also had queued, nothing else;
- storage: PostgreSQL's fastest write (COPY, one transaction) of the same messages as rows
  keyed by their id, each payload as json, into a scratch table.

Their sum is the time a pipeline that only received and then stored the burst would take on
this machine at that moment; the ingest's time is given as a share of it. The paho-based drain
used before swung 6x between runs (5,942 to 38,744 messages/s against the fleet session's own):
a Python client measures the interpreter's luck as much as the machine.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Sequence
from typing import Any

import orjson
import psycopg

FILTERS = ("jha/+/report", "jha/+/+/health", "jha/agent/+/status")
CLIENT_ID = "bench-baseline-mosquitto-sub"


def _sub(port: int, *extra: str) -> list[str]:
    argv = ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(port), "-i", CLIENT_ID]
    argv += ["-V", "5", "-c", "-x", "86400", "-q", "1"]
    for f in FILTERS:
        argv += ["-t", f]
    return argv + list(extra)


def subscribe(port: int) -> None:
    """Create mosquitto_sub's persistent session and its subscription, then leave (before a
    burst is queued for it)."""
    subprocess.run(_sub(port, "-E"), check=True, timeout=30, stdout=subprocess.DEVNULL)


def drain_s(port: int, messages: int) -> float:
    """Seconds for mosquitto_sub to receive and acknowledge `messages` queued messages."""
    began = time.perf_counter()
    subprocess.run(
        _sub(port, "-C", str(messages)), check=True, timeout=600, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - began


def copy_s(conninfo: str, payloads: Sequence[bytes]) -> float:
    """Seconds for PostgreSQL to COPY `payloads` as (id, json) rows into a fresh table keyed by
    id, committed. The table is dropped afterwards."""
    rows: list[tuple[Any, ...]] = []
    for p in payloads:
        doc = orjson.loads(p)
        rows.append((uuid.UUID(doc["message_id"]), p.decode()))
    with psycopg.connect(conninfo) as conn:
        conn.execute(
            "CREATE TABLE bench_copy (id uuid PRIMARY KEY, received_at timestamptz "
            "NOT NULL DEFAULT now(), document json NOT NULL)"
        )
        conn.commit()
        began = time.perf_counter()
        with conn.cursor() as cur, cur.copy("COPY bench_copy (id, document) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.commit()
        elapsed = time.perf_counter() - began
        conn.execute("DROP TABLE bench_copy")
        conn.commit()
    return elapsed
