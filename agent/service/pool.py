"""The daemon's process pool: made on the first analysis, given back when idle.

Each spawned worker imports the estimators (scipy, cma): about 130 MB. An idle service holds no
worker; after a stop's analyses the workers stay for `idle_s` (the next stop's cycles often
follow) and are then shut down by reap().
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import contextlib
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
MANAGER_JOIN_S = 2.0  # how long a stop waits for the pool's manager thread to close its pipe


def exit_with_parent() -> None:
    """Pool initializer: the worker ends itself once the daemon that started it is gone.

    A worker blocks on its call queue, whose write end it holds itself (the queue is pickled
    whole into it), so it never sees end-of-file when the daemon dies: after a kill -9 outside
    systemd's cgroup (a `jha run` from a shell or cron) the workers and the resource tracker
    stayed forever, orphaned, 130 MB each. PR_SET_PDEATHSIG is no remedy: it follows the thread
    that spawned the worker (any thread that submitted), not the process. The spawned worker's
    parent sentinel (a pipe the daemon holds open) wakes the watch when the daemon is gone; it
    waits on no clock (a polling sleep failed with EINVAL under libfaketime's clock steps).
    """
    parent = multiprocessing.parent_process()
    if parent is None:  # not a spawned child: nothing to watch
        return

    def watch() -> None:
        parent.join()
        os._exit(0)  # nothing of a fit is worth keeping without the daemon that asked for it

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class LazyPool(concurrent.futures.Executor):
    def __init__(self, max_workers: int, idle_s: float = 60.0) -> None:
        self.max_workers = max_workers
        self.idle_s = idle_s
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._in_flight = 0
        self._idle_since = time.monotonic()

    @property
    def alive(self) -> bool:
        return self._pool is not None

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=self.max_workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=exit_with_parent,
                )
            self._in_flight += 1
            future = self._pool.submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle_since = time.monotonic()

    def reap(self) -> bool:
        """Shut the workers down when nothing ran for idle_s; True when it did."""
        with self._lock:
            if (
                self._pool is None
                or self._in_flight
                or (time.monotonic() - self._idle_since < self.idle_s)
            ):
                return False
            pool, self._pool = self._pool, None
        pool.shutdown(wait=False)
        return True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        if not wait:
            # A fit can take seconds; on SIGTERM its result is not wanted (its capture is on
            # disk already, and nothing of it was written to the history).
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                with contextlib.suppress(Exception):
                    proc.terminate()
        # Taken before shutdown(), which forgets it.
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        if not wait and isinstance(manager, threading.Thread):
            # Let the pool's manager thread see its terminated workers and close its wake-up
            # pipe now: left running into interpreter exit, it races concurrent.futures'
            # atexit hook, which then writes to the closed pipe (CPython 3.11: a "Bad file
            # descriptor" traceback in the journal of a clean stop). Bounded: the stop has 5 s.
            manager.join(timeout=MANAGER_JOIN_S)
            if manager.is_alive():
                # Still closing (a loaded machine: seen in CI): keep the atexit hook away from
                # its pipe. Interpreter exit still joins the thread, a non-daemon one.
                wakeups = getattr(concurrent.futures.process, "_threads_wakeups", None)
                if wakeups is not None:
                    wakeups.pop(manager, None)
