"""The opt-in metrics endpoint, scraped by a real Prometheus server (Debian package
`prometheus`, scripts/system-deps.sh) on loopback, and read back through its query API: the
joints' health from a stop's report, and the agent's own state (the MQTT outbox of a publisher
whose broker is away, the watchdog of an event loop that was blocked)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agent.config.prometheus import PrometheusSettings
from agent.publish.prometheus.exporter import PrometheusExporter
from agent.report.model import Report
from tests.publish.test_mqtt_payloads import T0, sample_report

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def _stop_report() -> Report:
    """The sample report as a stop's: J1 and J2 measured, X's cycle ended in an error."""
    report = sample_report()
    joints = tuple(replace(j, outcome="error" if j.error else "ok") for j in report.joints)
    return Report(T0.isoformat(), report.machines, joints, host="edge1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(promql)}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        doc = json.loads(reply.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def _wait_for(port: int, promql: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    end = time.monotonic() + timeout_s
    while True:
        try:
            found = _query(port, promql)
        except OSError:
            found = []
        if found or time.monotonic() > end:
            return found
        time.sleep(0.5)


@contextlib.contextmanager
def scraping(target_port: int, tmp_path: Path) -> Iterator[int]:
    """A real Prometheus scraping 127.0.0.1:`target_port` every second; yields its web port once
    it has scraped the target."""
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is missing: install the Debian package (scripts/system-deps.sh)"
    web = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: jha\n    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        up = _wait_for(web, 'up{job="jha"} == 1')
        assert up, "Prometheus never scraped the endpoint"
        yield web
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.fixture
def exporter() -> Any:
    exp = PrometheusExporter(PrometheusSettings(listen="127.0.0.1", port=0))
    asyncio.run(exp.start())
    yield exp
    asyncio.run(exp.close())


def test_a_real_prometheus_scrapes_status_ne107_indicators_and_cycle_counts(
    exporter: PrometheusExporter, tmp_path: Path
) -> None:
    asyncio.run(exporter.publish(_stop_report()))
    with scraping(exporter.port, tmp_path) as web:
        watch = _wait_for(web, 'jha_joint_status{status="watch"} == 1')
        assert [(r["metric"]["controller"], r["metric"]["joint"]) for r in watch] == [
            ("robot1", "J1")  # 1.2 mrad: past the 1 mrad watch limit, under the 2 mrad alert
        ]
        signals = {
            r["metric"]["joint"]: r["metric"]["signal"] for r in _query(web, "jha_joint_ne107 == 1")
        }
        assert signals == {
            "J1": "maintenance_required",
            # uncalibrated (amplitude only) against backlash limits: no valid estimate yet;
            # labels take any name, no topic-style escaping
            "J2/a+b#": "check_function",
            "X": "failure",
        }
        values = {
            (r["metric"]["joint"], r["metric"]["indicator"], r["metric"]["unit"]): float(
                r["value"][1]
            )
            for r in _query(web, "jha_joint_indicator")
        }
        assert values[("J1", "backlash_rad", "rad")] == pytest.approx(1.2e-3)
        assert values[("J1", "stiffness_nm_per_rad", "N*m/rad")] == pytest.approx(1.0e4)
        cycles = {
            (r["metric"]["controller"], r["metric"]["outcome"]): float(r["value"][1])
            for r in _query(web, "jha_cycles_total")
        }
        assert cycles == {("robot1", "ok"): 2.0, ("cnc", "error"): 1.0}
        (stamp,) = _query(web, 'jha_last_report_timestamp_seconds{controller="cnc"}')
        assert float(stamp["value"][1]) == pytest.approx(T0.timestamp())
        # no MQTT and no systemd watchdog here: their gauges are absent, not a reassuring 0
        for name in ("jha_mqtt_outbox_messages", "jha_watchdog_lateness_seconds"):
            assert _query(web, name) == [], name


def test_a_real_prometheus_sees_the_outbox_depth_the_watchdogs_lateness_and_every_panel(
    tmp_path: Path,
) -> None:
    from agent.config.load import load_config
    from agent.publish.factory import publishers_for
    from agent.publish.mqtt.payloads import report_messages
    from agent.publish.mqtt.publisher import MqttPublisher
    from agent.sd_notify import Notifier
    from tests.support.service.config_files import MINIMAL

    # a broker port nothing listens on: every message stays in the outbox
    path = tmp_path / "agent.yaml"
    path.write_text(
        MINIMAL + f"publish:\n  mqtt: {{host: 127.0.0.1, port: {_free_port()}, tls: false}}\n"
        "  prometheus: {listen: 127.0.0.1, port: 0}\n"
    )
    config = load_config(path)
    mqtt, exporter = publishers_for(config.publish, tmp_path / "state")
    assert isinstance(mqtt, MqttPublisher) and isinstance(exporter, PrometheusExporter)
    # systemd's side of the watchdog: a datagram socket, a 1 s timeout (pings every 0.5 s)
    notify = tmp_path / "notify.sock"
    systemd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    systemd.bind(str(notify))
    systemd.settimeout(10)
    notifier = Notifier({"NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": "1000000"})
    exporter.watch_watchdog(notifier)  # as the daemon does before starting its publishers
    # the daemon's event loop, in a thread of its own so that this test can block it
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    report = _stop_report()
    run(mqtt.start())
    run(exporter.start())
    pinging = asyncio.run_coroutine_threadsafe(notifier.watchdog_loop(), loop)
    try:
        for pub in (mqtt, exporter):
            run(pub.publish(report))
        queued = len(report_messages(report, config.publish.mqtt.topic_prefix, "now"))  # type: ignore[union-attr]
        assert mqtt.stats().queued == queued
        assert systemd.recv(64) == b"WATCHDOG=1"
        # the loop blocked for 1.5 s right after a ping: the next one, due 0.5 s after it, comes
        # at least 1 s late
        loop.call_soon_threadsafe(time.sleep, 1.5)
        with scraping(exporter.port, tmp_path) as web:
            depth = _wait_for(web, "jha_mqtt_outbox_messages")
            assert [float(r["value"][1]) for r in depth] == [queued]
            late = _wait_for(web, "jha_watchdog_lateness_seconds >= 1")
            assert len(late) == 1, "the blocked loop's late ping is seen for a minute"
            (timeout,) = _query(web, "jha_watchdog_timeout_seconds")
            assert float(timeout["value"][1]) == 1.0
            # every query of the example Grafana dashboard is valid PromQL and finds data
            dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
            titles = [panel["title"] for panel in dashboard["panels"]]
            assert "MQTT outbox: messages waiting for the broker" in titles
            for panel in dashboard["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$controller", ".*")
                    found = _wait_for(web, expr, 30.0)  # increase(): two scrapes
                    assert found, (panel["title"], expr)
    finally:
        pinging.cancel()
        run(exporter.close())
        run(mqtt.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        notifier.close()
        systemd.close()


def test_the_config_section_makes_the_exporter_and_checks_its_port(tmp_path: Path) -> None:
    from agent.config.load import load_config
    from agent.errors import ConfigError
    from agent.publish.factory import publishers_for
    from tests.support.service.config_files import MINIMAL

    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL + "publish:\n  prometheus: {port: 9999}\n")
    config = load_config(path)
    (exp,) = publishers_for(config.publish, tmp_path)
    assert isinstance(exp, PrometheusExporter) and exp.settings.listen == "127.0.0.1"
    path.write_text(MINIMAL + "publish:\n  prometheus: {port: 70000}\n")
    with pytest.raises(ConfigError, match=r"publish\.prometheus\.port: expected an integer"):
        load_config(path)


def test_the_daemon_hands_its_watchdog_to_the_metrics_endpoint(tmp_path: Path) -> None:
    from agent.config.load import load_config
    from agent.sd_notify import Notifier
    from agent.service.daemon import Agent
    from tests.support.service.config_files import MINIMAL

    path = tmp_path / "agent.yaml"
    # production runs for a minute: no stop comes within --once's wait, nothing moves
    path.write_text(
        f"agent: {{state_dir: {tmp_path / 'state'}}}\n"
        + MINIMAL.replace("driver: sim\n", "driver: sim\n    settings: {production_runs_s: 60}\n")
    )
    notify = tmp_path / "notify.sock"
    systemd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    systemd.bind(str(notify))
    notifier = Notifier({"NOTIFY_SOCKET": str(notify), "WATCHDOG_USEC": "1000000"})
    exporter = PrometheusExporter(PrometheusSettings(listen="127.0.0.1", port=0))
    agent = Agent(
        load_config(path), once=True, wait_for_stop_s=0.5, publishers=[exporter],
        notifier=notifier, out=io.StringIO(),
    )  # fmt: skip
    try:
        asyncio.run(agent.run())
    finally:
        notifier.close()
        systemd.close()
    assert exporter.agent.watchdog is notifier
    names = {m.name for m in exporter.agent.collect()}
    assert names == {"jha_watchdog_timeout_seconds", "jha_watchdog_lateness_seconds"}


def test_idle_and_dribbling_connections_cannot_take_the_agent_s_descriptors() -> None:
    # A flood of idle connections once took every descriptor of the daemon (no stop could
    # start): now at most max_connections are held, each for request_timeout_s in all.
    settings = PrometheusSettings(port=0, max_connections=4, request_timeout_s=0.5)
    exp = PrometheusExporter(settings)
    asyncio.run(exp.start())
    server = exp._server
    assert server is not None
    flood = [socket.create_connection(("127.0.0.1", exp.port)) for _ in range(60)]
    try:
        dribbler = flood[0]
        dribbler.sendall(b"GET /metr")
        for _ in range(5):  # a byte at a time never finishes a request
            with contextlib.suppress(OSError):
                dribbler.sendall(b"i")
            time.sleep(0.2)
        # Every connection is closed by the agent: refused at once beyond the cap, or cut at
        # its deadline, the dribbler too.
        for s in flood:
            s.settimeout(20.0)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(1024) == b""
        assert server.held_max <= settings.max_connections
        # Refused at once, or ended by its deadline (the socket's timeout or the cut).
        assert server.refused >= 1 and server.cut + server.failed >= 1, vars(server)
        # Then a scrape is served again, whole.
        with urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/metrics", timeout=5) as r:
            assert b"jha_cycles" in r.read()
    finally:
        for s in flood:
            s.close()
        asyncio.run(exp.close())
