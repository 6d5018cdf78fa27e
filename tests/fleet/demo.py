"""`make fleet-demo`: a mosquitto broker, a throwaway PostgreSQL cluster, three simulated agents
(the agent's own MQTT publisher, each on its own site's topic prefix) and `jha fleet`; prints the
plan's address and token, then keeps the agents reporting (one simulated day every 20 s) until
Ctrl-C, and removes everything it made.

    python -m tests.fleet.demo [--port 8470] [--seconds-per-day 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import tempfile
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent.publish.mqtt.publisher import MqttPublisher
from tests.fleet.agents import machine_report
from tests.fleet.conftest import TOKEN
from tests.fleet.running import FleetProcess
from tests.peers.mosquitto_broker import MosquittoBroker
from tests.peers.postgres import PostgresCluster
from tests.support.publish.mqtt import settings_for

# (client id, topic prefix, machine, wear per day of each of its 6 joints in rad)
AGENTS = (
    ("edge-weld-1", "plant-a/body/jha", "weld-robot-1", (2e-6, 5e-6, 1e-6, 3.2e-5, 2e-6, 4e-6)),
    ("edge-paint-3", "plant-a/paint/jha", "paint-robot-3", (1e-6, 1e-6, 2e-5, 1e-6, 0.0, 1e-6)),
    ("edge-cnc-7", "plant-b/machining/jha", "<cnc 7> & co", (6e-5, 1e-6, 2e-6, 0.0, 0.0, 1e-6)),
)
START = (3e-4, 2.5e-4, 4e-4, 5e-4, 2e-4, 3e-4)


def fleet_config(work: Path, broker: int, conninfo: str, port: int) -> Path:
    token = work / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    sources = "".join(
        f"  - topic_prefix: {prefix}\n    site: {prefix.split('/')[0]}\n"
        f"    line: {prefix.split('/')[1]}\n"
        for _, prefix, _, _ in AGENTS
    )
    config = work / "fleet.yaml"
    config.write_text(
        textwrap.dedent(f"""\
        broker:
          host: 127.0.0.1
          port: {broker}
          tls: false
          client_id: jha-fleet-demo
        sources:
        """)
        + sources
        + textwrap.dedent(f"""\
        database:
          conninfo: "{conninfo}"
        http:
          host: 127.0.0.1
          port: {port}
          token_file: {token}
        stale_after_s: {3 * 86400}
        """)
    )
    return config


async def agents_report(broker: int, work: Path, days: int, seconds_per_day: float) -> None:
    publishers = []
    for client_id, prefix, _, _ in AGENTS:
        settings = settings_for(broker, client_id=client_id, topic_prefix=prefix)
        pub = MqttPublisher(settings, work / client_id)
        await pub.start()
        publishers.append(pub)
    try:
        first = datetime.now(UTC) - timedelta(days=days)
        day = 0
        while True:
            # The history is published day by day up to now; after that each tick adds a day's
            # wear but is stamped with the real time (points one day apart, ending now): a
            # report dated ahead of the page's "as of" would be refused by the fleet anyway
            # (max_clock_skew_s).
            end = min(first + timedelta(days=day), datetime.now(UTC))
            for pub, (_, _, machine, wear) in zip(publishers, AGENTS, strict=True):
                history = range(max(0, day - 30), day + 1)
                joints = {
                    f"axis{j + 1}": [START[j] + wear[j] * d for d in history] for j in range(6)
                }
                await pub.publish(machine_report(machine, joints, end=end, host=pub.client_id))
            day += 1
            if day > days:
                await asyncio.sleep(seconds_per_day)
    finally:
        for pub in publishers:
            await pub.close()


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fleet.demo")
    p.add_argument("--port", type=int, default=8470)
    p.add_argument("--seconds-per-day", type=float, default=20.0)
    p.add_argument("--history-days", type=int, default=30)
    args = p.parse_args()
    # systemd, timeout(1) and kill send SIGTERM: clean up as after Ctrl-C.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    work = Path(tempfile.mkdtemp(prefix="jha-fleet-demo-"))
    broker = MosquittoBroker(work / "broker", persistence=True).start()
    pg = PostgresCluster().start()
    fleet = None
    try:
        config = fleet_config(work, broker.port, pg.conninfo, args.port)
        fleet = FleetProcess(config, work / "fleet.log")
        fleet.wait_subscribed()
        url = f"http://127.0.0.1:{args.port}/"
        print(
            textwrap.dedent(f"""\
            jha fleet is serving the maintenance plan at {url}
              user: any, password (or bearer token): {TOKEN}
              curl -H 'Authorization: Bearer {TOKEN}' {url}api/plan
            three simulated agents report one day every {args.seconds_per_day:g} s; its log:
              {fleet.log_file}
            Ctrl-C stops everything and removes {work}""")
        )
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(agents_report(broker.port, work, args.history_days, args.seconds_per_day))
    finally:
        if fleet is not None:
            fleet.stop()
        broker.stop()
        pg.destroy()
        time.sleep(0.1)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
