"""A broker that flaps under the running daemon: `jha run` publishes every stop's report to a real
mosquitto that is stopped and started several times, and once SIGKILLed, while production stops
keep coming. Every report the history names must reach a subscriber, the daemon never exits and
its log holds no Traceback."""

from __future__ import annotations

import collections
import contextlib
import signal
import sqlite3
import time
from pathlib import Path

from agent.publish.mqtt.publisher import OUTBOX_FILE
from tests.peers.mosquitto_broker import MosquittoBroker
from tests.support.publish.mqtt import Subscriber
from tests.support.service.faults import audit, config, start, terminate, wait_for
from tests.support.summary import fault, record

# One joint, a 0.5 s cycle in each 0.9 s stop, one stop every 1.2 s: a report about every 1.2 s
# once the first analysis is done. The flaps need 7 reports (the first, one made in each outage,
# one delivered after each restart); 16 stops leave room for a loaded machine's slower analyses,
# and the last begins at 18.2 s, so the reports end and the outbox can drain before the test ends.
STOPS = [{"at_s": 0.2 + 1.2 * k, "length_s": 0.9} for k in range(16)]
FLAPS = 3  # the last outage is a SIGKILL
# Each outage lasts until the history has gained a report (made with the broker away), and each
# up phase until the subscriber has received one more: waits on those states, not on a time, as
# an analysis under load can take longer than a stop's spacing.
STATE_WAIT_S = 30.0


def _report_ids(state: Path) -> list[str]:
    db = state / "history.sqlite"
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as c:
            return [r[0] for r in c.execute("SELECT message_id FROM reports ORDER BY id")]
    except sqlite3.OperationalError:
        return []  # the schema is being created


def _queued(state: Path) -> int:
    db = state / OUTBOX_FILE
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as c:
        return int(c.execute("SELECT count(*) FROM outbox").fetchone()[0])


def test_a_flapping_broker_under_the_daemon_loses_no_report(tmp_path: Path) -> None:
    broker = MosquittoBroker(tmp_path / "broker", persistence=True).start()
    # A persistent session: the broker keeps what comes while the subscriber reconnects.
    sub = Subscriber(broker.port, client_id="plant-historian", clean=False)
    state = tmp_path / "state"
    publish = {
        "mqtt": {
            "host": "127.0.0.1",
            "port": broker.port,
            "tls": False,
            "client_id": "jha-flap",
            "reconnect_min_s": 0.1,
            "reconnect_max_s": 0.4,
            "keepalive_s": 5,
        }
    }
    cfg = config(tmp_path / "agent.yaml", state, STOPS, joints=1, publish=publish)
    log_path = tmp_path / "daemon.log"
    proc = start(cfg, log_path)
    outages: list[int] = []  # reports the history gained while the broker was away
    try:
        wait_for(lambda: len(sub.ids()) >= 1, 30, "the first report over MQTT", proc)
        for flap in range(FLAPS):
            before = len(_report_ids(state))
            broker.stop(signal.SIGKILL if flap == FLAPS - 1 else signal.SIGTERM)
            wait_for(
                lambda before=before: len(_report_ids(state)) > before,
                STATE_WAIT_S,
                f"a report made with the broker away (outage {flap + 1})",
                proc,
            )
            assert proc.poll() is None, f"the daemon exited with the broker away ({flap})"
            outages.append(len(_report_ids(state)) - before)
            received = len(set(sub.ids()))
            broker.start()
            wait_for(
                lambda received=received: len(set(sub.ids())) > received,
                STATE_WAIT_S,
                f"a report delivered after the broker's restart {flap + 1}",
                proc,
            )
        # Until the stops are over (no new report for 2 s) and the outbox has drained.
        settled: list[tuple[int, float]] = [(-1, time.monotonic())]

        def quiet() -> bool:
            n = len(_report_ids(state))
            if n != settled[-1][0]:
                settled.append((n, time.monotonic()))
            return time.monotonic() - settled[-1][1] > 1.5 and _queued(state) == 0

        wait_for(quiet, 30, "the last report and an empty outbox", proc)
        expected = _report_ids(state)
        with contextlib.suppress(AssertionError):  # counted and asserted below
            sub.wait(lambda: set(expected) <= set(sub.ids()), "every report id", 10)
        assert proc.poll() is None, "the daemon exited"
        code = terminate(proc)
    finally:
        if proc.poll() is None:
            terminate(proc)
        sub.close()
        broker.stop()
    got = collections.Counter(sub.ids())
    missing = set(expected) - set(got)
    log = log_path.read_text()
    fault(
        f"MQTT: broker flapping {FLAPS}x (once SIGKILL) under `jha run`",
        records_lost=len(missing) + len(audit(state).problems),
    )
    record(
        "MQTT duplicates",
        f"broker flapping {FLAPS}x under `jha run`",
        str(sum(c - 1 for c in got.values())),
        f"{len(expected)} reports, made while the broker was away: {outages}",
    )
    assert missing == set(), (sorted(missing), log[-3000:])
    assert sum(outages) >= FLAPS, outages  # reports were made while the broker was away
    assert code == 0
    assert "Traceback" not in log, log[-3000:]
    assert audit(state).problems == []
