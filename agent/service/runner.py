"""One controller's task: connect, watch the status, queue cycles on triggers, run the ones that
fit in a production stop (guarded by the interlocks), hand captures to analysis, record, report.
How one cycle runs and how a stop's jobs are finished is agent.service.jobs; this module decides
which cycles run and when, and keeps their queue.

Every blocking step (saving captures, SQLite, report rendering) runs in a thread and every fit in
the process pool, so the event loop stays free for the interlock watcher and the watchdog.
A little over 400 lines: the stop loop, its preflight and its plan read best in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.config.model import ControllerSettings, JointSettings
from agent.config.schedule import schedule_of
from agent.errors import EX_CANTCREAT, EX_IOERR, EX_TEMPFAIL
from agent.history.records import Outcome, Trigger
from agent.kinds.base import (
    AnalysisContext,
    JointJob,
    KindHandler,
    utcnow,
)
from agent.kinds.identification.kind import KIND as IDENTIFICATION
from agent.logfmt import kv
from agent.service.exit_codes import once_exit_code
from agent.service.identification import RunnerIdentification
from agent.service.jobs import Finishing, run_job
from agent.service.pose_recovery import return_to_start_pose
from agent.service.preflight import preflight_cycles
from agent.service.queue import CycleQueue, PendingCycle
from agent.service.triggers import ScheduleState, schedule_due, stop_begins, stopped
from drivers.base import Capability, ControllerMode, ControllerStatus, Cycle, CycleKind, Driver

log = logging.getLogger(__name__)

EX_NO_STOP = EX_TEMPFAIL  # --once saw no production stop in time
EX_NO_CONTROLLER = EX_IOERR  # --once could not connect to the controller in time


_ANALYSING_IDLE = "analysing the last stop's captures"


@dataclass
class RunnerEnv:
    """What a controller task gets from the daemon."""

    state_dir: Path
    kinds: dict[str, KindHandler]
    analysis: AnalysisContext
    make_driver: Callable[[ControllerSettings], Driver]
    on_driver: Callable[[str, Driver], None]
    on_state: Callable[[], None]  # the runner's state changed: STATUS= and `jha status`
    on_jobs: Callable[[ControllerSettings, list[JointJob]], Awaitable[None]]  # report + publish
    once: bool = False
    dry_run: bool = False
    wait_for_stop_s: float = 60.0
    poll_s: float = 0.2
    reserve_bytes: int = 50_000_000  # agent.disk_reserve_mb: free space a stop must leave


class ControllerRunner:
    def __init__(self, ctrl: ControllerSettings, env: RunnerEnv) -> None:
        self.ctrl = ctrl
        self.env = env
        self.queue = CycleQueue()
        self.state = "starting"
        self.streaming_only = False
        self.busy = False  # inside a stop's cycles: not an idle point
        self.task: asyncio.Task[int] | None = None
        # Analyses, records and reports of past stops, finishing while the next stop may start.
        self._finishing = Finishing(
            ctrl, env.on_jobs, env.on_state, on_progress=self._analysis_progress
        )
        self._analysis_text = ""
        self._waiting = ""  # the last waiting text, for a progress update of the idle state
        self._retire = False
        self._wake = asyncio.Event()
        self._ran_this_stop = False
        self._once_jobs: list[JointJob] = []  # --once: the stop's jobs, for the exit code
        sched = ctrl.triggers.schedule
        self._schedule = (
            None if sched is None else schedule_of(sched.every_s, sched.cron, sched.window)
        )
        self._schedule_state = ScheduleState()
        self.last_status: ControllerStatus | None = None
        # The whole-robot identification (agent.kinds.identification.kind): its own cadence.
        self._ident = RunnerIdentification(
            ctrl, env.kinds.get(IDENTIFICATION), env.analysis, self._design_done
        )

    # -- for the daemon --------------------------------------------------------------------

    def start(self) -> asyncio.Task[int]:
        self.task = asyncio.create_task(self.run(), name=f"controller {self.ctrl.name}")
        return self.task

    def retire(self) -> None:
        """End at the next idle point or after the cycle under way (a reload changed or
        removed this controller); analyses of its last stop are finished first."""
        self._retire = True
        self._wake.set()

    def enqueue(self, joint: str | None, reason: Trigger) -> list[str]:
        """Queue the cycles of one joint (or all); raises ValueError for an unknown joint."""
        if self.streaming_only:
            raise ValueError(f"controller {self.ctrl.name} runs no test cycles (streaming only)")
        names = [j.name for j in self.ctrl.joints]
        if joint is not None and joint not in names:
            raise ValueError(
                f"controller {self.ctrl.name} has no joint {joint!r} (joints: {', '.join(names)})"
            )
        chosen = [j for j in self.ctrl.joints if joint is None or j.name == joint]
        now_s = time.monotonic()
        kind = self.env.kinds[CycleKind.BACKLASH]
        for order, j in enumerate(self.ctrl.joints):
            if j in chosen:
                needs_s = kind.needs_s(self.ctrl, j)
                self.queue = self.queue.add(
                    PendingCycle(j.name, kind.name, now_s, reason, needs_s, order)
                )
        log.info(kv("queued", controller=self.ctrl.name, joints=",".join(j.name for j in chosen),
                    reason=reason, pending=len(self.queue)))  # fmt: skip
        self._ran_this_stop = False  # a new request may use the stop we are in
        self._wake.set()
        self.env.on_state()
        return [j.name for j in chosen]

    def enqueue_identification(self, reason: Trigger) -> list[str]:
        """Queue the whole-robot identification cycle (its trajectory is designed in the pool
        meanwhile); raises ValueError when this controller cannot run one."""
        pending = self._ident.request(reason, self.streaming_only)
        self.queue = self.queue.add(pending)
        log.info(kv("queued", controller=self.ctrl.name, joints=pending.joint, kind=pending.kind,
                    reason=reason, estimate_s=f"{pending.estimate_s:.3g}",
                    pending=len(self.queue)))  # fmt: skip
        self._ran_this_stop = False
        self._wake.set()
        self.env.on_state()
        return [pending.joint]

    def _design_done(self) -> None:
        # A design that finishes inside a stop may still use it (if it fits what is left).
        self._ran_this_stop = False
        self._wake.set()

    def to_dict(self) -> dict[str, Any]:
        s = self.last_status
        return {
            "state": self.state,
            "driver": self.ctrl.driver,
            "streaming_only": self.streaming_only,
            "mode": None if s is None else s.mode.value,
            "stop_expected_s": None if s is None else s.stop_expected_s,
            **self.queue.to_dict(),
        }

    # -- the task ----------------------------------------------------------------------------

    def _set_state(self, text: str) -> None:
        if text != self.state:
            self.state = text
            self.env.on_state()

    async def run(self) -> int:
        ctrl = self.ctrl
        self._set_state("connecting")
        driver = self.env.make_driver(ctrl)
        self._ident.capabilities = driver.capabilities
        self.env.on_driver(ctrl.name, driver)
        try:
            if not await self._connect(driver):
                return EX_NO_CONTROLLER
            await self._ident.seed(driver.capabilities, self.env.state_dir)
            if Capability.CYCLES not in driver.capabilities or not ctrl.joints:
                self.streaming_only = True
                log.info(kv("controller_streaming_only", controller=ctrl.name, driver=ctrl.driver))
                self._set_state("connected, streaming only (no test cycles)")
                while not (self.env.once or self._retire):
                    await self._sleep(3600.0)
                return 0
            code = await self._loop(driver)
            if self._finishing:  # --once and reloads: the last stop's results first
                self._set_state(f"analysing ({self._analysis_text or 'started'})")
                await self._finishing.wait()
            if self.env.once and code == 0:
                return once_exit_code(self._once_jobs, self._finishing.failures)
            return code
        finally:
            await self._finishing.cancel()
            with contextlib.suppress(Exception):
                await driver.close()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, woken early by a new request or a retirement."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()

    async def _connect(self, driver: Driver) -> bool:
        """Connect, retrying with backoff: a controller that is off at start-up comes later.
        With --once the retries end with the wait for the production stop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.env.wait_for_stop_s
        backoff_s = 0.5
        while True:
            try:
                await driver.connect()
            except Exception as exc:  # any driver failure: log it, wait, try again
                log.warning(
                    kv(
                        "connect_failed",
                        controller=self.ctrl.name,
                        error=str(exc),
                        retry_s=backoff_s,
                    )
                )
                if self.env.once and loop.time() + backoff_s > deadline:
                    log.error(kv("controller_unreachable", controller=self.ctrl.name))
                    return False
                self._set_state(f"controller unreachable, retrying in {backoff_s:g} s")
                await self._sleep(backoff_s)
                if self._retire:
                    return False
                backoff_s = min(30.0, backoff_s * 2)
                continue
            log.info(kv("connected", controller=self.ctrl.name, driver=self.ctrl.driver))
            return True

    async def _status_or_none(self, driver: Driver) -> ControllerStatus | None:
        """A status read while idle; a dead link is logged and retried, never fatal."""
        try:
            async with asyncio.timeout(5.0):
                return await driver.read_status()
        except Exception as exc:  # the controller may be away for a while: keep waiting
            log.warning(kv("status_unavailable", controller=self.ctrl.name, error=str(exc)))
            return None

    def _triggers(self, previous: ControllerStatus | None, status: ControllerStatus) -> None:
        trig = self.ctrl.triggers
        if trig.production_stop is not None and stop_begins(
            previous, status, trig.production_stop.min_expected_stop_s
        ):
            log.info(
                kv("production_stop", controller=self.ctrl.name, expected_s=status.stop_expected_s)
            )
            self.enqueue(None, Trigger.PRODUCTION_STOP)
        if self._schedule is not None:
            due, self._schedule_state = schedule_due(
                self._schedule, self._schedule_state, time.monotonic(), dt.datetime.now()
            )
            if due:
                self.enqueue(None, Trigger.SCHEDULE)
        # --once handles one stop with the backlash cycles: it does not wait for a design.
        if not self.env.once and self._ident.due():
            try:
                self.enqueue_identification(Trigger.SCHEDULE)
            except ValueError as exc:
                log.error(kv("identification_not_queued", controller=self.ctrl.name,
                             reason=str(exc)))  # fmt: skip

    async def _loop(self, driver: Driver) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.env.wait_for_stop_s
        if self.env.once:
            self.enqueue(None, Trigger.ONCE)
        previous: ControllerStatus | None = None
        backoff_s = self.env.poll_s
        while True:
            if self._retire:
                return 0
            status = await self._status_or_none(driver)
            if status is not None:
                self.last_status = status
                self._triggers(previous, status)
                if not stopped(status):
                    self._ran_this_stop = False
                previous = status
            if (
                status is not None
                and stopped(status)
                and len(self.queue)
                and not self._ran_this_stop
            ):
                if not self.env.dry_run and await self._return_joints(driver):
                    # A joint an earlier abort left off its test pose was moved back: plan
                    # with what is left of the stop.
                    status = await self._status_or_none(driver) or status
                plan = self._plannable().plan(
                    status.stop_expected_s, self.ctrl.triggers.cycle_margin_s
                )
                if plan:
                    self._ran_this_stop = True
                    if not await self._preflight(plan):
                        if self.env.once:
                            return EX_CANTCREAT
                        continue
                    self.busy = True
                    try:
                        jobs = await self._run_plan(driver, plan)
                    except Exception:  # a bug or a failing disk must not end this controller
                        log.exception(kv("stop_failed", controller=self.ctrl.name))
                        jobs = []
                    finally:
                        self.busy = False
                    if jobs:
                        await self._finishing.hand_over(
                            jobs, lambda: self._set_state("waiting for earlier analyses")
                        )
                    if self.env.once:
                        self._once_jobs = jobs
                        return 0
                    continue
            if self.env.once and loop.time() > deadline:
                log.error(
                    kv(
                        "no_production_stop",
                        controller=self.ctrl.name,
                        waited_s=f"{self.env.wait_for_stop_s:.0f}",
                    )
                )
                return EX_NO_STOP
            self._set_state(self._idle_text(status))
            backoff_s = self.env.poll_s if status is not None else min(5.0, backoff_s * 2)
            await self._sleep(backoff_s)

    async def _preflight(self, plan: tuple[PendingCycle, ...]) -> bool:
        """Whether this stop's captures, records and reports can be saved (before any motion)."""
        cycles = [c for c in (self._cycle_of(p) for p in plan) if c is not None]
        check = await asyncio.to_thread(
            preflight_cycles, self.env.state_dir, cycles, self.env.reserve_bytes
        )
        if check.ok:
            return True
        log.error(kv("preflight_failed", controller=self.ctrl.name, cycles=len(cycles),
                     problems=check.describe()))  # fmt: skip
        self._set_state(f"{len(cycles)} cycle(s) not started: {check.describe()}")
        return False

    async def _return_joints(self, driver: Driver) -> bool:
        """Move the queued joints an earlier abort left off their test poses back (each its
        own guarded motion, agent.service.pose_recovery); True when one was moved."""
        moved = False
        for pending in self.queue.by_wait():
            cycle = self._cycle_of(pending)
            if cycle is None:
                continue
            note = await return_to_start_pose(driver, self.ctrl, cycle)
            if note is not None:
                log.info(kv("pose_before_stop", controller=self.ctrl.name, joint=pending.joint,
                            result=note))  # fmt: skip
                moved = moved or note.startswith("moved")
        return moved

    def _cycle_of(self, pending: PendingCycle) -> Cycle | None:
        joint = next((j for j in self.ctrl.joints if j.name == pending.joint), None)
        if joint is None and pending.kind != IDENTIFICATION:
            return None
        return self.env.kinds[pending.kind].make_cycle(self.env.analysis, self.ctrl, joint)

    def _plannable(self) -> CycleQueue:
        self.queue, plannable = self._ident.plannable(self.queue)
        return plannable

    def _analysis_progress(self, text: str) -> None:
        """From the background analyses: into STATUS= and `jha status` at once."""
        self._analysis_text = text
        if self.state.startswith(_ANALYSING_IDLE):
            self._set_state(self._analysing_idle())
        elif self.state.startswith("analysing"):
            self._set_state(f"analysing ({text})")

    def _analysing_idle(self) -> str:
        done = f" ({self._analysis_text})" if self._analysis_text else ""
        return f"{_ANALYSING_IDLE}{done}; {self._waiting}"

    def _idle_text(self, status: ControllerStatus | None) -> str:
        self._waiting = self._waiting_text(status)
        return self._analysing_idle() if self._finishing else self._waiting

    def _waiting_text(self, status: ControllerStatus | None) -> str:
        pending = len(self.queue)
        if status is None:
            return "controller status unavailable"
        if status.mode is ControllerMode.STOPPED and pending:
            return f"production stopped, {pending} cycle(s) queued that do not fit this stop"
        if pending:
            return f"{pending} cycle(s) queued, waiting for a production stop"
        return f"idle ({status.mode.value})"

    async def _run_plan(self, driver: Driver, plan: tuple[PendingCycle, ...]) -> list[JointJob]:
        """The planned cycles in turn; each analysis starts as soon as its capture is in."""
        ctrl = self.ctrl
        joints = {j.name: j for j in ctrl.joints}
        jobs: list[JointJob] = []
        try:
            for i, pending in enumerate(plan, start=1):
                cycle = self._cycle_of(pending)
                if cycle is None:
                    continue
                deferred = await self._why_not_now(driver, pending, first=i == 1)
                if deferred is not None:
                    if deferred:  # ("": the preflight has logged its own reason)
                        log.info(kv("cycle_deferred", controller=ctrl.name,
                                    joint=pending.joint, reason=deferred))  # fmt: skip
                    break
                self._set_state(f"cycle {pending.joint} {pending.kind} ({i}/{len(plan)})")
                job = await self._run_one(driver, joints.get(pending.joint), pending, cycle)
                jobs.append(job)
                if job.outcome is Outcome.ERROR and job.capture_path is None:
                    # A capture that could not be saved: every further motion of this stop
                    # would be spent for nothing. The rest stays owed.
                    log.error(
                        kv(
                            "stop_ended",
                            controller=ctrl.name,
                            joint=pending.joint,
                            reason=job.error,
                        )
                    )
                    self._set_state(f"stop ended: {job.error}")
                    break
        except BaseException:
            for job in jobs:  # cancelled mid-stop: no analysis is left running behind us
                if job.analysis is not None and not job.analysis.done():
                    job.analysis.cancel()
            raise
        return jobs

    async def _why_not_now(self, driver: Driver, pending: PendingCycle, first: bool) -> str | None:
        """Why the rest of the stop does not move, checked before each of its cycles (None: it
        may; "" when the preflight said why itself)."""
        if self._retire:
            # A reload changed or removed this controller: no further motion under the old
            # config; what is left stays owed (the new runner takes the queue).
            return "the config was reloaded: the new one runs the rest"
        if first:
            return None  # the stop's plan and preflight were made just now
        if not await self._still_fits(driver, pending):
            return "the rest of the stop is too short"
        # The stop's preflight held before the first cycle; another writer may have filled the
        # disk or taken the descriptors since.
        if not await self._preflight((pending,)):
            return ""
        return None

    async def _still_fits(self, driver: Driver, pending: PendingCycle) -> bool:
        status = await self._status_or_none(driver)
        if status is None:
            return True  # the interlock check before motion refuses it with the reason
        self.last_status = status
        return self.queue.fits(pending, status.stop_expected_s, self.ctrl.triggers.cycle_margin_s)

    async def _run_one(
        self, driver: Driver, joint: JointSettings | None, pending: PendingCycle, cycle: Cycle
    ) -> JointJob:
        """One cycle (of a joint, or of the whole robot when `joint` is None) through the
        guarded path (agent.service.jobs.run_job): it leaves the queue once measured, and
        comes back when its capture is lost."""
        kind = self.env.kinds[pending.kind]

        def measured() -> None:
            self.queue = self.queue.remove(pending.joint, kind.name)

        def lost() -> None:
            self.queue = self.queue.add(pending)  # measured again at a later stop

        job = JointJob(self.ctrl, joint, cycle, utcnow(), trigger=pending.reason)
        return await run_job(
            driver,
            job,
            kind,
            pending.joint,
            state_dir=self.env.state_dir,
            analysis=self.env.analysis,
            dry_run=self.env.dry_run,
            measured=measured,
            lost=lost,
        )
