"""The report of one identification (`jha identify --html`): per joint its indicators judged as
the daemon judges them (agent.health.identification), the measured vs predicted torque, and the
warnings of the fit.

What each indicator is judged against:
- with the history (`--record`): every identification of the joint recorded there, with the
  controller's limits, exactly as the daemon's report of that history (agent.report.indicators);
- without it: the robot file's nominal values (Coulomb and viscous friction, stiffness) as the
  commissioning baseline of agent.health.identification. The torque-prediction NMSE has no
  nominal value; its baseline is the median of the first recorded identifications, so a single
  one cannot judge it: it is shown, but kept out of the joint's verdict (which would otherwise
  be UNKNOWN for every joint of every one-off identification), and the page says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime

from agent.config.identification_limits import IdentificationLimitSettings
from agent.config.model import ThresholdSettings
from agent.health.identification.baseline import IDENTIFICATION_INDICATORS
from agent.health.identification.indicator import assess_indicator
from agent.health.identification.joint import joint_verdict
from agent.health.status import Status, TrendPoint
from agent.history.records import Estimate, Outcome
from agent.history.store import HistoryStore
from agent.report.evidence import EvidencePlot
from agent.report.indicators import indicator_summaries
from agent.report.model import IndicatorSummary, JointReport, Report

# What a one-off identification is judged against, in words (the page's note).
NOMINAL_BASIS = (
    "Judged against the robot file's nominal values (Coulomb and viscous friction, stiffness) "
    "as their commissioning baseline. The torque-prediction NMSE has no nominal value: it is "
    "judged once the history holds the identifications its baseline is the median of (record "
    "them with jha identify --record, or let the daemon's identification cycle run)."
)
HISTORY_BASIS = (
    "Judged against the joint's baseline in the history (the median of its first "
    "identifications, or the config's commissioning values) with the controller's limits, as "
    "the daemon's report is."
)


def one_off_report(
    machine: str,
    estimates: Mapping[str, Sequence[Estimate]],
    nominal: Mapping[str, Mapping[str, float]],
    evidence: Mapping[str, Sequence[EvidencePlot]],
    warnings: Sequence[str],
    started: datetime,
) -> Report:
    """The report of an identification nothing was recorded of: `nominal` per joint holds the
    robot file's values by indicator name (a value of 0 or less is no baseline)."""
    when = started.isoformat()
    joints = []
    for joint, found in estimates.items():
        summaries = []
        for e in found:
            verdict = None
            if e.indicator in IDENTIFICATION_INDICATORS:
                given = nominal.get(joint, {}).get(e.indicator)
                rel = e.detail.get("rel_std_pct")
                known = float(rel) if isinstance(rel, int | float) and math.isfinite(rel) else None
                verdict = assess_indicator(
                    e.indicator,
                    [(TrendPoint(when, e.value), known)],
                    IdentificationLimitSettings(),
                    given if given is not None and math.isfinite(given) and given > 0 else None,
                )
            summaries.append(
                IndicatorSummary(e.indicator, e.unit, (TrendPoint(when, e.value),), None, verdict)
            )
        joints.append(_joint(machine, joint, summaries, evidence.get(joint, ()), baselined=True))
    return _report(machine, joints, warnings, when, NOMINAL_BASIS)


def recorded_report(
    store: HistoryStore,
    machine: str,
    joints: Sequence[str],
    limits: IdentificationLimitSettings | None,
    evidence: Mapping[str, Sequence[EvidencePlot]],
    warnings: Sequence[str],
    started: datetime,
) -> Report:
    """The report of an identification just recorded in `store` under `machine`: each joint's
    indicators over its history, judged against `limits` (the controller's)."""
    out = []
    for joint in joints:
        summaries = indicator_summaries(store, machine, joint, limits=limits)
        out.append(_joint(machine, joint, summaries, evidence.get(joint, ()), baselined=False))
    return _report(machine, out, warnings, started.isoformat(), HISTORY_BASIS)


def _report(
    machine: str, joints: Sequence[JointReport], warnings: Sequence[str], when: str, basis: str
) -> Report:
    """An identification's report: its joints have indicators only, no backlash verdict."""
    return Report(
        created_at_iso=when,
        machines=(machine,),
        joints=(),
        indicator_joints=tuple(joints),
        warnings=tuple(warnings),
        basis=basis,
    )


def _joint(
    machine: str,
    joint: str,
    summaries: Sequence[IndicatorSummary],
    evidence: Sequence[EvidencePlot],
    baselined: bool,
) -> JointReport:
    """`baselined`: the joint's verdict is of the indicators that have a baseline (all of them
    when none has one, so that a joint still says why it is not judged)."""
    verdicts = [s.verdict for s in summaries if s.verdict is not None]
    chosen = [v for v in verdicts if v.baseline is not None] if baselined else verdicts
    return JointReport(
        controller=machine,
        joint=joint,
        status=Status.UNKNOWN,
        verdict_reason="",
        result=None,
        error=None,
        thresholds=ThresholdSettings(),
        trend=None,
        history=(),
        capture_path=None,
        indicators=tuple(summaries),
        evidence=tuple(evidence),
        outcome=Outcome.OK,
        identification=joint_verdict(chosen or verdicts),
    )
