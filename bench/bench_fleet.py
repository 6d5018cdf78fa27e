"""`jha fleet` at plant scale, with real peers (mosquitto, a throwaway PostgreSQL cluster) and the
service as its own process, fed the agent's own messages (agent.publish.mqtt.payloads):

1. Bursts (5; 2 quick): N agents' reports (6 joints each: 1 report + 6 health messages) queued
   at the broker for the fleet's persistent session while it is stopped (an outage), then the
   time from its start to every row stored; after each, the same-run baseline
   (bench.fleet_baseline: mosquitto_sub draining the same burst + PostgreSQL COPY of the same
   messages) and the ingest's share of it; min / median / max over the bursts.
2. Steady state: reports published one by one at a fixed rate; publish to queryable (a poller
   sees the row), median and p99.
3. The plan for N x 6 joints: /api/plan and the page, time (median of 5) and size; the page
   again with two busy loops (`yes`) beside it.
4. The service's peak RSS, and the database's size per year at one stop per machine per day.

Full: 2,000 agents (targets: >= 1,000 reports/s and >= 0.5 of the baseline, p99 <= 2 s, page
<= 1 s with two busy loops and <= 2 MB, RSS <= 200 MB). Quick: 200 agents.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench import fleet_baseline
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


@dataclass(frozen=True)
class _Burst:
    messages: int
    total_s: float  # from the service's start (process, imports, connections) to the last row
    sustained_rps: float  # from the first committed batch to the last
    drain_s: float  # mosquitto_sub, the same burst
    copy_s: float  # PostgreSQL COPY of the same messages
    agents: int
    peak_rss_mb: float

    @property
    def baseline_rps(self) -> float:
        return self.agents / (self.drain_s + self.copy_s)

    @property
    def share(self) -> float:
        return self.sustained_rps / self.baseline_rps


def _print_bursts(runs: list[_Burst]) -> None:
    def spread(values: list[float], fmt: str) -> str:
        low, mid, high = min(values), statistics.median(values), max(values)
        return f"{low:{fmt}} / {mid:{fmt}} / {high:{fmt}}"

    print(f"bursts of {runs[0].agents} reports, {len(runs)} runs, min / median / max:")
    print(f"  ingest, sustained:        {spread([r.sustained_rps for r in runs], '.0f')} reports/s")
    total = [r.agents / r.total_s for r in runs]
    print(f"  ingest, from its start:   {spread(total, '.0f')} reports/s")
    drained = [r.messages / r.drain_s for r in runs]
    print(f"  mosquitto_sub drain:      {spread(drained, '.0f')} messages/s")
    copied = [r.messages / r.copy_s for r in runs]
    print(f"  PostgreSQL COPY:          {spread(copied, '.0f')} rows/s")
    print(f"  baseline (drain + COPY):  {spread([r.baseline_rps for r in runs], '.0f')} reports/s")
    print(f"  ingest / baseline:        {spread([r.share for r in runs], '.2f')}")


def _watch_burst(
    conninfo: str, agents: int, began: float, before: tuple[int, int] = (0, 0)
) -> tuple[float, int, float]:
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
            reports, health = reports - before[0], health - before[1]
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


def _plan_ms(url: str, encoding: str) -> tuple[float, int]:
    """Median of 5 GETs in ms, and the bytes on the wire."""
    times, size = [], 0
    for _ in range(5):
        t = time.perf_counter()
        status, size = _fetch(url, encoding)
        times.append(time.perf_counter() - t)
        assert status == 200
    return statistics.median(times) * 1000, size


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
    bursts = 2 if quick else 5
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
            _run(work, broker, pg, agents, bursts, steady, rate, started)
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
    bursts: int,
    steady: int,
    rate: float,
    started: list[FleetProcess],
) -> None:
    http = free_port()
    files = write_fleet_config(work / "fleet", broker.port, pg.conninfo, http_port=http)
    base = f"http://127.0.0.1:{http}"

    # 1. Bursts after an outage: the session exists, the service is away while agents flush.
    fleet = FleetProcess(files.config, work / "fleet0.log")
    started.append(fleet)
    fleet.wait_subscribed()
    fleet.stop()
    fleet_baseline.subscribe(broker.port)  # the transport baseline's session queues it too
    empty = _db_size(pg.conninfo)  # migrated, no row yet
    runs: list[_Burst] = []
    for i in range(bursts):
        print(f"burst {i + 1} of {bursts}: building {agents} agents' reports...", flush=True)
        reports = _reports(agents, day=20 + i)
        messages = [m for r in reports for m in messages_of(r)]
        before = row_count(pg.conninfo, "reports"), row_count(pg.conninfo, "joint_health")
        _send_all(broker.port, [messages[j::PUBLISHERS] for j in range(PUBLISHERS)])
        fleet = FleetProcess(files.config, work / f"fleet{i + 1}.log")
        started.append(fleet)
        began = time.perf_counter()
        first_s, first_n, ended = _watch_burst(pg.conninfo, agents, began, before)
        peak_mb = _rss_kb(fleet.proc.pid)[1] / 1024
        assert fleet.stop() == 0
        burst = _Burst(
            messages=len(messages),
            total_s=ended - began,
            sustained_rps=(agents - first_n) / (ended - first_s),
            drain_s=fleet_baseline.drain_s(broker.port, len(messages)),
            copy_s=fleet_baseline.copy_s(pg.conninfo, [m.payload for m in messages]),
            agents=agents,
            peak_rss_mb=peak_mb,
        )
        runs.append(burst)
        print(
            f"  {len(messages)} messages, {sum(len(m.payload) for m in messages) / 1e6:.1f} MB: "
            f"stored in {burst.total_s:.2f} s from the service's start "
            f"({agents / burst.total_s:.0f} reports/s), sustained {burst.sustained_rps:.0f} "
            f"reports/s; baseline mosquitto_sub {burst.drain_s:.2f} s + COPY "
            f"{burst.copy_s:.2f} s = {burst.baseline_rps:.0f} reports/s; share "
            f"{burst.share:.2f}",
            flush=True,
        )
    _print_bursts(runs)
    fleet = FleetProcess(files.config, work / "fleet-steady.log")
    started.append(fleet)
    fleet.wait_subscribed()

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

    # 3. The plan, as a browser asks for it (gzip) and as it is; then the page again with two
    # busy loops beside it (a loaded plant server).
    for path in ("/api/plan", "/"):
        for encoding in ("gzip", "identity"):
            ms, size = _plan_ms(base + path, encoding)
            print(
                f"plan {path:9s} for {agents * JOINTS} joints ({encoding}): {ms:.0f} ms median "
                f"of 5, {size / 1e6:.2f} MB"
            )
    busy = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(2)]
    try:
        for path in ("/", "/api/plan"):
            ms, _ = _plan_ms(base + path, "gzip")
            print(f"plan {path:9s} (gzip) with two busy loops beside it: {ms:.0f} ms median of 5")
    finally:
        for b in busy:
            b.kill()
            b.wait()

    # 4. Memory and disk.
    rss, _ = _rss_kb(fleet.proc.pid)
    peak = max(r.peak_rss_mb for r in runs)
    print(f"fleet service RSS {rss / 1024:.0f} MB after the steady state; burst peak {peak:.0f} MB")
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
