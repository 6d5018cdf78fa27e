"""agent.service.pool.LazyPool's stop without waiting (SIGTERM during a fit): the fit's worker is
terminated, and when the pool's manager thread is still closing as the interpreter exits,
concurrent.futures' atexit hook no longer writes to its closed wake-up pipe (CPython 3.11: a
"Bad file descriptor" traceback in the journal of a clean stop, seen in CI under load)."""

from __future__ import annotations

import concurrent.futures.process
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agent.service import pool as pool_module
from agent.service.pool import LazyPool
from tests.support.processes import exited


def test_a_manager_still_closing_is_kept_from_the_atexit_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = LazyPool(max_workers=1)
    assert pool.submit(abs, -1).result(timeout=30) == 1  # the workers are up
    future = pool.submit(time.sleep, 30)
    manager = pool._pool._executor_manager_thread  # type: ignore[union-attr]
    assert manager in concurrent.futures.process._threads_wakeups
    pool_module.MANAGER_JOIN_S = 0.0  # as if the machine were too loaded to wait
    try:
        pool.shutdown(wait=False, cancel_futures=True)
    finally:
        pool_module.MANAGER_JOIN_S = 2.0
    assert manager not in concurrent.futures.process._threads_wakeups or not manager.is_alive()
    manager.join(timeout=30)
    assert not manager.is_alive() and future.done()


def test_an_interpreter_that_stops_the_pool_during_a_fit_exits_without_a_traceback() -> None:
    script = textwrap.dedent(
        """
        import time
        from agent.service import pool as p
        p.MANAGER_JOIN_S = 0.0
        lazy = p.LazyPool(max_workers=1)
        lazy.submit(abs, -1).result(timeout=30)
        lazy.submit(time.sleep, 30)
        lazy.shutdown(wait=False, cancel_futures=True)
        """
    )
    for _ in range(3):  # the race is timing-dependent: a few exits, each must be clean
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr


def test_the_workers_and_the_resource_tracker_end_when_the_daemon_is_killed() -> None:
    """kill -9 of a daemon outside systemd's cgroup (a shell, cron) must not leave its fit
    workers behind: each holds its own call queue's write end and would wait forever."""
    script = textwrap.dedent(
        """
        import json, os, sys, time
        from multiprocessing import resource_tracker
        from agent.service.pool import LazyPool
        lazy = LazyPool(max_workers=2)
        futures = [lazy.submit(time.sleep, 0.5) for _ in range(2)]
        for f in futures:
            f.result(timeout=60)
        workers = list(lazy._pool._processes)
        print(json.dumps({"workers": workers, "tracker": resource_tracker._resource_tracker._pid}))
        sys.stdout.flush()
        time.sleep(600)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait(30)
    pids = [*started["workers"], started["tracker"]]
    assert len(started["workers"]) >= 1 and all(isinstance(p, int) for p in pids), started
    deadline = time.monotonic() + 60.0  # a bound for a loaded machine, not the figure judged
    while not all(exited(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if not exited(p)]
    for pid in left:  # never leave them to the rest of the suite
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"still running after the daemon was killed: {left} of {started}"
