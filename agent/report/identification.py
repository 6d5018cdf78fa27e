"""The report of one identification (`jha identify --html`): per joint its indicators judged as
the daemon judges them (agent.health.identification), the measured vs predicted torque, and the
warnings of the fit.

What each indicator is judged against:
- with the history (`--record`): every identification of the joint recorded there, with the
  controller's limits, exactly as the daemon's report of that history (agent.report.indicators);
- without it: nothing. A robot file's friction and stiffness are design values, often guesses
  (the UR5e file says so): judged against them a healthy joint read +95 % friction, an alert.
  Each indicator is shown with its ratio to the robot file's value, for reference (the
  torque-prediction NMSE has none), and the status "no baseline yet" (UNKNOWN, NE 107 check
  function). The page says how to get a baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from agent.config.identification_limits import IdentificationLimitSettings
from agent.config.model import ThresholdSettings
from agent.health.display import indicator_info
from agent.health.identification.baseline import IDENTIFICATION_INDICATORS
from agent.health.identification.indicator import assess_indicator
from agent.health.identification.joint import joint_verdict
from agent.health.status import Status, TrendPoint
from agent.history.records import Estimate, Outcome
from agent.history.store import HistoryStore
from agent.report.evidence import EvidencePlot
from agent.report.indicators import indicator_summaries
from agent.report.model import IndicatorSummary, JointReport, Report
from agent.report.words import verdict_words

# What a one-off identification is judged against, in words (the page's note).
NOMINAL_BASIS = (
    "Not judged: this joint has no baseline yet. The robot file's nominal values (friction, "
    "stiffness) are design values, not this joint's, and never raise a watch or an alert; each "
    "indicator shows its ratio to them for reference only. A baseline is the median of the "
    "joint's first recorded identifications (record them with jha identify --record, or let "
    "the daemon's identification cycle run) or the commissioning values set in the config."
)
RECORD_HINT = "record identifications (jha identify --record) to set one"
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
                )
                verdict = replace(verdict, no_baseline=_no_baseline(e.indicator, e.value, given))
                verdict = replace(verdict, reason=verdict_words(verdict))
            summaries.append(
                IndicatorSummary(e.indicator, e.unit, (TrendPoint(when, e.value),), None, verdict)
            )
        joints.append(_joint(machine, joint, summaries, evidence.get(joint, ()), baselined=True))
    return _report(machine, joints, warnings, when, NOMINAL_BASIS)


def _no_baseline(indicator: str, value: float, nominal: float | None) -> str:
    """Why a one-off identification's value is not judged, with the robot file's for reference."""
    if nominal is None or not (math.isfinite(nominal) and nominal > 0.0):
        return f"no baseline yet (the robot file gives no value); {RECORD_HINT}"
    info = indicator_info(indicator)
    ratio = f"x{value / nominal:.3g}" if math.isfinite(value) else "no ratio"
    return (
        f"no baseline yet; {ratio} of the robot file's {info.format(nominal)}, a design value "
        f"that is never judged against; {RECORD_HINT}"
    )


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
