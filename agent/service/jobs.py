"""A stop's jobs, from the cycle to the record: each cycle run through the guarded path, its
capture saved and its analysis started in the pool (run_job); later, in the background
(Finishing), the analyses awaited and the jobs handed over to be recorded and reported
(finish_jobs).

The controller's runner (agent.service.runner) chooses the cycles of a stop and owns their
queue; run_job only tells it, through `measured` and `lost`, when a cycle leaves the queue and
when it must be measured again at a later stop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent.config.model import ControllerSettings
from agent.errors import AgentError, CycleAborted, InterlockError
from agent.history.records import Outcome
from agent.kinds.base import AnalysisContext, AnalysisRefused, JointJob, KindHandler, stamp
from agent.logfmt import kv
from agent.service.interlocks import check_interlocks, run_guarded_cycle
from agent.service.motion_intents import drop_intent, intent_path, write_intent
from agent.service.pose_recovery import return_to_start_pose
from drivers.base import Driver

log = logging.getLogger(__name__)

MAX_FINISHING = 4  # stops whose analyses may be under way at once, per controller


async def run_job(
    driver: Driver,
    job: JointJob,
    kind: KindHandler,
    name: str,
    *,
    state_dir: Path,
    analysis: AnalysisContext,
    dry_run: bool,
    measured: Callable[[], None],
    lost: Callable[[], None],
) -> JointJob:
    """Run the job's cycle (of a joint, or of the whole robot when job.joint is None; `name`
    is its queue entry's joint) through the guarded path; its analysis starts in the pool when
    its capture is saved. A dry run only checks the interlocks. `measured()` is called when
    the cycle leaves the queue, `lost()` when its capture could not be saved; a refused or
    aborted cycle stays queued for the next stop."""
    ctrl, joint, cycle = job.controller, job.joint, job.cycle
    try:
        if dry_run:
            await check_interlocks(driver, cycle, ctrl.interlocks, joint)
            job.outcome, job.error = Outcome.DRY_RUN, "dry run: interlocks hold, no motion"
            measured()
            log.info(kv("cycle_dry_run", controller=ctrl.name, joint=name, kind=kind.name))
            return job
        folder = kind.name if joint is None else joint.name
        intent = intent_path(state_dir, job, folder)
        try:
            await asyncio.to_thread(write_intent, intent, job, folder)
        except OSError as exc:  # no record of the motion, no motion
            job.outcome, job.error = Outcome.ERROR, f"motion record not written: {exc}"
            log.error(kv("intent_not_written", controller=ctrl.name, joint=name, error=str(exc)))
            return job
        job.intent_path = intent
        capture = await run_guarded_cycle(driver, cycle, ctrl.interlocks, joint)
    except InterlockError as exc:
        job.outcome, job.error = Outcome.REJECTED, f"interlock: {exc}"
        log.warning(kv("cycle_refused", controller=ctrl.name, joint=name, reason=job.error))
        await _release_intent(job)  # nothing moved
        return job
    except CycleAborted as exc:
        job.outcome, job.error = Outcome.ABORTED, str(exc)
        log.warning(kv("cycle_aborted", controller=ctrl.name, joint=name, reason=str(exc)))
        standstill = exc.standstill
        if standstill is None or standstill.confirmed:
            job.error = _joined(job.error, await return_to_start_pose(driver, ctrl, cycle))
        return job
    measured()
    job.capture_path = state_dir / "captures" / ctrl.name / folder / f"{stamp(job.started_at)}.npz"
    try:
        await asyncio.to_thread(kind.save, capture, job.capture_path)
    except OSError as exc:  # a full or failing disk: this capture is lost, the agent is not
        log.error(kv("capture_not_saved", controller=ctrl.name, joint=name, error=str(exc)))
        job.outcome, job.error = Outcome.ERROR, f"capture not saved: {exc}"
        job.capture_path = None
        lost()
        return job
    log.info(kv("captured", controller=ctrl.name, joint=name, path=job.capture_path))
    await _release_intent(job)  # the capture speaks for the motion
    job.analysis = asyncio.ensure_future(kind.analyse(analysis, job, capture))
    if driver.returns_by_agent:
        # The capture is saved: a fault on the way back stops the arm and is logged, and the
        # joint is moved back (or a person asked to) before the next cycle.
        back = await return_to_start_pose(driver, ctrl, cycle, speed_rad_s=math.inf)
        if back is not None and not back.startswith("moved"):
            log.warning(kv("not_returned", controller=ctrl.name, joint=name, reason=back))
    return job


async def _release_intent(job: JointJob) -> None:
    """The job's motion is accounted for elsewhere: its intent goes."""
    await asyncio.to_thread(drop_intent, job.intent_path)
    job.intent_path = None


def _joined(message: str, more: str | None) -> str:
    return message if not more else f"{message}; {more}"


async def finish_jobs(
    ctrl: ControllerSettings,
    jobs: list[JointJob],
    on_jobs: Callable[[ControllerSettings, list[JointJob]], Awaitable[None]],
    on_progress: Callable[[str], None] | None = None,
) -> bool:
    """Await every job's analysis (a refusal or a failure becomes the job's outcome), then hand
    the jobs to `on_jobs` (record, report, publish). A failure is logged, never raised: the
    controller goes on (False says the stop was not recorded). On cancellation no analysis is
    left running. Each finished analysis is logged (`event=analysed`, k of n, seconds since the
    stop's first) and said to `on_progress`: fits take tens of seconds, and silence reads as a
    hang."""
    started = time.monotonic()
    total = sum(1 for job in jobs if job.analysis is not None)
    done = 0
    try:
        for job in jobs:
            if job.analysis is None:
                continue
            if on_progress is not None:
                on_progress(f"{done}/{total} fitted, fitting {job.joint_name}")
            try:
                job.result = await job.analysis
            except AnalysisRefused as exc:  # measured, but not to be trusted: no data
                job.outcome, job.error = Outcome.REJECTED, str(exc)
                log.warning(kv("analysis_refused", controller=ctrl.name,
                               joint=job.joint_name, reason=str(exc)))  # fmt: skip
            except AgentError as exc:
                job.outcome, job.error = Outcome.ERROR, str(exc)
            except Exception as exc:  # a bug or a dead worker must not take the daemon down
                log.exception(kv("analysis_failed", controller=ctrl.name, joint=job.joint_name))
                job.outcome = Outcome.ERROR
                job.error = f"analysis failed: {type(exc).__name__}: {exc}"
            done += 1
            seconds = round(time.monotonic() - started, 1)
            log.info(kv("analysed", controller=ctrl.name, joint=job.joint_name,
                        done=f"{done}/{total}", seconds=seconds))  # fmt: skip
        if on_progress is not None:
            on_progress(f"{done}/{total} fitted, recording and reporting")
        await on_jobs(ctrl, [job.for_pool() for job in jobs])
        for job in jobs:  # recorded: the history speaks for these motions now
            await _release_intent(job)
        return True
    except asyncio.CancelledError:
        raise
    except Exception:  # a full disk or a report bug: logged, the controller goes on
        log.exception(kv("finish_failed", controller=ctrl.name))
        return False
    finally:
        for job in jobs:  # on shutdown: nothing left running behind us
            if job.analysis is not None and not job.analysis.done():
                job.analysis.cancel()


class Finishing:
    """The stops whose jobs are being finished (finish_jobs) in the background, so the next
    stop is not missed while a slow fit runs; at most `limit` at once (beyond that hand_over
    waits: memory stays bounded)."""

    def __init__(
        self,
        ctrl: ControllerSettings,
        on_jobs: Callable[[ControllerSettings, list[JointJob]], Awaitable[None]],
        on_done: Callable[[], None],
        limit: int = MAX_FINISHING,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        self.ctrl = ctrl
        self.on_jobs = on_jobs
        self.on_done = on_done
        self.on_progress = on_progress
        self.limit = limit
        self._tasks: set[asyncio.Task[None]] = set()
        self.failures = 0  # stops whose record or report failed

    def __bool__(self) -> bool:
        return bool(self._tasks)

    async def hand_over(self, jobs: list[JointJob], on_wait: Callable[[], None]) -> None:
        """Finish `jobs` in the background; `on_wait()` first when `limit` stops already are."""
        while len(self._tasks) >= self.limit:
            on_wait()
            await asyncio.wait(set(self._tasks), return_when=asyncio.FIRST_COMPLETED)
        task = asyncio.create_task(self._finish(jobs), name=f"finish {self.ctrl.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, jobs: list[JointJob]) -> None:
        if not await finish_jobs(self.ctrl, jobs, self.on_jobs, self.on_progress):
            self.failures += 1
        self.on_done()

    async def wait(self) -> None:
        """Until every stop handed over is finished."""
        await asyncio.gather(*self._tasks)

    async def cancel(self) -> None:
        """Cancel what is still being finished (shutdown): no analysis is left running."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
