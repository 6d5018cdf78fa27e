"""The agent's service loop: stop -> interlocks -> cycle -> analysis -> history -> report.

asyncio, one task per configured controller. Motion runs on the event loop (the interlock watcher
must never be late); estimation runs in a process pool so a slow fit never delays a stop command.
This is the foundation's minimal daemon; the production service (systemd notify, triggers,
control socket, publishing) builds on it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import logging
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from agent.calibration_sweep import (
    cache_key,
    cache_path,
    calibration_from_points,
    fit_settings,
    load_cached,
    sweep_point,
)
from agent.capture import Capture
from agent.capture_io import save_capture
from agent.config import Config, ControllerSettings, JointSettings
from agent.cycles import backlash_cycle, run_guarded_cycle
from agent.errors import AgentError, CycleAborted, InterlockError
from agent.estimation.backlash import fit_backlash
from agent.estimation.calibration import BacklashCalibration, fit_calibration
from agent.estimation.results import BacklashResult
from agent.health import assess_backlash
from agent.report import JointReport, Report, joint_report, report_dir, summary_table, write_report
from agent.store import HistoryStore, estimates_for
from drivers.base import (
    BacklashCycle,
    ControllerMode,
    ControllerStatus,
    Driver,
    load_driver_class,
)

log = logging.getLogger("jha.daemon")

EX_NO_STOP = 75  # EX_TEMPFAIL: --once saw no production stop in time
EX_NO_CONTROLLER = 74  # EX_IOERR: --once could not connect to the controller in time


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%S_%fZ")


def analyze_backlash_capture(
    capture: Capture, joint: JointSettings, calibration: BacklashCalibration | None
) -> BacklashResult:
    """Process-pool entry point: one fit, pure."""
    return fit_backlash(capture, fit_settings(joint), calibration)


@dataclass
class _JointJob:
    controller: ControllerSettings
    joint: JointSettings
    cycle: BacklashCycle
    started_at: dt.datetime
    capture_path: Path | None = None
    error: str | None = None
    outcome: str = "ok"
    result: BacklashResult | None = None
    analysis: asyncio.Future[BacklashResult] | None = None


@dataclass
class Agent:
    config: Config
    once: bool = False
    wait_for_stop_s: float = 60.0
    out: TextIO | None = None
    # Factory for the driver of a controller (tests pass one to reach the driver instance).
    driver_factory: Callable[[ControllerSettings], Driver] | None = None
    drivers: dict[str, Driver] = field(default_factory=dict)
    reports: list[Path] = field(default_factory=list)

    @property
    def state_dir(self) -> Path:
        return Path(self.config.agent.state_dir)

    def _make_driver(self, ctrl: ControllerSettings) -> Driver:
        if self.driver_factory is not None:
            return self.driver_factory(ctrl)
        cls = load_driver_class(ctrl.driver)
        return cls(ctrl.name, ctrl.settings, ctrl.joints)

    async def run(self) -> int:
        """Run until stopped (or one pass with --once); returns the process exit code."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
            self._pool = pool
            self._calibrations: dict[str, asyncio.Future[BacklashCalibration | None]] = {}
            codes = await asyncio.gather(
                *(self._controller_task(c) for c in self.config.controllers)
            )
        return max(codes, default=0)

    async def _controller_task(self, ctrl: ControllerSettings) -> int:
        driver = self._make_driver(ctrl)
        self.drivers[ctrl.name] = driver
        if not await self._connect(driver, ctrl):
            return EX_NO_CONTROLLER
        try:
            while True:
                if not await self._wait_for_stop(driver, ctrl):
                    if self.once:
                        log.error(
                            "event=no_production_stop controller=%s waited_s=%.0f",
                            ctrl.name,
                            self.wait_for_stop_s,
                        )
                        return EX_NO_STOP
                    continue
                jobs = await self._run_stop(driver, ctrl)
                self._write_report(ctrl, jobs)
                if self.once:
                    return 0
                await self._wait_for_production(driver, ctrl)
        finally:
            await driver.close()

    async def _connect(self, driver: Driver, ctrl: ControllerSettings) -> bool:
        """Connect, retrying with backoff: a controller that is off at start-up comes later.

        With --once the retries end with the wait for the production stop.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_for_stop_s
        backoff_s = 0.5
        while True:
            try:
                await driver.connect()
            except Exception as exc:  # any driver failure: log it, wait, try again
                log.warning(
                    "event=connect_failed controller=%s error=%r retry_s=%.1f",
                    ctrl.name,
                    str(exc),
                    backoff_s,
                )
                if self.once and loop.time() + backoff_s > deadline:
                    log.error("event=controller_unreachable controller=%s", ctrl.name)
                    return False
                await asyncio.sleep(backoff_s)
                backoff_s = min(30.0, backoff_s * 2)
                continue
            log.info("event=connected controller=%s driver=%s", ctrl.name, ctrl.driver)
            return True

    async def _status_or_none(
        self, driver: Driver, ctrl: ControllerSettings
    ) -> ControllerStatus | None:
        """A status read while idle; a dead link is logged and retried, never fatal."""
        try:
            return await driver.read_status()
        except Exception as exc:  # the controller may be away for a while: keep waiting
            log.warning("event=status_unavailable controller=%s error=%r", ctrl.name, str(exc))
            return None

    async def _wait_for_stop(self, driver: Driver, ctrl: ControllerSettings) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_for_stop_s
        backoff_s = 0.2
        while loop.time() < deadline:
            status = await self._status_or_none(driver, ctrl)
            if status is not None and status.mode is ControllerMode.STOPPED:
                log.info("event=production_stop controller=%s", ctrl.name)
                return True
            backoff_s = 0.2 if status is not None else min(5.0, backoff_s * 2)
            await asyncio.sleep(backoff_s)
        return False

    async def _wait_for_production(self, driver: Driver, ctrl: ControllerSettings) -> None:
        """After a stop's cycles, wait for production to resume before the next stop counts."""
        while True:
            status = await self._status_or_none(driver, ctrl)
            if status is not None and status.mode is ControllerMode.PRODUCTION:
                return
            await asyncio.sleep(0.5)

    def _calibration(
        self, joint: JointSettings, cycle: BacklashCycle
    ) -> asyncio.Future[BacklashCalibration | None]:
        # Joints with the same model share one sweep (and one cache entry).
        key = (
            f"{joint.calibration.source}:{cache_key(joint, cycle, 1.0)}:{joint.calibration.points}"
        )
        if key not in self._calibrations:
            self._calibrations[key] = asyncio.ensure_future(self._make_calibration(joint, cycle))
        return self._calibrations[key]

    async def _make_calibration(
        self, joint: JointSettings, cycle: BacklashCycle
    ) -> BacklashCalibration | None:
        """The joint's delta = f(A), or None when the config gives no calibration."""
        cal = joint.calibration
        if cal.source == "points":
            return fit_calibration(
                [(p.amplitude_rad_s, p.backlash_rad) for p in cal.points], source="points"
            )
        if cal.source != "simulation":
            return None
        path = cache_path(joint, cycle, self.state_dir / "calibration")
        cached = load_cached(path)
        if cached is not None:
            return cached
        log.info(
            "event=calibration_sweep joint=%s points=%d", joint.name, len(cal.sweep_backlash_rad)
        )
        loop = asyncio.get_running_loop()
        points = await asyncio.gather(
            *(
                loop.run_in_executor(self._pool, sweep_point, joint, cycle, delta, 1.0, 101)
                for delta in cal.sweep_backlash_rad
            )
        )
        return calibration_from_points(list(points), path)

    async def _run_stop(self, driver: Driver, ctrl: ControllerSettings) -> list[_JointJob]:
        """Every joint's cycle in turn; each analysis starts as soon as its capture is in."""
        loop = asyncio.get_running_loop()
        jobs = []
        for joint in ctrl.joints:
            cycle = backlash_cycle(ctrl, joint)
            job = _JointJob(ctrl, joint, cycle, _utcnow())
            jobs.append(job)
            try:
                capture = await run_guarded_cycle(driver, cycle, ctrl.interlocks, joint)
            except InterlockError as exc:
                job.outcome, job.error = "rejected", f"interlock: {exc}"
                log.warning(
                    "event=cycle_refused controller=%s joint=%s reason=%r",
                    ctrl.name,
                    joint.name,
                    str(exc),
                )
                continue
            except CycleAborted as exc:
                job.outcome, job.error = "aborted", str(exc)
                continue
            job.capture_path = (
                self.state_dir
                / "captures"
                / ctrl.name
                / joint.name
                / f"{_stamp(job.started_at)}.npz"
            )
            save_capture(capture, job.capture_path)
            log.info(
                "event=captured controller=%s joint=%s samples=%d path=%s",
                ctrl.name,
                joint.name,
                len(capture),
                job.capture_path,
            )
            # Asked for only now: a refused or aborted cycle must not start a sweep for nothing.
            calibration = self._calibration(joint, cycle)
            job.analysis = asyncio.ensure_future(self._analyze(capture, joint, calibration, loop))
        for job in jobs:
            if job.analysis is None:
                self._record(job)
                continue
            try:
                job.result = await job.analysis
            except AgentError as exc:
                job.outcome, job.error = "error", str(exc)
            except Exception as exc:  # a bug or a dead worker must not take the daemon down
                log.exception(
                    "event=analysis_failed controller=%s joint=%s", ctrl.name, job.joint.name
                )
                job.outcome, job.error = "error", f"analysis failed: {type(exc).__name__}: {exc}"
            self._record(job)
        return jobs

    async def _analyze(
        self,
        capture: Capture,
        joint: JointSettings,
        calibration: asyncio.Future[BacklashCalibration | None],
        loop: asyncio.AbstractEventLoop,
    ) -> BacklashResult:
        cal = await calibration
        return await loop.run_in_executor(self._pool, analyze_backlash_capture, capture, joint, cal)

    def _record(self, job: _JointJob) -> None:
        with HistoryStore(self.state_dir / "history.sqlite") as store:
            kind = job.cycle.kind
            if job.result is None:
                store.record_rejected(
                    controller=job.controller.name,
                    joint=job.joint.name,
                    kind=kind,
                    started_at=job.started_at,
                    finished_at=_utcnow(),
                    reason=job.error or "",
                    outcome=job.outcome,
                    capture_path=job.capture_path,
                )
                return
            verdict = assess_backlash(job.result, job.joint.thresholds)
            store.record_cycle(
                controller=job.controller.name,
                joint=job.joint.name,
                kind=kind,
                started_at=job.started_at,
                finished_at=_utcnow(),
                estimates=estimates_for(job.result),
                status=str(verdict.status),
                status_reason=verdict.reason,
                capture_path=job.capture_path,
            )
            log.info(
                "event=assessed controller=%s joint=%s amplitude_rad_s=%.4g backlash_rad=%s "
                "status=%s",
                job.controller.name,
                job.joint.name,
                job.result.amplitude_rad_s,
                job.result.backlash_rad,
                verdict.status,
            )

    def _write_report(self, ctrl: ControllerSettings, jobs: list[_JointJob]) -> None:
        from agent.report import indicator_summaries

        created = _utcnow()
        joints: list[JointReport] = []
        with HistoryStore(self.state_dir / "history.sqlite") as store:
            for job in jobs:
                verdict = assess_backlash(job.result, job.joint.thresholds)
                history = store.history(ctrl.name, job.joint.name, verdict.indicator)
                joints.append(
                    joint_report(
                        ctrl.name,
                        job.joint.name,
                        job.result,
                        job.joint.thresholds,
                        history=history,
                        capture_path=None if job.capture_path is None else str(job.capture_path),
                        error=job.error,
                        indicators=indicator_summaries(store, ctrl.name, job.joint.name),
                    )
                )
        report = Report(
            created_at_iso=created.isoformat(), machines=(ctrl.name,), joints=tuple(joints)
        )
        directory = report_dir(self.state_dir, created)
        json_path, html_path = write_report(report, directory)
        self.reports.append(directory)
        log.info("event=report controller=%s json=%s html=%s", ctrl.name, json_path, html_path)
        if self.out is not None:
            self.out.write(summary_table(report) + "\n")
            self.out.write(f"report: {html_path}\n")
            self.out.flush()
