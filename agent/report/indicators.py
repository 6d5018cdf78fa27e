"""A joint's further indicators (stiffness, friction...) read from the history for its report,
with the identification indicators judged against the joint's baseline."""

from __future__ import annotations

from dataclasses import replace

from agent.config.identification_limits import IdentificationLimitSettings
from agent.health.identification.joint import joint_verdict
from agent.health.trend import trend
from agent.history.identification import assess_history
from agent.history.records import BACKLASH_INDICATORS
from agent.history.store import HistoryStore
from agent.report.model import IndicatorSummary, JointReport


def indicator_summaries(
    store: HistoryStore,
    controller: str,
    joint: str,
    judged: str | None = None,
    limits: IdentificationLimitSettings | None = None,
) -> tuple[IndicatorSummary, ...]:
    """Every indicator of the joint in the history but the judged one, with a trend, and for
    the identification indicators their verdict against the joint's baseline (`limits`: the
    controller's identification.limits; None: those recorded with its last identification).
    Without `judged` both backlash indicators are left out (the older behaviour)."""
    exclude = BACKLASH_INDICATORS if judged is None else (judged,)
    verdicts = assess_history(store, controller, joint, limits)
    found = []
    for name, unit in store.indicators(controller, joint, exclude=exclude):
        points = store.history(controller, joint, name)
        # The trend without limits, as ever; the verdict's own carries the forecast to them.
        found.append(
            IndicatorSummary(name, unit, points, trend(points, indicator=name), verdicts.get(name))
        )
    return tuple(found)


def rejudged(
    j: JointReport, store: HistoryStore, limits: IdentificationLimitSettings | None
) -> JointReport:
    """The joint with its identification indicators judged again against `limits` (the
    controller's config, when a caller built the report without them)."""
    verdicts = assess_history(store, j.controller, j.joint, limits)
    indicators = tuple(replace(s, verdict=verdicts.get(s.indicator)) for s in j.indicators)
    ident = joint_verdict([s.verdict for s in indicators if s.verdict is not None])
    if j.indicator_only and ident is not None:
        return replace(
            j,
            indicators=indicators,
            identification=ident,
            status=ident.status,
            verdict_reason=ident.reason,
            ne107=ident.ne107,
        )
    return replace(j, indicators=indicators, identification=ident)
