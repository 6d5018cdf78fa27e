"""kill -9 of `jha run` at seeded random moments of its cycles and writes, restarted each time
on the same state directory: the history stays consistent and only grows, no capture or report
is torn, and a clean run afterwards completes."""

from __future__ import annotations

import contextlib
import random
import sqlite3
import subprocess
import time
from pathlib import Path

from tests.support.service.faults import (
    audit,
    config,
    cycle_count,
    kill9,
    lost,
    start,
    terminate,
    wait_for,
)
from tests.support.summary import fault, record

ROUNDS = 8
SEED = 20261122
# Stops 1.5 s long every 1.8 s from 0.2 s after connect: two 0.5 s cycles fit each, so at any
# moment the daemon is cycling, saving a capture, recording or writing a report.
STOPS = [{"at_s": 0.2 + 1.8 * k, "length_s": 1.5} for k in range(40)]


def test_kill_9_at_random_moments_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    state = tmp_path / "state"
    cfg = config(tmp_path / "agent.yaml", state, STOPS)
    log_path = tmp_path / "daemon.log"
    seen: dict[int, tuple[object, ...]] = {}
    total_lost = 0
    counts: list[int] = []
    stale = 0
    for round_no in range(ROUNDS):
        connects = _connects(log_path)
        proc = start(cfg, log_path)
        if round_no % 2 == 0:
            # Timed from the connect (start-up takes 1 s idle and several under load): the first
            # stop begins 0.2 s after it, so 0.3-1.8 s lands in its cycles and capture saves.
            wait_for(lambda n=connects: _connects(log_path) > n, 60, "the connect", proc)
            at_s = rng.uniform(0.3, 1.8)
            # Still running after at_s, as it should be: then the fault.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(at_s)
        else:
            # The first analysis takes seconds (the pool imports scipy): wait for its record,
            # then kill within the record, the report write or the next stop's cycles.
            count = len(seen)
            wait_for(lambda n=count: cycle_count(state) > n, 30, "a record", proc)
            time.sleep(rng.uniform(0.0, 0.8))
        assert proc.poll() is None, f"round {round_no}: the daemon exited on its own"
        kill9(proc)
        after = audit(state)
        round_lost = lost(seen, after)
        assert round_lost == 0, (round_no, at_s, after.problems)
        assert len(after.cycles) >= len(seen), (round_no, len(after.cycles), len(seen))
        total_lost += round_lost
        seen = after.cycles
        counts.append(len(after.cycles))
        stale = len(after.stale_tmp)
    # Every odd round killed after a record was made, so the history grew by at least one each.
    assert counts[-1] >= ROUNDS // 2, counts

    # A clean run on the same state, with one more stop: it recovers the captures the kills
    # left unrecorded (agent.service.recovery), records the stop and stops with SIGTERM, exit 0.
    orphans = audit(state).orphan_captures
    before = counts[-1]
    clean = config(tmp_path / "clean.yaml", state, [{"at_s": 0.2, "length_s": 1.5}])
    proc = start(clean, log_path)

    def settled() -> bool:
        # The stop's 2 cycles and every orphan recorded, each with its report written.
        if cycle_count(state) < before + 2 + orphans:
            return False
        now = audit(state)
        return now.orphan_captures == 0 and now.reports >= reports_before + 1 + orphans

    reports_before = audit(state).reports
    wait_for(settled, 60, "the orphans recovered and a stop after the kills", proc)
    assert terminate(proc) == 0, log_path.read_text()[-3000:]
    final = audit(state)
    total_lost += lost(seen, final)
    log = log_path.read_text()
    with sqlite3.connect(state / "history.sqlite") as conn:
        (recovered,) = conn.execute(
            "SELECT count(*) FROM cycles WHERE trigger = 'recovered'"
        ).fetchone()
    assert final.problems == []
    assert len(final.cycles) >= before + 2
    assert "Traceback" not in log
    # Each capture a kill left unrecorded is recorded once, at the next start.
    assert final.orphan_captures == 0
    assert recovered >= orphans
    assert orphans == 0 or "event=orphan_captures" in log

    fault(f"kill -9 of the daemon mid-cycle/write ({ROUNDS} rounds)", records_lost=total_lost)
    record(
        "kill -9 rounds",
        "cycles recorded after each kill",
        " ".join(map(str, counts)),
        f"orphan captures {orphans} before the clean run, {final.orphan_captures} after"
        f" ({recovered} recorded as 'recovered'); orphan reports {final.orphan_reports},"
        f" stale .tmp {len(final.stale_tmp)} (after the last kill {stale})",
    )
    assert total_lost == 0


def _connects(log_path: Path) -> int:
    """How many times a daemon writing to `log_path` has connected to its controller."""
    if not log_path.exists():
        return 0
    return log_path.read_text(errors="replace").count("event=connected")
