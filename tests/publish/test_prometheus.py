"""The opt-in metrics endpoint, scraped by a real Prometheus server (Debian package
`prometheus`, scripts/system-deps.sh) on loopback, and read back through its query API."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.config.prometheus import PrometheusSettings
from agent.publish.prometheus.exporter import PrometheusExporter
from agent.report.model import Report
from tests.publish.test_mqtt_payloads import T0, sample_report

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture
def exporter() -> Any:
    exp = PrometheusExporter(PrometheusSettings(listen="127.0.0.1", port=0))
    asyncio.run(exp.start())
    yield exp
    asyncio.run(exp.close())


def test_a_real_prometheus_scrapes_status_ne107_indicators_and_cycle_counts(
    exporter: PrometheusExporter, tmp_path: Path
) -> None:
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus is missing: install the Debian package (scripts/system-deps.sh)"
    report = sample_report()
    # the cycles of this stop ended: J1 ok, J2 ok, X in an error
    joints = tuple(replace(j, outcome="error" if j.error else "ok") for j in report.joints)
    asyncio.run(exporter.publish(Report(T0.isoformat(), report.machines, joints, host="edge1")))
    web = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: jha\n    static_configs: [{{targets: ['127.0.0.1:{exporter.port}']}}]\n"
    )
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        up = _wait_for(web, 'up{job="jha"} == 1')
        assert up, "Prometheus never scraped the endpoint"
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
        # every query of the example Grafana dashboard is valid PromQL and finds data
        dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$controller", ".*")
                assert _wait_for(web, expr, 30.0), (panel["title"], expr)  # increase(): 2 scrapes
    finally:
        proc.terminate()
        proc.wait(20)


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
