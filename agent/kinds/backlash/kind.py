"""The backlash kind: the constant-speed cycle of Giovannitti et al. 2022, its signature fit and
delta = f(A).

The cycle of one joint is built from its config (backlash_cycle); the fit and the simulation
sweep of the calibration run in the process pool (the *_capture, *_calibration and sweep entry
points below), so the daemon never imports the estimators.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.capture.model import Capture
from agent.config.model import ControllerSettings, JointSettings
from agent.config.travel_limits import joint_travel
from agent.errors import EstimationError
from agent.estimation.backlash.result import BacklashResult
from agent.history.records import Outcome
from agent.kinds.base import AnalysisContext, JointJob, estimate_s, utcnow
from agent.logfmt import kv
from drivers.base import BacklashCycle, Cycle, CycleKind

if TYPE_CHECKING:
    from agent.history.store import HistoryStore
    from agent.report.model import JointReport

log = logging.getLogger(__name__)


def backlash_cycle(controller: ControllerSettings, joint: JointSettings) -> BacklashCycle:
    """The constant-speed cycle of one configured joint."""
    c = joint.backlash_cycle
    speed_rad_s = 2.0 * math.pi * c.motor_speed_rps
    load_turn_s = 2.0 * math.pi * joint.gear_ratio / speed_rad_s
    return BacklashCycle(
        controller=controller.name,
        joint=joint.name,
        joint_index=joint.index,
        motor_speed_rad_s=speed_rad_s,
        gear_ratio=joint.gear_ratio,
        duration_s=c.load_turns * load_turn_s,
        settle_s=c.settle_s,
        sample_rate_hz=c.sample_rate_hz,
        encoder_bits=joint.encoder_bits,
        test_pose_rad=joint.test_pose_rad,
        travel_limits=joint_travel(controller, joint),
    )


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


def mismatch_jobs_of(joint: JointSettings) -> list[tuple[str | None, float, float]]:
    """Pool entry point: the runs of the joint's model-mismatch sweep."""
    from agent.kinds.backlash.calibration import mismatch_jobs

    return mismatch_jobs(joint)


def mismatch_calibration_point(
    joint: JointSettings, cycle: BacklashCycle, job: tuple[str | None, float, float]
) -> float:
    """Pool entry point: one run of the model-mismatch sweep."""
    from agent.kinds.backlash.calibration import mismatch_point

    return mismatch_point(joint, cycle, job)


def calibration_from_sweep(
    points: list[tuple[float, float]],
    path: Path,
    jobs: list[tuple[str | None, float, float]] | None = None,
    amplitudes: list[float] | None = None,
) -> dict[str, Any]:
    """Pool entry point: fit delta = f(A) to the sweep (with the mismatch sweep's
    sensitivities) and cache it."""
    from agent.kinds.backlash.calibration import calibration_from_points

    return calibration_from_points(points, path, jobs, amplitudes).to_dict()


class BacklashKind:
    """The constant-speed cycle of Giovannitti et al. 2022, its signature fit and the
    delta = f(A) calibration."""

    name = CycleKind.BACKLASH

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
            f"{cal.model_tolerance}:{joint.gear_ratio}:{joint.encoder_bits}:{shaping}"
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
        jobs = await loop.run_in_executor(ctx.pool(), mismatch_jobs_of, joint)
        log.info(
            kv(
                "calibration_sweep",
                joint=joint.name,
                points=len(cal.sweep_backlash_rad),
                mismatch_runs=len(jobs),
            )
        )
        # Both sweeps at once: the pool's workers stay busy to the end.
        points, amplitudes = await asyncio.gather(
            asyncio.gather(
                *(
                    loop.run_in_executor(ctx.pool(), sweep_calibration_point, joint, cycle, delta)
                    for delta in cal.sweep_backlash_rad
                )
            ),
            asyncio.gather(
                *(
                    loop.run_in_executor(ctx.pool(), mismatch_calibration_point, joint, cycle, job)
                    for job in jobs
                )
            ),
        )
        return await loop.run_in_executor(
            ctx.pool(), calibration_from_sweep, list(points), path, jobs, list(amplitudes)
        )

    def record(self, store: HistoryStore, job: JointJob) -> list[int]:
        from agent.health.verdicts import assess_backlash
        from agent.history.records import estimates_for

        joint = _joint(job.joint)
        if job.outcome == Outcome.DRY_RUN:
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
        from agent.report.indicators import indicator_summaries
        from agent.report.model import joint_report

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
