"""What a joint-health report holds, and its versioned JSON form.

JSON schema "jha.report/1" (keys only ever get added within a major version):
  schema, message_id (uuid4, one per report: publishers count deliveries by it), created_at,
  agent_version, host, machines[], summary{worst_status, counts{status: n},
  ne107_counts{signal: n}},
  joints[]{controller, joint, status, ne107, reason, forecast, indicator, value, unit,
           interval{low, high, confidence} (the value's 95 % interval, or null), ambiguous,
           limits{watch, alert}, error, outcome, capture_path, result (BacklashResult.to_dict,
           or null), trend (Trend.to_dict, or null), history[]{time, value, low, high,
           ambiguous} (low/high only where the point has an interval, ambiguous only if true),
           indicators[] (see below), identification (see below), evidence[] (EvidencePlot.to_dict;
           only with evidence=True)}
  warnings[] (the estimator's warnings, e.g. those `jha identify` prints), basis (what the
  verdicts were judged against, in words)
  (indicators, identification, evidence, indicator_joints, summary.identification, warnings and
  basis are there only when not empty.)
  indicator_joints[]: joints with no backlash cycle but other indicators (stiffness,
           identification); same keys as joints[], not counted in summary; status "unknown",
           or the identification verdict's status, NE 107 and reason when there is one.
  indicators[]{indicator, label, unit, latest_value, latest_time, n_points, trend (or null),
           history[]{time, value}, verdict (identification indicators only, see below)}: each
           further indicator of the joint's history.
  identification{status, ne107{status, letter}, reason, indicator (the worst), forecast
           (the soonest limit crossing: indicator + Forecast.to_dict, or null), forecast_text,
           indicators[] (the verdicts)}: the worst of the joint's indicator verdicts.
  verdict{indicator, label, status, ne107{status, letter}, reason, value, time, unit, n_points,
           baseline{value, source (median|commissioning), n_points, rel_noise, point_noise} or
           null, relative_limits{direction (rise|drop), kind (fraction|ratio), watch, alert},
           limits{watch, alert} (SI), change (value/baseline - 1), change_sigma, significant,
           forecast (Forecast.to_dict or null), forecast_text, trend, failure}.
  summary.identification{worst_status, counts, ne107_counts}: over every joint with an
           identification verdict (summary.worst_status stays the backlash verdicts').
Non-finite numbers are written as null so that the file is strict JSON.
"""

from __future__ import annotations

import math
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent import __version__
from agent.config.model import ThresholdSettings
from agent.errors import AgentError
from agent.estimation.backlash.result import BacklashResult
from agent.health.display import indicator_info
from agent.health.identification.indicator import IndicatorVerdict
from agent.health.identification.joint import (
    JointIdentificationVerdict,
    joint_verdict,
    verdict_counts,
)
from agent.health.status import Ne107, Status, TrendPoint, ne107_of, worst
from agent.health.trend import Trend, forecast_sentence, passed_limit, trend
from agent.health.verdicts import assess_backlash
from agent.history.records import Outcome
from agent.report.action import Recommendation, recommend
from agent.report.evidence import EvidencePlot
from agent.wire import REPORT_SCHEMA

INTERVAL_CONFIDENCE = 0.95  # every interval the estimators give is a 95 % one


@dataclass(frozen=True)
class IndicatorSummary:
    """One further indicator of a joint (stiffness, friction...) over its history."""

    indicator: str
    unit: str
    history: Sequence[TrendPoint]
    trend: Trend | None
    # The verdict against the joint's baseline (identification indicators only).
    verdict: IndicatorVerdict | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", tuple(self.history))

    @property
    def latest(self) -> TrendPoint | None:
        return self.history[-1] if self.history else None

    def to_dict(self) -> dict[str, Any]:
        last = self.latest
        return {
            "indicator": self.indicator,
            "label": indicator_info(self.indicator).label,
            "unit": self.unit,
            "latest_value": None if last is None else last.value,
            "latest_time": None if last is None else last.time_iso,
            "n_points": len(self.history),
            "trend": None if self.trend is None else self.trend.to_dict(),
            "history": [p.to_dict() for p in self.history],
            **({} if self.verdict is None else {"verdict": self.verdict.to_dict()}),
        }


@dataclass(frozen=True)
class JointReport:
    controller: str
    joint: str
    status: Status
    verdict_reason: str
    result: BacklashResult | None
    error: str | None
    thresholds: ThresholdSettings
    trend: Trend | None
    history: Sequence[TrendPoint]
    capture_path: str | None
    # The indicator judged and trended; derived from the result when not given.
    indicator: str | None = None
    # The judged value when there is no result in hand (a report built from the history).
    latest_value: float | None = None
    indicators: Sequence[IndicatorSummary] = ()
    # Plots of what the estimates were made from (e.g. measured vs predicted torque).
    evidence: Sequence[EvidencePlot] = ()
    # How the joint's last cycle ended (agent.history.records.Outcome), when known.
    outcome: str | None = None
    # NE 107 signal; None -> ne107_of(status, failed=the last cycle ended in an error).
    ne107: Ne107 | None = None
    # The identification indicators' verdict; None -> the worst of the indicators' verdicts.
    identification: JointIdentificationVerdict | None = None
    # The judged value's 95 % interval and ambiguity when there is no result in hand (from the
    # history's last point); with a result, the result's.
    latest_interval: tuple[float, float] | None = None
    latest_ambiguous: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", tuple(self.history))
        object.__setattr__(self, "indicators", tuple(self.indicators))
        object.__setattr__(self, "evidence", tuple(self.evidence))
        if self.identification is None:
            object.__setattr__(
                self,
                "identification",
                joint_verdict([s.verdict for s in self.indicators if s.verdict is not None]),
            )
        ident = self.identification
        # A joint with no backlash cycle takes its status from its identification verdict:
        # NE 107 'check function' would hide a worn joint from the asset-management system.
        if (
            ident is not None
            and self.indicator_only
            and self.status is Status.UNKNOWN
            and self.ne107 in (None, Ne107.CHECK_FUNCTION)
        ):
            object.__setattr__(self, "status", ident.status)
            object.__setattr__(self, "verdict_reason", ident.reason)
            object.__setattr__(self, "ne107", ident.ne107)
        if self.ne107 is None:
            object.__setattr__(self, "ne107", ne107_of(self.status, failed=self.failed))

    @property
    def failed(self) -> bool:
        """The last cycle or its analysis ended in an error; a refused or aborted cycle did not
        fail (it measured nothing). Without an outcome, any error counts."""
        if self.outcome is not None:
            return self.outcome == Outcome.ERROR
        return self.error is not None

    @property
    def recommendation(self) -> Recommendation:
        """What to do and by when (agent.report.action)."""
        signal, has_value = self.signal, self.value is not None
        if self.indicator_only and self.identification is not None:
            # judged on its identification: a verdict other than unknown is a valid estimate
            signal = self.identification.ne107
            has_value = self.identification.status is not Status.UNKNOWN
        return recommend(
            self.status,
            signal,
            self.trend,
            error=self.error,
            outcome=self.outcome,
            has_value=has_value,
            reason=self.verdict_reason,
        )

    @property
    def signal(self) -> Ne107:
        """The NE 107 signal (never None after construction)."""
        if self.ne107 is None:
            raise AgentError(f"{self.controller}/{self.joint}: a joint report without NE 107")
        return self.ne107

    @property
    def indicator_name(self) -> str:
        if self.indicator:
            return self.indicator
        if self.result is not None and self.result.backlash_rad is not None:
            return "backlash_rad"
        return "amplitude_rad_s"

    @property
    def value(self) -> float | None:
        if self.result is None:
            return self.latest_value
        if self.indicator_name == "backlash_rad":
            return self.result.backlash_rad
        return self.result.amplitude_rad_s

    @property
    def interval(self) -> tuple[float, float] | None:
        """The judged value's 95 % interval, when its estimate came with one."""
        if self.result is None:
            return self.latest_interval
        return self.result.interval_of(self.indicator_name)

    @property
    def ambiguous(self) -> bool:
        """The judged value's fit was ambiguous (equally good optima, different amplitudes)."""
        return self.latest_ambiguous if self.result is None else self.result.ambiguous

    @property
    def limits(self) -> tuple[float | None, float | None]:
        return limits_for(self.indicator_name, self.thresholds)

    @property
    def indicator_only(self) -> bool:
        """A joint with further indicators only: no backlash verdict to show."""
        return (
            self.result is None
            and self.value is None
            and not self.history
            and bool(self.indicators)
            and not self.error
        )

    def to_dict(self, evidence: bool = False) -> dict[str, Any]:
        return joint_to_dict(self, evidence)

    @property
    def forecast(self) -> str:
        """The forecast sentence of the judged indicator's trend."""
        if self.indicator_only:
            return ""
        return forecast_sentence(self.trend, len(self.history), passed_limit(self.status))


@dataclass(frozen=True)
class Report:
    created_at_iso: str
    machines: tuple[str, ...]
    joints: tuple[JointReport, ...]
    agent_version: str = __version__
    # the machine the agent runs on: reports from a plant's many agents say whose they are
    host: str = field(default_factory=socket.gethostname)
    # Joints with other indicators only (no backlash cycle): shown, but given no status.
    indicator_joints: tuple[JointReport, ...] = ()
    # One per report, kept by every copy of it (file, MQTT message): exactly-once accounting.
    message_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    # What the estimator warned about while making this report's estimates (the same lines
    # `jha identify` prints): a page that hid them would look surer than the terminal.
    warnings: tuple[str, ...] = ()
    # What the verdicts were judged against, when the page must say (a one-off identification).
    basis: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "machines", tuple(self.machines))
        object.__setattr__(self, "joints", tuple(self.joints))
        object.__setattr__(self, "indicator_joints", tuple(self.indicator_joints))
        object.__setattr__(self, "warnings", tuple(self.warnings))

    @property
    def worst_status(self) -> Status:
        """The worst backlash verdict (identification verdicts: identification_worst)."""
        return worst([j.status for j in self.joints])

    @property
    def identification_verdicts(self) -> dict[str, JointIdentificationVerdict]:
        """'controller/joint' -> the identification verdict, for every joint that has one."""
        return {
            f"{j.controller}/{j.joint}": j.identification
            for j in (*self.joints, *self.indicator_joints)
            if j.identification is not None
        }

    @property
    def identification_worst(self) -> Status | None:
        found = self.identification_verdicts
        return worst([v.status for v in found.values()]) if found else None

    def to_dict(self, evidence: bool = False) -> dict[str, Any]:
        """The JSON form (schema REPORT_SCHEMA); see report_to_dict."""
        return report_to_dict(self, evidence)

    def joints_of(self, machine: str) -> tuple[JointReport, ...]:
        """Every joint of one machine, judged ones first."""
        return tuple(j for j in (*self.joints, *self.indicator_joints) if j.controller == machine)


def limits_for(indicator: str, thresholds: ThresholdSettings) -> tuple[float | None, float | None]:
    """(watch, alert) limits of an indicator in SI units."""
    if indicator == "backlash_rad":
        return thresholds.backlash_watch_rad, thresholds.backlash_alert_rad
    if indicator == "amplitude_rad_s":
        return thresholds.amplitude_watch_rad_s, thresholds.amplitude_alert_rad_s
    return None, None


def joint_report(
    controller: str,
    joint: str,
    result: BacklashResult | None,
    thresholds: ThresholdSettings,
    history: Sequence[TrendPoint] = (),
    capture_path: str | None = None,
    error: str | None = None,
    indicator: str | None = None,
    indicators: Sequence[IndicatorSummary] = (),
    evidence: Sequence[EvidencePlot] = (),
    outcome: str | None = None,
    running: bool = False,
) -> JointReport:
    """Verdict and trend of one joint. `history` is the judged indicator's, this cycle included;
    `outcome` the cycle's (an error makes NE 107 'failure'); `running` while it moves."""
    verdict = assess_backlash(result, thresholds)
    name = indicator or verdict.indicator
    status, reason = verdict.status, verdict.reason
    if error is not None:
        # A dry run moved nothing on purpose: no failure to report, only that.
        said = error if outcome == Outcome.DRY_RUN else f"cycle failed: {error}"
        status, reason = Status.UNKNOWN, said
    watch, alert = limits_for(name, thresholds)
    failed = outcome == Outcome.ERROR if outcome is not None else error is not None
    return JointReport(
        controller=controller,
        joint=joint,
        status=status,
        verdict_reason=reason,
        result=result,
        error=error,
        thresholds=thresholds,
        trend=trend(history, watch, alert, name),
        history=history,
        capture_path=capture_path,
        indicator=name,
        indicators=indicators,
        evidence=evidence,
        outcome=outcome,
        ne107=ne107_of(status, running=running, failed=failed),
    )


# -- JSON --------------------------------------------------------------------------------------


def joint_to_dict(j: JointReport, evidence: bool = False) -> dict[str, Any]:
    watch, alert = j.limits
    found = {
        "controller": j.controller,
        "joint": j.joint,
        "status": j.status.value,
        "ne107": j.signal.value,
        "reason": j.verdict_reason,
        "recommendation": j.recommendation.to_dict(),
        "forecast": j.forecast,
        "indicator": j.indicator_name,
        "value": j.value,
        "unit": indicator_info(j.indicator_name).unit,
        "interval": None
        if j.interval is None
        else {"low": j.interval[0], "high": j.interval[1], "confidence": INTERVAL_CONFIDENCE},
        "ambiguous": j.ambiguous,
        "limits": {"watch": watch, "alert": alert},
        "error": j.error,
        "outcome": j.outcome,
        "capture_path": j.capture_path,
        "result": None if j.result is None else j.result.to_dict(evidence=evidence),
        "trend": None if j.trend is None else j.trend.to_dict(),
        "history": [p.to_dict() for p in j.history],
    }
    if j.indicators:
        found["indicators"] = [s.to_dict() for s in j.indicators]
    if j.identification is not None:
        found["identification"] = j.identification.to_dict()
    if evidence and j.evidence:
        found["evidence"] = [p.to_dict() for p in j.evidence]
    return found


def report_to_dict(report: Report, evidence: bool = False) -> dict[str, Any]:
    counts = {s.value: 0 for s in Status}
    signals = {n.value: 0 for n in Ne107}
    for j in report.joints:
        counts[j.status.value] += 1
        signals[j.signal.value] += 1
    found: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "message_id": report.message_id,
        "created_at": report.created_at_iso,
        "agent_version": report.agent_version,
        "host": report.host,
        "machines": list(report.machines),
        "summary": {
            "worst_status": report.worst_status.value,
            "counts": counts,
            "ne107_counts": signals,
        },
        "joints": [joint_to_dict(j, evidence) for j in report.joints],
    }
    if report.indicator_joints:
        found["indicator_joints"] = [joint_to_dict(j, evidence) for j in report.indicator_joints]
    judged = report.identification_verdicts
    if judged:
        found["summary"]["identification"] = verdict_counts(judged)
    if report.warnings:
        found["warnings"] = list(report.warnings)
    if report.basis:
        found["basis"] = report.basis
    return json_safe(found)


def json_safe(value: Any) -> Any:
    """NaN/inf -> null, numpy scalars and arrays -> Python numbers and lists."""
    if isinstance(value, float | np.floating):
        v = float(value)
        return v if math.isfinite(v) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [json_safe(v) for v in value]
    return value
