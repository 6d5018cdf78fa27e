"""The identification verdicts in the OPC UA health server, beside the backlash ones.

Under each joint that has identification indicators (agent.health.identification), in the
namespace and node-id scheme of agent.publish.opcua_server.nodes:

  <controller>/<joint>/Identification           object: the joint's identification verdict
    Ne107Status, Ne107Letter, Status, StatusReason, Indicator (the worst)   String, as the joint's
    ForecastIndicator, ForecastLimit, ForecastText                          String ("" if none)
    ForecastDays, ForecastDaysLow, ForecastDaysHigh                         Double (NaN: none;
                                                                            +inf high: maybe never)
    <indicator>                                  object, e.g. coulomb_friction_nm
      Status, Ne107Letter, StatusReason          String
      Baseline, WatchLimit, AlertLimit           Double, SI, with EngineeringUnits (NaN until the
                                                 baseline is set)
      Change                                     Double, value / baseline - 1 (unit "1")

Read-only for clients like every other variable; written in the same report application.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, cast

from asyncua import ua

from agent.health.display import indicator_info
from agent.health.identification.joint import JointIdentificationVerdict
from agent.publish.opcua_server.nodes import HealthAddressSpace
from agent.report.model import Report

_STRINGS = (
    "Ne107Status",
    "Ne107Letter",
    "Status",
    "StatusReason",
    "Indicator",
    "ForecastIndicator",
    "ForecastLimit",
    "ForecastText",
)
_DOUBLES = ("ForecastDays", "ForecastDaysLow", "ForecastDaysHigh")
_PER_STRINGS = ("Status", "Ne107Letter", "StatusReason")
_PER_LIMITS = ("Baseline", "WatchLimit", "AlertLimit")
FOLDER = "Identification"


def _num(value: float | None) -> float:
    return float(value) if value is not None and math.isfinite(value) else math.nan


def identification_values(v: JointIdentificationVerdict) -> dict[tuple[str, ...], Any]:
    """Relative node path (under the joint) -> value, for one joint's verdict."""
    soon = v.forecast
    fc = None if soon is None else soon.forecast
    found: dict[tuple[str, ...], Any] = {
        ("Ne107Status",): v.ne107.value, ("Ne107Letter",): v.ne107.letter,
        ("Status",): v.status.value, ("StatusReason",): v.reason,
        ("Indicator",): v.worst.indicator,
        ("ForecastIndicator",): "" if soon is None or fc is None else soon.indicator,
        ("ForecastLimit",): "" if fc is None else fc.limit_name.value,
        ("ForecastText",): v.forecast_text,
        ("ForecastDays",): math.nan if fc is None else fc.days,
        ("ForecastDaysLow",): math.nan if fc is None else fc.days_low,
        ("ForecastDaysHigh",): (math.nan if fc is None
                                else math.inf if fc.days_high is None else fc.days_high),
    }  # fmt: skip
    for w in v.indicators:
        found[(w.indicator, "Status")] = w.status.value
        found[(w.indicator, "Ne107Letter")] = w.ne107.letter
        found[(w.indicator, "StatusReason")] = w.reason
        found[(w.indicator, "Baseline")] = _num(None if w.baseline is None else w.baseline.value)
        found[(w.indicator, "WatchLimit")] = _num(w.watch)
        found[(w.indicator, "AlertLimit")] = _num(w.alert)
        found[(w.indicator, "Change")] = _num(w.change)
    return found


class IdentificationAddressSpace(HealthAddressSpace):
    """The health address space plus each joint's Identification object."""

    async def apply(self, report: Report, now: datetime | None = None) -> int:
        stamp = now or datetime.now(UTC)
        count = await super().apply(report, stamp)
        writes: list[tuple[ua.NodeId, ua.Variant]] = []
        for j in (*report.joints, *report.indicator_joints):
            v = j.identification
            if v is None:
                continue
            base = (j.controller, j.joint, FOLDER)
            await self._ensure_identification(j.controller, j.joint, v)
            for rel, value in identification_values(v).items():
                vtype = ua.VariantType.String if isinstance(value, str) else ua.VariantType.Double
                writes.append((self.node_id(*base, *rel), ua.Variant(value, vtype)))
        for node_id, variant in writes:
            when = cast(ua.DateTime, stamp)
            dv = ua.DataValue(variant, SourceTimestamp=when, ServerTimestamp=when)
            await self.server.write_attribute_value(node_id, dv)
        return count

    async def _ensure_identification(
        self, controller: str, joint: str, v: JointIdentificationVerdict
    ) -> None:
        parent = await self._object(self.built_root(), (controller,))
        joint_node = await self._object(parent, (controller, joint))
        base = (controller, joint, FOLDER)
        node = await self._object(joint_node, base)
        for name in _STRINGS:
            await self._variable(node, (*base, name), "", ua.VariantType.String)
        for name in _DOUBLES:
            await self._variable(node, (*base, name), math.nan, ua.VariantType.Double)
        for w in v.indicators:
            ind = await self._object(node, (*base, w.indicator))
            for name in _PER_STRINGS:
                await self._variable(ind, (*base, w.indicator, name), "", ua.VariantType.String)
            unit = indicator_info(w.indicator).unit
            for name in _PER_LIMITS:
                await self._variable(
                    ind, (*base, w.indicator, name), math.nan, ua.VariantType.Double, unit=unit
                )
            await self._variable(
                ind, (*base, w.indicator, "Change"), math.nan, ua.VariantType.Double, unit="1"
            )
