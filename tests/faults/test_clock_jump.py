"""The wall clock stepped under the running daemon.

`jha run` runs under libfaketime (Debian package `faketime`, scripts/system-deps.sh): the test
writes an offset to FAKETIME_TIMESTAMP_FILE and, with FAKETIME_NO_CACHE=1, the daemon and its
pool workers read the new wall time at once; the monotonic clock is left alone, as an NTP step
or a clock set by hand leaves it. The clock goes back a day, forward a day and three hours, then
back five seconds (report directories are named by the second: those names come round
again). Afterwards: nothing recorded is lost, the trend and latest() keep the order the cycles
ran (agent.history.records.CLOCKED_TRIGGERS), and no report overwrote another.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agent.history.records import CLOCK_STEP_S, Estimate
from agent.history.store import HistoryStore
from agent.report.index import report_dirs
from tests.support.service.faults import (
    audit,
    config,
    cycle_count,
    lost,
    start,
    terminate,
    wait_for,
)
from tests.support.summary import fault, record

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
# One joint, a 0.5 s cycle in each 1.4 s stop, a stop every 1.6 s: room for the capture's
# physics and a move back after an abort on a loaded machine, still about a report a second.
# Stops long enough for a cycle on a loaded machine: a cycle that outlives its stop is aborted
# (production resumed), saves no capture, and this test is about the clock, not about load.
STOPS = [{"at_s": 0.2 + 3.2 * k, "length_s": 3.0} for k in range(200)]
# Wall-clock offsets from the real time, in seconds, and the cycles to run under each; the
# first step comes once a cycle is recorded at the real time.
PHASES = [(-86400, 1), (10800, 1), (10795, 1)]
# Generous: with both cores busy a paced cycle can overrun and be aborted (rightly) before one
# completes; the next stop's cycle then brings the capture. Waiting longer asserts the same.
WAIT_S = 120.0


def _faketime_env(offset_file: Path) -> dict[str, str]:
    assert LIBFAKETIME.exists(), (
        f"{LIBFAKETIME} is missing: install the Debian package faketime (scripts/system-deps.sh)"
    )
    return {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_NO_CACHE": "1",
        # The daemon's periods, timeouts and interlock deadlines run on the monotonic clock,
        # which no wall-clock step moves.
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def _captures(state: Path) -> int:
    return sum(1 for p in state.glob("captures/*/*/*.npz") if not p.name.startswith("."))


def _rows(state: Path) -> list[tuple[int, str, str, str]]:
    """(id, started_at, seq_at, trigger) of every cycle, in the order recorded."""
    with contextlib.closing(sqlite3.connect(state / "history.sqlite")) as conn:
        return conn.execute(
            "SELECT id, started_at, seq_at, trigger FROM cycles ORDER BY id"
        ).fetchall()


def test_the_wall_clock_stepped_back_and_forward_under_the_daemon(tmp_path: Path) -> None:
    state = tmp_path / "state"
    cfg = config(tmp_path / "agent.yaml", state, STOPS, joints=1)
    offset_file = tmp_path / "faketime"
    offset_file.write_text("+0\n")
    log_path = tmp_path / "daemon.log"
    t_start = datetime.now(UTC)
    proc = start(cfg, log_path, env=_faketime_env(offset_file))
    seen: dict[int, tuple[object, ...]] = {}
    records_lost = 0
    try:
        wait_for(lambda: cycle_count(state) >= 1, WAIT_S, "a cycle recorded at the real time", proc)
        for offset_s, cycles in PHASES:
            offset_file.write_text(f"{offset_s:+d}\n")
            # Captures are saved as each cycle ends (records follow after the fit): one more
            # than asked for, as the cycle under way at the step began before it.
            target = _captures(state) + cycles + 1
            wait_for(
                lambda t=target: _captures(state) >= t, WAIT_S, f"cycles at {offset_s} s", proc
            )
            now = audit(state)
            records_lost += lost(seen, now)
            seen = now.cycles
        done = _captures(state)
        wait_for(
            lambda: cycle_count(state) >= done and audit(state).reports >= done,
            WAIT_S,
            "every capture recorded and reported",
            proc,
        )
        assert proc.poll() is None, "the daemon exited"
        code = terminate(proc)
    finally:
        if proc.poll() is None:
            terminate(proc)
    final = audit(state)
    records_lost += lost(seen, final)
    log = log_path.read_text()

    rows = _rows(state)
    with contextlib.closing(sqlite3.connect(state / "history.sqlite")) as conn:
        reports = conn.execute("SELECT message_id, path FROM reports").fetchall()
    # The steps did reach the daemon: cycles were timed a day early, and three hours late.
    offsets_s = [(datetime.fromisoformat(r[1]) - t_start).total_seconds() for r in rows]
    assert min(offsets_s) < -86000 and max(offsets_s) > 10700, offsets_s

    with HistoryStore(state / "history.sqlite") as store:
        trend_ids = [c.id for c in reversed(store.cycles(limit=1000)) if c.outcome == "ok"]
        trend = store.history("robot", "j1", "amplitude_rad_s")
        order_ids = [c.id for c in reversed(store.cycles(limit=1000))]
        latest = store.latest("robot", "j1")
    started = {r[0]: r[1] for r in rows}
    assert [p.time_iso for p in trend] == [started[i] for i in trend_ids]
    # Every cycle recorded before the first one of the day-earlier clock sorts before every
    # cycle of that day-earlier clock, in the trend as in latest(): the step back does not
    # put the newest cycles first. (By started_at alone they would sort a day too early.)
    back = [r[0] for r in rows if (datetime.fromisoformat(r[1]) - t_start).total_seconds() < -86000]
    earlier = [i for i in order_ids if i < back[0]]
    position = {i: k for k, i in enumerate(order_ids)}
    assert max(position[i] for i in earlier) < min(position[i] for i in back), order_ids
    assert latest is not None and latest.id in order_ids[-2:]  # ties go by the order recorded

    # No report overwrote another: one directory per report, each holding its own message id.
    paths = [p for _, p in reports]
    on_disk = [d for d in report_dirs(state / "reports") if (d / "report.json").exists()]
    assert len(set(paths)) == len(paths) == len(on_disk)  # reports/latest is only a link
    for message_id, path in reports:
        assert json.loads(Path(path).read_text())["message_id"] == message_id
    suffixed = sum(1 for p in paths if "-" in Path(p).parent.name)

    fault(
        "wall clock stepped -1 d, +1 d 3 h, -5 s under `jha run`",
        records_lost=records_lost + len(final.problems),
    )
    record(
        "clock jumps",
        "daemon under libfaketime",
        f"{len(rows)} cycles, {len(reports)} reports",
        f"report names taken twice and suffixed: {suffixed}",
    )
    assert records_lost == 0 and final.problems == [], final.problems
    assert code == 0
    assert "Traceback" not in log, log[-3000:]


T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def test_the_history_keeps_the_order_cycles_ran_when_the_clock_was_stepped_back(
    tmp_path: Path,
) -> None:
    """The store alone: the daemon's cycles sort in the order recorded through a step back;
    a cycle recorded by hand with its own (earlier) time still sorts by that time."""
    with HistoryStore(tmp_path / "history.sqlite") as store:

        def cycle(at: datetime, value: float, trigger: str) -> int:
            return store.record_cycle(
                controller="robot",
                joint="j1",
                kind="backlash",
                started_at=at,
                finished_at=None,
                estimates=[Estimate("backlash_rad", value, "rad")],
                trigger=trigger,
            )

        a = cycle(T0, 1.0, "production_stop")
        b = cycle(T0 + timedelta(hours=1), 2.0, "schedule")
        c = cycle(T0 - timedelta(days=1), 3.0, "production_stop")  # the clock went back a day
        d = cycle(T0 - timedelta(days=1, minutes=-5), 4.0, "on_demand")
        e = cycle(T0 - timedelta(days=3), 0.5, "manual")  # an old measurement, typed in
        latest_after_step = store.latest("robot", "j1", outcome="ok")
        # The clock has caught up: g ran, then h's fit (started 30 s before g) finished last.
        g = cycle(T0 + timedelta(hours=2), 5.0, "production_stop")
        h = cycle(T0 + timedelta(hours=2, seconds=-30), 6.0, "production_stop")
        values = [p.value for p in store.history("robot", "j1", "backlash_rad")]
        latest = store.latest("robot", "j1", outcome="ok")
        newest_first = [r.id for r in store.cycles()]
    assert latest_after_step is not None and latest_after_step.id == d
    assert values == [0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 5.0]
    assert latest is not None and latest.id == g
    assert newest_first == [g, h, d, c, b, a, e]
    assert CLOCK_STEP_S < 30 * 60  # a step smaller than this is taken as out-of-order fits


def test_report_directories_claimed_at_once_for_one_second_are_all_distinct(
    tmp_path: Path,
) -> None:
    """agent.report.write.new_report_dir: eight writers claiming the same second at the same moment
    (two pool workers, or one second lived twice after a step back) each get their own."""
    from concurrent.futures import ThreadPoolExecutor

    from agent.report.write import new_report_dir

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: new_report_dir(tmp_path, T0), range(8)))
    assert len(set(got)) == 8
    assert sorted(p.name for p in got) == sorted(
        ["20260310T120000Z"] + [f"20260310T120000Z-{n}" for n in range(1, 8)]
    )
