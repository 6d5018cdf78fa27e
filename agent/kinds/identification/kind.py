"""The whole-robot identification cycle in the daemon (Zollo, Lopez et al. 2014; Madsen et al.
2020); its safety path is P7 in docs/safety.md.

`IdentificationKind` is the `identification` entry of agent.kinds.registry.KINDS: the runner
queues it as one PendingCycle of joint ALL_JOINTS, runs it through the same guarded path as a
backlash cycle (agent.service.interlocks.run_guarded_cycle: every joint at the trajectory's
start pose before motion, the interlocks watched during it, stop_motion on any surprise), and
hands its MultiCapture to the analysis. Every heavy step runs in the process pool:

- the trajectory design (SLSQP; seconds to a minute), once per settings and robot file: cached
  in `<state_dir>/identification/`
  (agent.kinds.identification.analysis.cached_excitation_cycle). Until it is there the
  identification is not planned into a stop;
- the identification (agent.kinds.identification.analysis.analyze_identification);
- the history records (per robot joint, like `jha identify --record`) and the report, with the
  measured vs predicted torque of every joint.

A capture the identification cannot trust (saturated, poorly excited, a channel missing) comes
back as AnalysisRefused and is recorded as a refusal with its reason, never as data.
When the runner queues one (identification.every_s / window) is agent.service.identification's.

Light at import (no scipy, no estimators): the daemon's own process stays small.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from concurrent.futures import Future as PoolFuture
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.capture.multi import MultiCapture
from agent.config.identification import IdentificationCycleSettings
from agent.config.identification_limits import LIMITS_KEY, limits_detail
from agent.config.model import ControllerSettings, JointSettings
from agent.errors import ConfigError, EstimationError
from agent.history.records import Estimate, Outcome
from agent.kinds.base import AnalysisContext, AnalysisRefused, JointJob, utcnow
from agent.logfmt import kv
from agent.report.evidence import EvidencePlot
from drivers.base import Cycle, CycleKind, ExcitationCycle

if TYPE_CHECKING:
    from agent.history.store import HistoryStore
    from agent.report.model import JointReport

log = logging.getLogger(__name__)

KIND = CycleKind.IDENTIFICATION
ALL_JOINTS = "all"  # the PendingCycle.joint of a whole-robot cycle (ExcitationCycle.joint)
DESIGN_DIR = "identification"  # under the state dir: the cached trajectory designs


@dataclass(frozen=True)
class IdentificationAnalysis:
    """What the daemon keeps of an identification (IdentificationOutcome without its full
    result dict): per joint the indicators to record and the torque evidence to show. A class of
    its own because agent.kinds.identification.analysis imports the estimators (scipy), which
    the daemon's own process must not load; only pool workers do."""

    robot: str
    model: str
    method: str
    condition_number: float
    nmse_nm: float
    estimates: Mapping[str, tuple[Estimate, ...]]
    evidence: Mapping[str, tuple[EvidencePlot, ...]]
    warnings: tuple[str, ...]
    seconds: float


# -- pool entry points (the estimators are imported in the worker) ------------------------------


def design_in_pool(ctrl: ControllerSettings, cache_dir: Path) -> tuple[ExcitationCycle, bool]:
    """The controller's excitation cycle and whether its design came from the cache."""
    from agent.kinds.identification.analysis import cached_excitation_cycle

    return cached_excitation_cycle(ctrl, cache_dir)


def analyse_in_pool(
    capture: MultiCapture, settings: IdentificationCycleSettings
) -> IdentificationAnalysis:
    """Identify the robot from the capture; AnalysisRefused (with the reason) when it cannot be
    trusted."""
    from agent.kinds.identification.analysis import IdentificationRefused, analyze_identification

    try:
        out = analyze_identification(capture, settings)
    except IdentificationRefused as exc:
        raise AnalysisRefused(exc.reason, f"identification refused ({exc.reason}): {exc}") from None
    return IdentificationAnalysis(
        robot=out.robot,
        model=out.model,
        method=out.method,
        condition_number=out.condition_number,
        nmse_nm=out.nmse_nm,
        estimates=dict(out.estimates),
        evidence=dict(out.evidence),
        warnings=out.warnings,
        seconds=out.seconds,
    )


def _settings(ctrl: ControllerSettings) -> IdentificationCycleSettings:
    if ctrl.identification is None:
        raise ConfigError(f"controller {ctrl.name}: no identification: section")
    return ctrl.identification


def _multi(capture: object) -> MultiCapture:
    if not isinstance(capture, MultiCapture):
        raise EstimationError(
            f"identification cycle: expected a MultiCapture, got {type(capture).__name__}"
        )
    return capture


def _excitation(cycle: Cycle) -> ExcitationCycle:
    if not isinstance(cycle, ExcitationCycle):
        raise EstimationError(f"identification: expected an excitation cycle, got {cycle.kind}")
    return cycle


def _design_key(ctrl: ControllerSettings) -> str:
    """In-memory key of a controller's design: a change of its settings, joints or robot file
    (by mtime; the pool's disk cache hashes the bytes) designs again."""
    s = _settings(ctrl)
    try:
        mtime = os.stat(s.robot).st_mtime_ns
    except OSError:
        mtime = -1  # the design in the pool reports the unreadable file
    joints = ",".join(j.name for j in ctrl.joints)
    return f"{KIND}:design:{ctrl.name}:{joints}:{mtime}:{s!r}"


class IdentificationKind:
    """The excitation cycle of the whole robot, its identification, records and report."""

    name = KIND

    def design(
        self, ctx: AnalysisContext, ctrl: ControllerSettings
    ) -> asyncio.Future[tuple[ExcitationCycle, bool]]:
        """The design of the controller's cycle, started in the pool on first use."""
        key = _design_key(ctrl)
        future: asyncio.Future[tuple[ExcitationCycle, bool]] | None = ctx.cache.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(
                ctx.pool(), design_in_pool, ctrl, ctx.state_dir / DESIGN_DIR
            )
            future.add_done_callback(lambda f: _log_design(ctrl.name, f))
            ctx.cache[key] = future
            log.info(kv("identification_design", controller=ctrl.name, state="started"))
        return future

    def retry_failed_design(self, ctx: AnalysisContext, ctrl: ControllerSettings) -> None:
        """Forget a design that failed for another reason than the config (a worker killed, a
        full disk), so that the next request designs again; a ConfigError stays until the
        config changes."""
        key = _design_key(ctrl)
        future = ctx.cache.get(key)
        if future is None or not future.done():
            return
        if future.cancelled() or not isinstance(future.exception(), ConfigError | type(None)):
            del ctx.cache[key]

    def design_error(self, ctx: AnalysisContext, ctrl: ControllerSettings) -> str | None:
        """Why the controller's cycle cannot be designed (None: designed or still designing)."""
        future = self.design(ctx, ctrl)
        if not future.done() or future.cancelled():
            return None
        exc = future.exception()
        return None if exc is None else f"{type(exc).__name__}: {exc}"

    def make_cycle(
        self, ctx: AnalysisContext, ctrl: ControllerSettings, joint: JointSettings | None
    ) -> ExcitationCycle | None:
        future = self.design(ctx, ctrl)
        if not future.done() or future.cancelled() or future.exception() is not None:
            return None
        return future.result()[0]

    def needs_s(self, ctrl: ControllerSettings, joint: JointSettings | None) -> float:
        s = _settings(ctrl)
        return s.settle_s + s.duration_s

    def save(self, capture: object, path: Path) -> None:
        from agent.capture.multi import save_multi_capture

        save_multi_capture(_multi(capture), path)

    async def analyse(
        self, ctx: AnalysisContext, job: JointJob, capture: object
    ) -> IdentificationAnalysis:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            ctx.pool(), analyse_in_pool, _multi(capture), _settings(job.controller)
        )

    def record(self, store: HistoryStore, job: JointJob) -> list[int]:
        """One history entry per joint of the robot, as `jha identify --record` writes them:
        the indicators of an identification, or the reason nothing was measured."""
        if job.outcome == Outcome.DRY_RUN:
            return []
        joints = _excitation(job.cycle).joints
        ctrl = job.controller.name
        result = job.result
        finished = utcnow()
        ids: list[int] = []
        limits = _settings(job.controller).limits
        with store.transaction():
            for joint in joints:
                if job.outcome == Outcome.OK and isinstance(result, IdentificationAnalysis):
                    # The limits in force go with the estimates: a report made from the
                    # history alone then judges them as this config says.
                    judged = {LIMITS_KEY: limits_detail(limits, joint)}
                    estimates = [
                        replace(e, detail={**e.detail, **judged})
                        for e in result.estimates.get(joint, ())
                    ]
                    ids.append(store.record_cycle(
                        controller=ctrl, joint=joint, kind=KIND, started_at=job.started_at,
                        finished_at=finished, estimates=estimates,
                        capture_path=job.capture_path, trigger=job.trigger,
                    ))  # fmt: skip
                else:
                    ids.append(store.record_rejected(
                        controller=ctrl, joint=joint, kind=KIND, started_at=job.started_at,
                        finished_at=finished, reason=job.error or "no identification result",
                        outcome=Outcome.ERROR if job.outcome == Outcome.OK else job.outcome,
                        capture_path=job.capture_path, trigger=job.trigger,
                    ))  # fmt: skip
        if job.outcome == Outcome.OK and isinstance(result, IdentificationAnalysis):
            log.info(kv("identified", controller=ctrl, robot=result.robot,
                        condition_number=f"{result.condition_number:.4g}",
                        nmse_nm=f"{result.nmse_nm:.4g}", joints=len(joints)))  # fmt: skip
        else:
            log.warning(kv("identification_not_recorded_as_data", controller=ctrl,
                           outcome=job.outcome, reason=job.error))  # fmt: skip
        return ids

    def joint_reports(self, store: HistoryStore, job: JointJob) -> list[JointReport]:
        """Each robot joint as the history has it now (its backlash verdict, if any, every
        indicator with its trend, and the identification verdict against the config's limits),
        with this cycle's measured vs predicted torque."""
        from agent.report.history import report_from_history
        from agent.report.indicators import rejudged
        from agent.report.model import joint_report

        ctrl = job.controller
        thresholds = {j.name: j.thresholds for j in ctrl.joints}
        base = report_from_history(store, ctrl.name, thresholds)
        ident_limits = _settings(ctrl).limits
        known = {
            j.joint: rejudged(j, store, ident_limits)
            for j in (*base.joints, *base.indicator_joints)
        }
        result = job.result if isinstance(job.result, IdentificationAnalysis) else None
        evidence = result.evidence if result is not None and job.outcome == Outcome.OK else {}
        note = None if job.outcome == Outcome.OK else f"identification {job.outcome}: {job.error}"
        out: list[JointReport] = []
        for joint in _excitation(job.cycle).joints:
            found = known.get(joint)
            if found is None:  # nothing in the history (a dry run): say what happened
                limits = thresholds.get(joint)
                if limits is None:
                    continue
                found = joint_report(ctrl.name, joint, None, limits, error=note,
                                     outcome=job.outcome)  # fmt: skip
            elif note is not None:
                found = replace(found, verdict_reason=f"{found.verdict_reason}; {note}")
            out.append(replace(found, evidence=(*found.evidence, *evidence.get(joint, ()))))
        return out


def _log_design(controller: str, future: PoolFuture[Any] | asyncio.Future[Any]) -> None:
    if future.cancelled():
        return
    exc = future.exception()  # retrieved here, so asyncio never warns about it
    if exc is not None:
        log.error(kv("identification_design_failed", controller=controller,
                     error=f"{type(exc).__name__}: {exc}"))  # fmt: skip
        return
    cycle, cached = future.result()
    log.info(kv("identification_design", controller=controller, state="ready", cached=cached,
                duration_s=f"{cycle.settle_s + cycle.duration_s:.3g}",
                start_pose_rad=",".join(f"{j}={q:.4f}" for j, q in
                                        cycle.start_pose_rad.items())))  # fmt: skip
