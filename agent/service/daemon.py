"""The agent's service: controllers watched, cycles run in production stops, results published.

asyncio, one task per configured controller (agent.service.runner). Motion runs on the event
loop (the interlock watcher must never be late); estimation runs in a process pool made on first
use, and every file or database write in a thread, so the systemd watchdog is pinged on time.
This module holds the supervisor: systemd notifications, signals (SIGTERM/SIGINT stop, SIGHUP
reload), the controllers' runners and the report of each stop; the answers on the control
socket are agent.service.control_requests, the publishers agent.service.publishers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from agent.config.file_findings import file_findings
from agent.config.load import load_config
from agent.config.model import Config, ControllerSettings
from agent.errors import EX_CANTCREAT, ConfigError
from agent.kinds.base import AnalysisContext, JointJob, KindHandler
from agent.kinds.identification.kind import ALL_JOINTS
from agent.kinds.registry import all_kinds
from agent.logfmt import kv
from agent.sd_notify import Notifier
from agent.service.control_requests import answer_request
from agent.service.control_socket import ControlServer, socket_path
from agent.service.instance_lock import hold_state_dir
from agent.service.loop_errors import OncePerMinute
from agent.service.motion_intents import record_interrupted
from agent.service.pool import LazyPool
from agent.service.publishers import Publishers, publishers_to_start
from agent.service.recording import record_and_report
from agent.service.recovery import Orphan, find_orphans, recover
from agent.service.retention import prune_and_index
from agent.service.runner import (
    ControllerRunner,
    RunnerEnv,
)
from drivers.base import CycleKind, Driver, load_driver_class

if TYPE_CHECKING:
    from agent.publish.base import HealthPublisher
    from agent.report.model import Report

log = logging.getLogger(__name__)

POOL_WORKERS = 2


class AgentState(enum.StrEnum):
    """The daemon's own state (`jha status`, systemd's STATUS= outside `running`)."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"


@dataclass
class Agent:
    config: Config
    once: bool = False
    wait_for_stop_s: float = 60.0
    out: TextIO | None = None
    # Factory for the driver of a controller (tests pass one to reach the driver instance).
    driver_factory: Callable[[ControllerSettings], Driver] | None = None
    dry_run: bool = False
    notifier: Notifier = field(default_factory=lambda: Notifier({}))
    handle_signals: bool = False  # the CLI installs SIGTERM/SIGINT/SIGHUP handlers
    serve_control: bool | None = None  # default: in service mode, not with --once
    # None: the config's publishers (agent.publish.factory); tests pass their own.
    publishers: list[HealthPublisher] | None = None
    drivers: dict[str, Driver] = field(default_factory=dict)
    reports: list[Path] = field(default_factory=list)
    runners: dict[str, ControllerRunner] = field(default_factory=dict)
    state: AgentState = AgentState.STARTING
    pool_idle_s: float = 60.0  # analysis workers are shut down after this long unused
    pool_workers: int = POOL_WORKERS
    _executor: LazyPool = field(init=False, repr=False)
    _stop: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    @property
    def state_dir(self) -> Path:
        return Path(self.config.agent.state_dir)

    def _make_driver(self, ctrl: ControllerSettings) -> Driver:
        if self.driver_factory is not None:
            return self.driver_factory(ctrl)
        cls = load_driver_class(ctrl.driver)
        return cls(ctrl.name, ctrl.settings, ctrl.joints)

    # -- the process pool: made on first use, so an idle daemon has no workers ---------------

    def _pool(self) -> concurrent.futures.Executor:
        return self._executor

    async def _reap_pool(self) -> None:
        while True:
            await asyncio.sleep(min(10.0, self.pool_idle_s / 2))
            if self._executor.reap():
                log.info(kv("pool_released", idle_s=self.pool_idle_s))

    # -- main --------------------------------------------------------------------------------

    async def run(self) -> int:
        """Run until stopped (or one pass with --once); returns the process exit code."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Before anything else in the state directory: a second agent leaves it untouched.
        lock = hold_state_dir(self.state_dir)
        try:
            return await self._run()
        finally:
            lock.release()

    async def _run(self) -> int:
        self._executor = LazyPool(self.pool_workers, self.pool_idle_s)
        self._background: set[asyncio.Task[Any]] = set()
        self._kinds: dict[str, KindHandler] = all_kinds()
        self._analysis = AnalysisContext(self.state_dir, self._pool)
        self._control: ControlServer | None = None
        self._publishers = Publishers()
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(OncePerMinute())
        clean = False
        try:
            await self._start_publishers()
            if self.serve_control if self.serve_control is not None else not self.once:
                await self._start_control()
            if self.handle_signals:
                loop.add_signal_handler(signal.SIGTERM, self.request_stop, "SIGTERM")
                loop.add_signal_handler(signal.SIGINT, self.request_stop, "SIGINT")
                loop.add_signal_handler(signal.SIGHUP, self.request_reload)
            self._warn_interlocks()
            # Listed before any runner can save a capture of this run; analysed afterwards.
            # Motions a crash cut off are recorded before any runner may move.
            orphans = await self._find_orphans()
            for ctrl in self.config.controllers:
                self._start_runner(ctrl)
            recovery = self._spawn(self._recover(orphans), "recovery") if orphans else None
            self._spawn(self.notifier.watchdog_loop(), "watchdog")
            self._spawn(self._reap_pool(), "pool reaper")
            self.state = AgentState.RUNNING
            self.notifier.ready()
            self._update_status()
            log.info(
                kv(
                    "ready",
                    controllers=len(self.config.controllers),
                    once=self.once,
                    dry_run=self.dry_run,
                    watchdog_s=self.notifier.watchdog_s,
                )
            )
            if self.once:
                codes = await asyncio.gather(
                    *(r.task for r in self.runners.values() if r.task is not None)
                )
                # --once after a crash ends when every orphan is taken up, not at the first:
                # one not recorded makes the pass fail (73) as a cycle not recorded does.
                if recovery is not None and await recovery:
                    codes.append(EX_CANTCREAT)
                clean = True
                return max(codes, default=0)
            await self._stop.wait()
            clean = True
            return 0
        finally:
            self.state = AgentState.STOPPING
            self.notifier.stopping()
            self.notifier.status(AgentState.STOPPING)
            await self._shutdown(clean)
            if self.handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    loop.remove_signal_handler(sig)

    async def _shutdown(self, clean: bool) -> None:
        tasks = [r.task for r in self.runners.values() if r.task is not None]
        tasks += list(self._background)
        for task in tasks:
            task.cancel()  # a running cycle stops its motion through the driver on the way out
        await asyncio.gather(*tasks, return_exceptions=True)
        for future in self._analysis.cache.values():
            if isinstance(future, asyncio.Future):
                future.cancel()
        if self._control is not None:
            await self._control.close()
        await self._publishers.close()
        # Only --once waits (its work is done by now); a stopping service must exit within
        # 5 s, so a fit still running is terminated (its capture is on disk already).
        self._executor.shutdown(wait=clean and self.once, cancel_futures=True)
        log.info(kv("stopped"))

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def request_stop(self, why: str = "request") -> None:
        if not self._stop.is_set():
            log.info(kv("stopping", signal=why))
            self.state = AgentState.STOPPING
            self.notifier.stopping()
            self._stop.set()
            if self.once:  # --once has no stop event to wait on: end the runners directly
                for r in self.runners.values():
                    if r.task is not None:
                        r.task.cancel()

    def _warn_interlocks(self) -> None:
        """Each interlock rule that is off, in the log at every start (G9 of docs/safety.md)."""
        from agent.config.warnings import interlock_warnings

        for w in interlock_warnings(self.config):
            log.warning(
                kv(
                    "interlock_off",
                    field=w.path,
                    where=f"{w.file}:{w.line}",
                    note=w.message.removeprefix("warning: "),
                )
            )

    # -- captures a crash left without a record (agent.service.recovery) ----------------------

    async def _find_orphans(self) -> list[Orphan]:
        try:
            orphans = await asyncio.to_thread(find_orphans, self.state_dir)
        except Exception as exc:  # an unreadable history or captures dir must not stop the start
            log.error(kv("orphan_scan_failed", error=f"{type(exc).__name__}: {exc}"))
            return []
        if orphans:
            log.warning(kv("orphan_captures", count=len(orphans), note="recorded as 'recovered'"))
        try:  # after find_orphans: a capture whose write was cut short has its name back
            await asyncio.to_thread(record_interrupted, self.state_dir)
        except Exception as exc:  # the intents stay for the next start; this one goes on
            log.error(kv("interrupted_motions_not_recorded", error=f"{type(exc).__name__}: {exc}"))
        return orphans

    async def _recover(self, orphans: list[Orphan]) -> int:
        """How many orphans could not be recorded (all of them when recovery itself failed)."""
        try:
            return await recover(
                self.config,
                orphans,
                self._kinds[CycleKind.BACKLASH],
                self._analysis,
                self._report_jobs,
                asyncio.to_thread,
            )
        except Exception:  # a bug here must not take the daemon down; the rest waits a restart
            log.exception(kv("recovery_failed"))
            return len(orphans)

    # -- controllers -------------------------------------------------------------------------

    def _start_runner(self, ctrl: ControllerSettings) -> ControllerRunner:
        env = RunnerEnv(
            state_dir=self.state_dir,
            kinds=self._kinds,
            analysis=self._analysis,
            make_driver=self._make_driver,
            on_driver=self.drivers.__setitem__,
            on_state=self._update_status,
            on_jobs=self._report_jobs,
            once=self.once,
            dry_run=self.dry_run,
            wait_for_stop_s=self.wait_for_stop_s,
            poll_s=self.config.agent.poll_s,
            reserve_bytes=round(self.config.agent.disk_reserve_mb * 1e6),
        )
        runner = ControllerRunner(ctrl, env)
        self.runners[ctrl.name] = runner
        runner.start()
        return runner

    def status_text(self) -> str:
        if self.state != AgentState.RUNNING:
            return self.state
        parts = [f"{name}: {r.state}" for name, r in self.runners.items()]
        return "; ".join(parts) or "no controllers"

    def _update_status(self) -> None:
        if self.state == AgentState.RUNNING:
            self.notifier.status(self.status_text())

    # -- reports and publishing --------------------------------------------------------------

    async def _report_jobs(self, ctrl: ControllerSettings, jobs: list[JointJob]) -> None:
        """Record a stop's jobs and write its report, in the pool: the history's verdicts and
        the report's trends need scipy, which the daemon's own process does without."""
        loop = asyncio.get_running_loop()
        written = await loop.run_in_executor(
            self._pool(),
            record_and_report,
            self.state_dir,
            ctrl.name,
            jobs,
            bool(self._publishers),
        )
        self.reports.append(written.json_path.parent)
        log.info(kv("report", controller=ctrl.name, json=written.json_path, html=written.html_path))
        if self.out is not None:
            self.out.write(written.table + "\n")
            self.out.write(f"report: {written.html_path}\n")
            self.out.flush()
        await self._retention()
        if written.report is not None:
            await self._publish(written.report)

    async def _retention(self) -> None:
        """Prune captures and reports to the retention budget and rewrite the reports index
        (in a thread: file-system work), logged; a failure is logged and the agent goes on."""
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(
                None, prune_and_index, self.state_dir, self.config.agent.retention
            )
        except Exception as exc:  # retention must never take the daemon down
            log.error(kv("retention_failed", error=str(exc)))
            return
        if result.deleted or result.over_budget:
            # over budget with only protected files left: someone must look at the disk
            (log.warning if result.over_budget else log.info)(result.to_log())

    async def _start_publishers(self) -> None:
        self.publishers = publishers_to_start(self.publishers, self.config.publish, self.state_dir)
        for pub in self.publishers:  # the metrics endpoint reports the watchdog's lateness
            pub.watch_watchdog(self.notifier)
        await self._publishers.start(self.publishers)

    async def _publish(self, report: Report) -> None:
        await self._publishers.publish(report)

    # -- the control socket ------------------------------------------------------------------

    async def _start_control(self) -> None:
        path = socket_path(self.state_dir, self.config.agent.control_socket)
        server = ControlServer(path, self.handle_request)
        try:
            await server.start()
        except OSError as exc:  # e.g. a path too long for a unix socket: run without it
            log.error(kv("control_socket_failed", path=path, error=str(exc)))
            return
        self._control = server

    async def handle_request(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to one control-socket request (agent.service.control_requests)."""
        return answer_request(request, self._status_reply, self.runners)

    def _status_reply(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "status": self.status_text(),
            "dry_run": self.dry_run,
            "config": self.config.source,
        }

    # -- reload (SIGHUP) ---------------------------------------------------------------------

    def request_reload(self) -> None:
        self._spawn(self.reload(), "reload")

    async def reload(self) -> bool:
        """Re-read the config file: a broken one is refused (the old one stays); a good one
        replaces the controllers that changed, each at its next idle point."""
        self.notifier.reloading()
        source = self.config.source
        try:
            new = await asyncio.to_thread(load_config, source)
            # A password file others may read is refused as a broken file is.
            errors, _ = await asyncio.to_thread(file_findings, new, source)
            problem = "; ".join(map(str, errors))
        except (ConfigError, OSError) as exc:
            problem = str(exc)
        if problem:  # the running config stays
            log.error(kv("reload_rejected", config=source, issues=problem))
            self.notifier.ready()
            return False
        old = {c.name: c for c in self.config.controllers}
        fresh = {c.name: c for c in new.controllers}
        for ignored in ("agent", "publish"):
            if getattr(new, ignored) != getattr(self.config, ignored):
                log.warning(
                    kv("reload_partial", section=ignored, note="takes effect after a restart")
                )
        # Those two sections stay as started: the state directory this process holds locked,
        # the publishers it runs.
        self.config = dataclasses.replace(new, agent=self.config.agent, publish=self.config.publish)
        changed = [n for n in old if n not in fresh or old[n] != fresh[n]]
        added = [n for n in fresh if n not in old]
        self._spawn(self._replace(changed, added, fresh), "reload")
        log.info(
            kv(
                "reloaded",
                config=source,
                changed=",".join(changed) or None,
                added=",".join(added) or None,
            )
        )
        self.notifier.ready()
        self._update_status()
        return True

    async def _replace(
        self, changed: list[str], added: list[str], fresh: dict[str, ControllerSettings]
    ) -> None:
        """Retire the runners of changed and removed controllers, and start any new runner
        only once every retired one is gone: a renamed controller, or one now reaching the
        machine another reached, must never have two runners moving it."""
        retired = {name: self.runners[name] for name in changed if name in self.runners}
        for runner in retired.values():
            runner.retire()  # the cycle under way ends; no other starts
        await asyncio.gather(
            *(r.task for r in retired.values() if r.task is not None), return_exceptions=True
        )
        for name, runner in retired.items():
            if self.runners.get(name) is runner:
                del self.runners[name]
                self.drivers.pop(name, None)
        if not self._stop.is_set():
            for name, runner in retired.items():
                ctrl = fresh.get(name)
                if ctrl is None:
                    continue
                # Cycles still owed to joints that remain are owed by the new configuration.
                started = self._start_runner(ctrl)
                keep = {j.name for j in ctrl.joints}
                if ctrl.identification is not None:
                    keep.add(ALL_JOINTS)  # a queued identification is owed by the new config
                started.queue = runner.queue.keep_only(keep)
            for name in added:
                if name not in self.runners:
                    self._start_runner(fresh[name])
        self._update_status()
