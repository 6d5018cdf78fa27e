"""`jha fleet` at plant scale, with real peers (mosquitto, a throwaway PostgreSQL cluster) and the
service as its own process, fed the agent's own messages (agent.publish.mqtt.payloads):

1. Burst: N agents' reports (6 joints each: 1 report + 6 health messages) queued at the broker
   for the fleet's persistent session while it is stopped (an outage), then the time from its
   start to every row stored: reports/s and messages/s.
2. Steady state: reports published one by one at a fixed rate; publish to queryable (a poller
   sees the row), median and p99.
3. The plan for N x 6 joints: /api/plan and the page, time (median of 5) and size.
4. The service's peak RSS, and the database's size per year at one stop per machine per day.

Full: 2,000 agents (issue 17's targets: >= 1,000 reports/s, p99 <= 2 s, page <= 1 s and
<= 2 MB, RSS <= 200 MB). Quick: 200 agents.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg

from bench import fleet_drain
from tests.fleet.agents import RawPublisher, machine_report, messages_of
from tests.fleet.conftest import TOKEN, row_count, write_fleet_config
from tests.fleet.running import FleetProcess
from tests.peers.mosquitto_broker import MosquittoBroker, free_port, wait_until
from tests.peers.postgres import PostgresCluster

JOINTS = 6
PUBLISHERS = 4
_RECENT = "SELECT report_id::text FROM reports WHERE received_at > now() - interval '5 minutes'"


def _reports(n: int, day: int) -> list[Any]:
    out = []
    for m in range(n):
        wear = 1e-4 * (1 + m % 17)
        joints = {
            f"J{j}": [wear * (1 + 0.05 * j) * (1 + 0.02 * i) for i in range(day + 1)]
            for j in range(1, JOINTS + 1)
        }
        out.append(machine_report(f"m{m:04d}", joints, host=f"edge{m:04d}"))
    return out


def _send_all(port: int, batches: list[list[Any]]) -> None:
    failures: list[BaseException] = []

    def run(i: int, messages: list[Any]) -> None:
        try:
            p = RawPublisher(port, client_id=f"bench-agent-{i}")
            try:
                p.send_pipelined(messages)
            finally:
                p.close()
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [
        threading.Thread(target=run, args=(i, b), daemon=True) for i, b in enumerate(batches)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"an agent's publisher failed: {failures[0]!r}")


def _drain_id(kind: str) -> str:
    return "bench-drain-" + kind.replace(" ", "-")


def _watch_burst(conninfo: str, agents: int, began: float) -> tuple[float, int, float]:
    """When the first batch became visible and how many reports it held, and when every report
    and health row was stored. One connection: a new one per poll is a PostgreSQL fork that
    takes CPU from the ingest it measures."""
    first: tuple[float, int] | None = None
    reports = 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while time.perf_counter() - began < 600:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM reports), (SELECT count(*) FROM joint_health)"
            ).fetchone()
            reports, health = (0, 0) if row is None else (int(row[0]), int(row[1]))
            now = time.perf_counter()
            if first is None and reports:
                first = (now, reports)
            if first is not None and reports == agents and health == agents * JOINTS:
                return first[0], first[1], now
            time.sleep(0.01)
    raise AssertionError(f"the burst was not stored within 600 s: {reports} reports")


def _db_size(conninfo: str) -> int:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return 0 if row is None else int(row[0])


def _fetch(url: str, encoding: str) -> tuple[int, int]:
    """(status, bytes on the wire) of a GET with the fleet's token."""
    request = urllib.request.Request(url)
    request.add_header("Authorization", f"Bearer {TOKEN}")
    request.add_header("Accept-Encoding", encoding)
    with urllib.request.urlopen(request, timeout=60) as r:
        return r.status, len(r.read())


def _rss_kb(pid: int) -> tuple[int, int]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def main(quick: bool = False) -> None:
    agents = 200 if quick else 2000
    steady = 100 if quick else 400
    rate = 50.0  # reports/s at steady state
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        work = Path(tmp)
        # No persistence: the broker keeps the fleet's session while the service is away without
        # it (it is for broker restarts), and the test peer's saves every change.
        broker = MosquittoBroker(work / "broker").start()
        pg = PostgresCluster().start()
        started: list[FleetProcess] = []
        try:
            _run(work, broker, pg, agents, steady, rate, started)
        finally:
            for fleet in started:
                fleet.stop()
            broker.stop()
            pg.destroy()


def _run(
    work: Path,
    broker: MosquittoBroker,
    pg: PostgresCluster,
    agents: int,
    steady: int,
    rate: float,
    started: list[FleetProcess],
) -> None:
    http = free_port()
    files = write_fleet_config(work / "fleet", broker.port, pg.conninfo, http_port=http)
    base = f"http://127.0.0.1:{http}"
    print(f"building {agents} agents' reports ({JOINTS} joints each)...", flush=True)
    built = time.perf_counter()
    reports = _reports(agents, day=20)
    messages = [m for r in reports for m in messages_of(r)]
    print(
        f"  {len(messages)} messages, {sum(len(m.payload) for m in messages) / 1e6:.1f} MB, "
        f"built in {time.perf_counter() - built:.1f} s"
    )

    # 1. Burst after an outage: the session exists, the service is away while agents flush.
    fleet = FleetProcess(files.config, work / "fleet1.log")
    started.append(fleet)
    fleet.wait_subscribed()
    fleet.stop()
    for kind in fleet_drain.KINDS:  # the baselines' sessions queue the same burst
        fleet_drain.subscribe(broker.port, kind, _drain_id(kind))
    empty = _db_size(pg.conninfo)  # migrated, no row yet
    _send_all(broker.port, [messages[i::PUBLISHERS] for i in range(PUBLISHERS)])
    fleet = FleetProcess(files.config, work / "fleet2.log")
    started.append(fleet)
    began = time.perf_counter()
    first_s, first_n, ended = _watch_burst(pg.conninfo, agents, began)
    burst_s = ended - began
    sustained = (agents - first_n) / (ended - first_s)
    print(
        f"burst: {agents} reports ({len(messages)} messages) stored in {burst_s:.2f} s from the "
        f"service's start (process start, imports, connections included): "
        f"{agents / burst_s:.0f} reports/s, {len(messages) / burst_s:.0f} messages/s"
    )
    print(
        f"burst, sustained (from the first committed batch, {first_n} reports, to the last): "
        f"{sustained:.0f} reports/s, {sustained * (1 + JOINTS):.0f} messages/s"
    )
    for kind in fleet_drain.KINDS:
        drained = fleet_drain.drain_rate(broker.port, kind, _drain_id(kind), len(messages))
        print(
            f"baseline, the same burst received and acknowledged only (no parsing, no "
            f"database) by {kind}: {drained:.0f} messages/s; the ingest's sustained rate is "
            f"{sustained * (1 + JOINTS) / drained:.2f} of it"
        )

    # 2. Steady state: publish to queryable.
    seen: dict[str, float] = {}
    stop = threading.Event()

    def poll() -> None:
        with psycopg.connect(pg.conninfo, autocommit=True) as conn:
            while not stop.is_set():
                for (rid,) in conn.execute(_RECENT):
                    seen.setdefault(rid, time.perf_counter())
                time.sleep(0.01)

    later = _reports(steady, day=21)
    poller = threading.Thread(target=poll)
    poller.start()
    sent: dict[str, float] = {}
    sender = RawPublisher(broker.port, client_id="bench-steady")
    next_at = time.perf_counter()
    for r in later:
        next_at += 1.0 / rate
        time.sleep(max(0.0, next_at - time.perf_counter()))
        sent[r.message_id] = time.perf_counter()
        sender.send_messages(messages_of(r))
    sender.close()
    wait_until(lambda: all(k in seen for k in sent), 120, "the steady reports queryable")
    stop.set()
    poller.join()
    latencies = sorted(seen[k] - sent[k] for k in sent)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    median_ms = statistics.median(latencies) * 1000
    print(
        f"steady state at {rate:g} reports/s: publish to queryable median {median_ms:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms ({len(latencies)} reports)"
    )

    # 3. The plan, as a browser asks for it (gzip) and as it is.
    for path in ("/api/plan", "/"):
        for encoding in ("gzip", "identity"):
            times, size = [], 0
            for _ in range(5):
                t = time.perf_counter()
                status, size = _fetch(base + path, encoding)
                times.append(time.perf_counter() - t)
                assert status == 200
            ms = statistics.median(times) * 1000
            print(
                f"plan {path:9s} for {agents * JOINTS} joints ({encoding}): {ms:.0f} ms median "
                f"of 5, {size / 1e6:.2f} MB"
            )

    # 4. Memory and disk.
    rss, peak = _rss_kb(fleet.proc.pid)
    print(f"fleet service RSS {rss / 1024:.0f} MB, peak {peak / 1024:.0f} MB")
    size = _db_size(pg.conninfo) - empty
    with psycopg.connect(pg.conninfo) as conn:
        row = conn.execute("SELECT count(*) FROM reports").fetchone()
        reports_n = 0 if row is None else int(row[0])
    per_report = size / reports_n
    per_year = per_report * 2000 * 365 / 1e9
    print(
        f"database: {size / 1e6:.1f} MB over the empty schema for {reports_n} reports "
        f"({per_report / 1e3:.1f} kB per report with its {JOINTS} health rows and indexes): "
        f"{per_year:.1f} GB per year at one stop per machine per day for 2,000 machines"
    )
    assert fleet.stop() == 0

    # 5. The same burst split between two processes of one shared-subscription group.
    _shared_burst(work, broker, pg, agents, started)


def _shared_burst(
    work: Path, broker: MosquittoBroker, pg: PostgresCluster, agents: int, started: list[Any]
) -> None:
    configs = []
    for name in ("a", "b"):
        files = write_fleet_config(
            work / f"shared-{name}", broker.port, pg.conninfo, client_id=f"jha-fleet-{name}"
        )
        text = files.config.read_text().replace(
            f"client_id: jha-fleet-{name}\n",
            f"client_id: jha-fleet-{name}\n  shared_group: bench\n",
        )
        files.config.write_text(text)
        configs.append(files.config)
    for i, config in enumerate(configs):  # their sessions exist before the outage
        fleet = FleetProcess(config, work / f"shared-{i}-1.log")
        started.append(fleet)
        fleet.wait_subscribed()
        fleet.stop()
    before = row_count(pg.conninfo, "reports")
    reports = _reports(agents, day=22)
    messages = [m for r in reports for m in messages_of(r)]
    _send_all(broker.port, [messages[i::PUBLISHERS] for i in range(PUBLISHERS)])
    pair = [FleetProcess(c, work / f"shared-{i}-2.log") for i, c in enumerate(configs)]
    started.extend(pair)
    began = time.perf_counter()
    wait_until(
        lambda: row_count(pg.conninfo, "reports") == before + agents, 600, "every report", 0.05
    )
    burst_s = time.perf_counter() - began
    peaks = [_rss_kb(f.proc.pid)[1] / 1024 for f in pair]
    print(
        f"burst split between 2 processes (shared_group): {agents} reports in {burst_s:.2f} s: "
        f"{agents / burst_s:.0f} reports/s, {len(messages) / burst_s:.0f} messages/s; peak RSS "
        f"{peaks[0]:.0f} and {peaks[1]:.0f} MB"
    )
    for f in pair:
        assert f.stop() == 0
