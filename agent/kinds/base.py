"""Cycle kinds behind one small interface: build the cycle, analyse its capture, record it.

The daemon dispatches by `cycle.kind` through KINDS: `backlash` (one joint, here) and
`identification` (the whole robot, agent.kinds.identification.kind). Analysis runs in the process
pool; recording and report writing are plain functions the daemon runs in the pool too, off
the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agent.capture.model import Capture
from agent.config.model import ControllerSettings, JointSettings
from agent.errors import EstimationError
from agent.estimation.backlash.result import BacklashResult
from agent.logfmt import kv
from agent.service.interlocks import backlash_cycle
from drivers.base import BacklashCycle, Cycle

if TYPE_CHECKING:
    from agent.history.store import HistoryStore
    from agent.kinds.identification.kind import IdentificationAnalysis
    from agent.report.write import JointReport, Report

# The daemon's own process stays light (the idle service must fit in 120 MB): the estimators,
# scipy and the report renderer are imported only by the functions that run in the pool.

log = logging.getLogger("jha.daemon")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def stamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%S_%fZ")


def analyze_backlash_capture(
    capture: Capture, joint: JointSettings, calibration: dict[str, Any] | None
) -> BacklashResult:
    """Process-pool entry point: one fit, pure. The calibration comes as its to_dict() (or
    None: from the joint's points, if it has them)."""
    from agent.estimation.backlash.calibration import BacklashCalibration, fit_calibration
    from agent.estimation.backlash.fit import fit_backlash
    from agent.kinds.backlash.calibration import fit_settings

    cal = None
    if calibration is not None:
        cal = BacklashCalibration.from_dict(calibration)
    elif joint.calibration.source == "points":
        cal = fit_calibration(
            [(p.amplitude_rad_s, p.backlash_rad) for p in joint.calibration.points],
            source="points",
        )
    return fit_backlash(capture, fit_settings(joint), cal)


def cached_calibration(
    joint: JointSettings, cycle: BacklashCycle, cache_dir: Path
) -> tuple[Path, dict[str, Any] | None]:
    """Pool entry point: where the joint's simulation sweep is cached, and the cached sweep as
    a dict (None: not cached, or damaged)."""
    from agent.kinds.backlash.calibration import cache_path, load_cached

    path = cache_path(joint, cycle, cache_dir)
    cached = load_cached(path)
    return path, None if cached is None else cached.to_dict()


def sweep_calibration_point(
    joint: JointSettings, cycle: BacklashCycle, backlash_rad: float
) -> tuple[float, float]:
    """Pool entry point: one point of the simulation sweep."""
    from agent.kinds.backlash.calibration import sweep_point

    return sweep_point(joint, cycle, backlash_rad, 1.0, 101)


def calibration_from_sweep(points: list[tuple[float, float]], path: Path) -> dict[str, Any]:
    """Pool entry point: fit delta = f(A) to the sweep and cache it."""
    from agent.kinds.backlash.calibration import calibration_from_points

    return calibration_from_points(points, path).to_dict()


class AnalysisRefused(EstimationError):
    """The capture was measured but cannot be trusted (the identification's saturation, poor
    excitation, missing channel): recorded as a refusal with its reason, never as data.
    Defined here, not in the estimator, so that the daemon can receive it from the pool without
    importing the estimators."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[AnalysisRefused], tuple[str, str]]:
        # process pools pickle exceptions through their constructor arguments
        return (type(self), (self.reason, str(self)))


@dataclass
class JointJob:
    """One cycle, from the trigger to the record: of one joint, or (joint None) of the whole
    robot, as the identification cycle is."""

    controller: ControllerSettings
    joint: JointSettings | None
    cycle: Cycle
    started_at: dt.datetime
    capture_path: Path | None = None
    error: str | None = None
    outcome: str = "ok"  # ok, rejected, aborted, error, dry_run
    result: BacklashResult | IdentificationAnalysis | None = None
    trigger: str | None = None  # production_stop, schedule, on_demand, once
    cycle_id: int | None = None  # its row in the history, once recorded
    # Not sent to the pool with the job (a future does not pickle): see for_pool().
    analysis: asyncio.Future[Any] | None = field(default=None, compare=False)

    @property
    def joint_name(self) -> str:
        """The joint's name; the cycle's ("all") for a whole-robot cycle."""
        return self.cycle.joint if self.joint is None else self.joint.name

    def for_pool(self) -> JointJob:
        return replace(self, analysis=None)


@dataclass
class AnalysisContext:
    """What a kind's analysis may use: the daemon's pool (made on first use) and state dir."""

    state_dir: Path
    pool: Callable[[], concurrent.futures.Executor]
    cache: dict[str, Any] = field(default_factory=dict)


class CycleKind(Protocol):
    name: str

    def make_cycle(
        self, ctx: AnalysisContext, ctrl: ControllerSettings, joint: JointSettings | None
    ) -> Cycle | None:
        """The cycle to run; None while it cannot be made yet (a trajectory being designed in
        the pool). On the event loop: must not block."""

    def needs_s(self, ctrl: ControllerSettings, joint: JointSettings | None) -> float:
        """How long the cycle keeps the machine (settle + duration), known before the cycle is
        made: what a stop must hold (the margin comes on top)."""

    def save(self, capture: object, path: Path) -> None:
        """Write the capture atomically (blocking: the daemon calls it in a thread)."""

    async def analyse(self, ctx: AnalysisContext, job: JointJob, capture: object) -> Any:
        """The job's result, computed in the pool; AnalysisRefused for a capture the estimator
        cannot trust."""

    def record(self, store: HistoryStore, job: JointJob) -> list[int]:
        """Write the job's outcome (and estimates and verdict) to the history; in the pool.
        Returns the ids of the rows written (none for a dry run)."""

    def joint_reports(self, store: HistoryStore, job: JointJob) -> list[JointReport]:
        """The job's part of the report, one entry per joint; in the pool."""


def estimate_s(cycle: Cycle) -> float:
    """How long the cycle keeps the machine: what a stop must hold (the margin comes on top)."""
    return cycle.settle_s + cycle.duration_s


class BacklashKind:
    """Paper 000's constant-speed cycle, its signature fit and delta = f(A) calibration."""

    name = "backlash"

    def make_cycle(
        self, ctx: AnalysisContext, ctrl: ControllerSettings, joint: JointSettings | None
    ) -> BacklashCycle:
        return backlash_cycle(ctrl, _joint(joint))

    def needs_s(self, ctrl: ControllerSettings, joint: JointSettings | None) -> float:
        return estimate_s(backlash_cycle(ctrl, _joint(joint)))

    def save(self, capture: object, path: Path) -> None:
        from agent.capture.files import save_capture

        save_capture(self._capture(capture), path)

    @staticmethod
    def _capture(capture: object) -> Capture:
        if not isinstance(capture, Capture):
            raise EstimationError(f"backlash cycle: expected a Capture, got {type(capture)}")
        return capture

    async def analyse(self, ctx: AnalysisContext, job: JointJob, capture: object) -> BacklashResult:
        capture = self._capture(capture)
        joint, cycle = _joint(job.joint), _backlash(job.cycle)
        calibration = await self._calibration(ctx, joint, cycle)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            ctx.pool(), analyze_backlash_capture, capture, joint, calibration
        )

    def _calibration(
        self, ctx: AnalysisContext, joint: JointSettings, cycle: BacklashCycle
    ) -> asyncio.Future[dict[str, Any] | None]:
        # Joints with the same model share one sweep (and one cache entry).
        cal = joint.calibration
        # Same shaping as agent.kinds.backlash.calibration.cache_key (which is not imported here: it
        # pulls in the estimators), so the in-memory and on-disk sharing agree.
        shaping = replace(cycle, controller="", joint="", joint_index=0)
        key = (
            f"backlash:{cal.source}:{joint.model}:{joint.estimator}:{cal.sweep_backlash_rad}:"
            f"{joint.gear_ratio}:{joint.encoder_bits}:{shaping}"
        )
        if cal.source != "simulation":
            key = "backlash:none"  # points are fitted with each analysis, in the worker
        if key not in ctx.cache:
            ctx.cache[key] = asyncio.ensure_future(self._make_calibration(ctx, joint, cycle))
        future: asyncio.Future[dict[str, Any] | None] = ctx.cache[key]
        return future

    async def _make_calibration(
        self, ctx: AnalysisContext, joint: JointSettings, cycle: BacklashCycle
    ) -> dict[str, Any] | None:
        """The joint's delta = f(A) from a simulation sweep (cached), as a dict; None when the
        joint has none or brings its own points."""
        cal = joint.calibration
        if cal.source != "simulation":
            return None
        loop = asyncio.get_running_loop()
        path, cached = await loop.run_in_executor(
            ctx.pool(), cached_calibration, joint, cycle, ctx.state_dir / "calibration"
        )
        if cached is not None:
            return cached
        log.info(kv("calibration_sweep", joint=joint.name, points=len(cal.sweep_backlash_rad)))
        points = await asyncio.gather(
            *(
                loop.run_in_executor(ctx.pool(), sweep_calibration_point, joint, cycle, delta)
                for delta in cal.sweep_backlash_rad
            )
        )
        return await loop.run_in_executor(ctx.pool(), calibration_from_sweep, list(points), path)

    def record(self, store: HistoryStore, job: JointJob) -> list[int]:
        from agent.health.verdicts import assess_backlash
        from agent.history.store import estimates_for

        joint = _joint(job.joint)
        if job.outcome == "dry_run":
            return []  # nothing moved and nothing was measured: no history entry
        result = job.result
        if not isinstance(result, BacklashResult):
            return [store.record_rejected(
                controller=job.controller.name,
                joint=joint.name,
                kind=self.name,
                started_at=job.started_at,
                finished_at=utcnow(),
                reason=job.error or "",
                outcome=job.outcome,
                capture_path=job.capture_path,
                trigger=job.trigger,
            )]  # fmt: skip
        verdict = assess_backlash(result, joint.thresholds)
        cycle_id = store.record_cycle(
            controller=job.controller.name,
            joint=joint.name,
            kind=self.name,
            started_at=job.started_at,
            finished_at=utcnow(),
            estimates=estimates_for(result),
            status=str(verdict.status),
            status_reason=verdict.reason,
            capture_path=job.capture_path,
            trigger=job.trigger,
        )
        log.info(
            kv(
                "assessed",
                controller=job.controller.name,
                joint=joint.name,
                amplitude_rad_s=f"{result.amplitude_rad_s:.4g}",
                backlash_rad=result.backlash_rad,
                status=verdict.status,
            )
        )
        return [cycle_id]

    def joint_reports(self, store: HistoryStore, job: JointJob) -> list[JointReport]:
        from agent.health.verdicts import assess_backlash
        from agent.report.write import indicator_summaries, joint_report

        settings = _joint(job.joint)
        result = job.result if isinstance(job.result, BacklashResult) else None
        ctrl, joint = job.controller.name, settings.name
        verdict = assess_backlash(result, settings.thresholds)
        return [joint_report(
            ctrl,
            joint,
            result,
            settings.thresholds,
            history=store.history(ctrl, joint, verdict.indicator),
            capture_path=None if job.capture_path is None else str(job.capture_path),
            error=job.error,
            indicators=indicator_summaries(
                store, ctrl, joint, judged=verdict.indicator,
                limits=None if job.controller.identification is None
                else job.controller.identification.limits),
            outcome=job.outcome,
        )]  # fmt: skip


def _joint(joint: JointSettings | None) -> JointSettings:
    if joint is None:
        raise EstimationError("backlash cycle: expected the joint it runs on, found none")
    return joint


def _backlash(cycle: Cycle) -> BacklashCycle:
    if not isinstance(cycle, BacklashCycle):
        raise EstimationError(f"backlash analysis: expected a backlash cycle, got {cycle.kind}")
    return cycle


def _identification_kind() -> CycleKind:
    from agent.kinds.identification.kind import IdentificationKind

    return IdentificationKind()


# The dispatch table: cycle kind -> how to run, analyse and record it.
KINDS: dict[str, Callable[[], CycleKind]] = {
    "backlash": BacklashKind,
    "identification": _identification_kind,
}


def _kinds() -> dict[str, CycleKind]:
    return {name: make() for name, make in KINDS.items()}


def record_jobs(state_dir: Path, jobs: list[JointJob]) -> list[int]:
    """Pool entry point: every job's history entries, in one connection; their cycle ids."""
    from agent.history.store import HistoryStore

    kinds = _kinds()
    ids: list[int] = []
    with HistoryStore(state_dir / "history.sqlite") as store:
        for job in jobs:
            ids += kinds[job.cycle.kind].record(store, job)
    return ids


def merge_joint_reports(parts: list[JointReport]) -> tuple[list[JointReport], list[JointReport]]:
    """One entry per joint, (judged, indicators only): a joint that two cycles of the stop
    measured (its backlash and the identification) keeps the entry with a backlash result and
    gains the other's evidence plots."""
    merged: dict[tuple[str, str], JointReport] = {}
    for part in parts:
        key = (part.controller, part.joint)
        before = merged.get(key)
        if before is None:
            merged[key] = part
            continue
        base, other = (part, before) if before.result is None and part.result else (before, part)
        merged[key] = replace(base, evidence=(*base.evidence, *other.evidence))
    everyone = list(merged.values())
    return [j for j in everyone if not j.indicator_only], [j for j in everyone if j.indicator_only]


@dataclass(frozen=True)
class WrittenReport:
    json_path: Path
    html_path: Path
    table: str  # the terminal summary
    report: Report | None  # only when asked for (publishers): it drags scipy into the daemon


def record_and_report(
    state_dir: Path, ctrl: str, jobs: list[JointJob], want_report: bool
) -> WrittenReport:
    """Pool entry point: record a stop's jobs, then write its report."""
    from agent.history.store import HistoryStore
    from agent.report.write import Report, new_report_dir, summary_table, write_report

    cycle_ids = record_jobs(state_dir, jobs)
    kinds = _kinds()
    created = utcnow()
    with HistoryStore(state_dir / "history.sqlite") as store:
        parts = [jr for job in jobs for jr in kinds[job.cycle.kind].joint_reports(store, job)]
    judged, others = merge_joint_reports(parts)
    report = Report(
        created_at_iso=created.isoformat(),
        machines=(ctrl,),
        joints=tuple(judged),
        indicator_joints=tuple(others),
    )
    json_path, html_path = write_report(report, new_report_dir(state_dir, created))
    # After the files: a crash in between leaves a report the history does not point to yet,
    # never a pointer to a report that is not there.
    with HistoryStore(state_dir / "history.sqlite") as store:
        store.record_report(report.message_id, report.created_at_iso, json_path, cycle_ids)
    return WrittenReport(
        json_path, html_path, summary_table(report), report if want_report else None
    )
