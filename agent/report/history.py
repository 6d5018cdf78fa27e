"""The joint-health report from the history alone: every joint of a controller, judged on
its last recorded values (what `jha report` shows, and each stop's report starts from).

Joints with backlash cycles are judged against their configured limits; joints with other
indicators only (a robot file's joints recorded by `jha stiffness estimate --record`) are listed
with those indicators and no status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent.config.model import ThresholdSettings
from agent.health.status import TrendPoint
from agent.history.records import CycleRecord, Outcome
from agent.history.store import HistoryStore
from drivers.base import CycleKind

if TYPE_CHECKING:
    from agent.config.identification_limits import IdentificationLimitSettings
    from agent.report.model import Report


def _backlash_history(
    store: HistoryStore, controller: str, joint: str
) -> tuple[str, list[TrendPoint]] | None:
    """The judged backlash indicator (the one recorded last) and its history, if any."""
    found = [
        (name, pts)
        for name in ("backlash_rad", "amplitude_rad_s")
        if (pts := store.history(controller, joint, name))
    ]
    if not found:
        return None
    return max(found, key=lambda f: f[1][-1].time_iso)


def report_from_history(
    store: HistoryStore,
    controller: str,
    thresholds: Mapping[str, ThresholdSettings] | None = None,
    created_at: datetime | None = None,
    ident_limits: IdentificationLimitSettings | None = None,
) -> Report:
    """A report of every joint of `controller` in the history; limits by joint name.

    A joint is judged on the last value of its backlash indicator. When its last backlash cycle
    ended in an error the joint is 'unknown' (NE 107 failure): its health cannot be measured
    now. A refused or aborted last cycle only adds a note: nothing was measured, the last
    verdict stands.
    """
    from agent.health.status import Status
    from agent.health.trend import trend
    from agent.health.verdicts import assess
    from agent.report.indicators import indicator_summaries
    from agent.report.model import JointReport, limits_for

    thresholds = thresholds or {}
    joints: list[JointReport] = []
    others: list[JointReport] = []
    for joint in store.joints(controller):
        limits = thresholds.get(joint, ThresholdSettings())
        judged = _backlash_history(store, controller, joint)
        summaries = indicator_summaries(
            store,
            controller,
            joint,
            judged=None if judged is None else judged[0],
            limits=ident_limits,
        )
        latest = store.latest(controller, joint)
        if judged is None:
            if summaries:
                others.append(
                    JointReport(
                        controller=controller,
                        joint=joint,
                        status=Status.UNKNOWN,
                        verdict_reason="no backlash cycle recorded",
                        result=None,
                        error=None,
                        thresholds=limits,
                        trend=None,
                        history=(),
                        capture_path=None,
                        indicators=summaries,
                        outcome=None if latest is None else latest.outcome,
                    )
                )
                continue
            # Only failed cycles: say so, as the daemon's report would.
            why = latest.reason if latest is not None else "no cycle recorded"
            joints.append(
                JointReport(
                    controller=controller,
                    joint=joint,
                    status=Status.UNKNOWN,
                    verdict_reason=f"cycle failed: {why}",
                    result=None,
                    error=why,
                    thresholds=limits,
                    trend=None,
                    history=(),
                    capture_path=None,
                    outcome=None if latest is None else latest.outcome,
                )
            )
            continue
        name, points = judged
        watch, alert = limits_for(name, limits)
        verdict = assess(points[-1].value, watch, alert, name)
        status, reason = verdict.status, verdict.reason
        error: str | None = None
        last = _last_backlash_cycle(store, controller, joint)
        if last is not None and last.outcome == Outcome.ERROR:
            status, error = Status.UNKNOWN, last.reason
            reason = f"cycle failed: {last.reason}; the last valid {reason}"
        elif last is not None and last.outcome != Outcome.OK:
            reason += f" (last cycle {last.outcome}: {last.reason})"
        joints.append(
            JointReport(
                controller=controller,
                joint=joint,
                status=status,
                verdict_reason=reason,
                result=None,
                error=error,
                thresholds=limits,
                trend=trend(points, watch, alert, name),
                history=points,
                capture_path=None if latest is None else latest.capture_path,
                indicator=name,
                latest_value=points[-1].value,
                latest_interval=points[-1].interval,
                latest_ambiguous=points[-1].ambiguous,
                indicators=summaries,
                outcome=None if last is None else last.outcome,
            )
        )
    moment = created_at or datetime.now(UTC)
    from agent.report.model import Report

    return Report(
        created_at_iso=moment.isoformat(),
        machines=(controller,),
        joints=tuple(joints),
        indicator_joints=tuple(others),
    )


def _last_backlash_cycle(store: HistoryStore, controller: str, joint: str) -> CycleRecord | None:
    """The joint's last cycle that measured (or tried to measure) backlash."""
    return store.latest(controller, joint, kind=CycleKind.BACKLASH)


def merge_reports(reports: Sequence[Report]) -> Report:
    """One report of several controllers."""
    from agent.report.model import Report

    first = reports[0]
    return Report(
        created_at_iso=first.created_at_iso,
        machines=tuple(m for r in reports for m in r.machines),
        joints=tuple(j for r in reports for j in r.joints),
        indicator_joints=tuple(j for r in reports for j in r.indicator_joints),
        warnings=tuple(w for r in reports for w in r.warnings),
    )
