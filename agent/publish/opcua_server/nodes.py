"""Address space of the OPC UA health server, and the values a report puts in it.

Layout (namespace `urn:jha:health`, string node ids `<controller>/<joint>/<name>`):

  Objects/JointHealth                         folder
    ReportMessageId, ReportCreatedAt          the last report applied
    <controller>                              object
      WorstStatus, WorstNe107Status
      <joint>                                 object
        Ne107Status   String  normal | maintenance_required | out_of_specification | failure |
                              check_function
        Ne107Letter   String  N | M | S | F | C
        Status        String  ok | watch | alert | unknown
        StatusReason, Indicator (the judged one), Error ("" when none)
        <indicator>   Double  SI value, e.g. backlash_rad, amplitude_rad_s, stiffness_nm_rad;
                              properties EngineeringUnits (UNECE EUInformation) and Unit
        ForecastDays, ForecastDaysLow, ForecastDaysHigh   Double (NaN: no forecast;
                              +inf high: the limit may never be reached), ForecastLimit String
        LastEstimateTime DateTime (1601-01-01, OPC UA's null DateTime, before the first
                              estimate), ReportMessageId String

Every variable is read-only for clients (AccessLevel CurrentRead); only the agent writes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from asyncua import Server, ua
from asyncua.common.node import Node

from agent.health.status import Ne107, Status, ne107_of
from agent.health.verdicts import indicator_info
from agent.report.model import JointReport, Report

# OPC UA encodes DateTime as 100 ns ticks since 1601; 0 is its null value (Part 6, 5.2.2.5).
NULL_TIME = datetime(1601, 1, 1, tzinfo=UTC)
CEFACT_URI = "http://www.opcfoundation.org/UA/units/un/cefact"
# SI unit text -> (UN/CEFACT common code, description); OPC UA Part 8 derives the UnitId.
UNECE_UNITS: dict[str, tuple[str, str]] = {
    "rad": ("C81", "radian"),
    "rad/s": ("2A", "radian per second"),
    "rad/s²": ("2B", "radian per second squared"),
    "N·m": ("NU", "newton metre"),
    "N·m/rad": ("", "newton metre per radian"),
    "N·m·s/rad": ("", "newton metre second per radian"),
    "kg·m²": ("B32", "kilogram metre squared"),
    "s": ("SEC", "second"),
    "Hz": ("HTZ", "hertz"),
    "A": ("AMP", "ampere"),
    "1": ("C62", "one"),
}
# Unit by the name's suffix, for indicators the display table does not know.
_SUFFIX_UNITS = (
    ("_nm_s_rad", "N·m·s/rad"),
    ("_nm_rad", "N·m/rad"),
    ("_rad_s2", "rad/s²"),
    ("_rad_s", "rad/s"),
    ("_rad", "rad"),
    ("_nm", "N·m"),
    ("_kg_m2", "kg·m²"),
    ("_hz", "Hz"),
    ("_s", "s"),
    ("_a", "A"),
)
_UNIT_ALIASES = {
    "Nm": "N·m",
    "Nm/rad": "N·m/rad",
    "N*m": "N·m",
    "N*m/rad": "N·m/rad",
    "Nms/rad": "N·m·s/rad",
    "kg*m^2": "kg·m²",
    "kgm2": "kg·m²",
    "": "",
}


def unit_of(indicator: str, given: str = "") -> str:
    """The SI unit text of an indicator: the one given, else the display table's, else by the
    name's unit suffix (`stiffness_nm_rad` -> N·m/rad)."""
    unit = _UNIT_ALIASES.get(given, given) or indicator_info(indicator).unit
    if unit:
        return unit
    lower = indicator.lower()
    return next((u for suffix, u in _SUFFIX_UNITS if lower.endswith(suffix)), "")


def unece_unit_id(code: str) -> int:
    """OPC UA Part 8: the UnitId is the common code's characters as big-endian bytes."""
    value = 0
    for c in code.upper():
        value = (value << 8) | ord(c)
    return value


def eu_information(unit: str) -> ua.EUInformation:
    code, description = UNECE_UNITS.get(unit, ("", unit))
    return ua.EUInformation(
        NamespaceUri=CEFACT_URI,
        UnitId=unece_unit_id(code) if code else -1,
        DisplayName=ua.LocalizedText(unit),
        Description=ua.LocalizedText(description),
    )


@dataclass(frozen=True)
class IndicatorValue:
    name: str
    value: float  # SI; NaN when there is no valid value
    unit: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "unit": self.unit}


@dataclass(frozen=True)
class JointHealth:
    """What the server shows of one joint, derived from a report."""

    controller: str
    joint: str
    ne107: Ne107
    status: Status
    reason: str
    indicator: str
    error: str
    indicators: tuple[IndicatorValue, ...]
    forecast_limit: str
    forecast_days: float
    forecast_days_low: float
    forecast_days_high: float
    last_estimate: datetime | None
    message_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "controller": self.controller,
            "joint": self.joint,
            "ne107": self.ne107.value,
            "ne107_letter": self.ne107.letter,
            "status": self.status.value,
            "reason": self.reason,
            "indicator": self.indicator,
            "error": self.error,
            "indicators": [i.to_dict() for i in self.indicators],
            "forecast_limit": self.forecast_limit,
            "forecast_days": self.forecast_days,
            "forecast_days_low": self.forecast_days_low,
            "forecast_days_high": self.forecast_days_high,
            "last_estimate": None if self.last_estimate is None else self.last_estimate.isoformat(),
            "message_id": self.message_id,
        }


def _finite_or_nan(value: float | None) -> float:
    return float(value) if value is not None and math.isfinite(value) else math.nan


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def signal_of(j: JointReport) -> Ne107:
    """The joint's NE 107 signal: the report's own when it carries one."""
    given = getattr(j, "ne107", None)
    if isinstance(given, Ne107):
        return given
    return ne107_of(j.status, failed=j.error is not None)


def message_id_of(report: Report) -> str:
    return str(getattr(report, "message_id", "") or "")


def joint_health(report: Report, j: JointReport) -> JointHealth:
    values: dict[str, IndicatorValue] = {}
    judged_unit = unit_of(j.indicator_name)
    values[j.indicator_name] = IndicatorValue(
        j.indicator_name, _finite_or_nan(j.value), judged_unit
    )
    if j.result is not None:  # both forms of the backlash estimate when there is one
        values.setdefault(
            "amplitude_rad_s",
            IndicatorValue("amplitude_rad_s", _finite_or_nan(j.result.amplitude_rad_s), "rad/s"),
        )
        if j.result.backlash_rad is not None:
            values.setdefault(
                "backlash_rad",
                IndicatorValue("backlash_rad", _finite_or_nan(j.result.backlash_rad), "rad"),
            )
    times = [_time(j.history[-1].time_iso)] if j.history else []
    for s in j.indicators:
        latest = s.latest
        values[s.indicator] = IndicatorValue(
            s.indicator,
            _finite_or_nan(None if latest is None else latest.value),
            unit_of(s.indicator, s.unit),
        )
        if latest is not None:
            times.append(_time(latest.time_iso))
    known = [t for t in times if t is not None]
    limit, days, low, high = "", math.nan, math.nan, math.nan
    if j.trend is not None:
        fc = j.trend.forecast_watch
        if fc is None or fc.reached or j.status is not Status.OK:
            fc = j.trend.forecast_alert or fc
        if fc is not None:
            limit, days, low = fc.limit_name, fc.days, fc.days_low
            high = math.inf if fc.days_high is None else fc.days_high
    return JointHealth(
        controller=j.controller,
        joint=j.joint,
        ne107=signal_of(j),
        status=j.status,
        reason=j.verdict_reason,
        indicator=j.indicator_name,
        error=j.error or "",
        indicators=tuple(values.values()),
        forecast_limit=limit,
        forecast_days=days,
        forecast_days_low=low,
        forecast_days_high=high,
        last_estimate=max(known) if known else None,
        message_id=message_id_of(report),
    )


def health_of(report: Report) -> tuple[JointHealth, ...]:
    return tuple(joint_health(report, j) for j in (*report.joints, *report.indicator_joints))


_STRINGS = (
    "Ne107Status",
    "Ne107Letter",
    "Status",
    "StatusReason",
    "Indicator",
    "Error",
    "ForecastLimit",
    "ReportMessageId",
)
_DOUBLES = ("ForecastDays", "ForecastDaysLow", "ForecastDaysHigh")


def _string_values(h: JointHealth) -> dict[str, str]:
    return {
        "Ne107Status": h.ne107.value,
        "Ne107Letter": h.ne107.letter,
        "Status": h.status.value,
        "StatusReason": h.reason,
        "Indicator": h.indicator,
        "Error": h.error,
        "ForecastLimit": h.forecast_limit,
        "ReportMessageId": h.message_id,
    }


class HealthAddressSpace:
    """Creates nodes as controllers, joints and indicators appear; writes a report's values."""

    def __init__(self, server: Server, namespace_index: int) -> None:
        self.server = server
        self.ns = namespace_index
        self.root: Node | None = None
        self._objects: dict[str, Node] = {}
        self._variables: set[str] = set()

    def node_id(self, *path: str) -> ua.NodeId:
        return ua.NodeId(ua.String("/".join(path)), ua.Int16(self.ns))

    async def build(self) -> None:
        objects = self.server.nodes.objects
        self.root = await objects.add_folder(self.node_id("JointHealth"), f"{self.ns}:JointHealth")
        await self._variable(self.root, ("ReportMessageId",), "", ua.VariantType.String)
        await self._variable(self.root, ("ReportCreatedAt",), NULL_TIME, ua.VariantType.DateTime)

    async def _object(self, parent: Node, path: tuple[str, ...]) -> Node:
        key = "/".join(path)
        found = self._objects.get(key)
        if found is None:
            found = await parent.add_object(
                self.node_id(*path), ua.QualifiedName(path[-1], self.ns)
            )
            self._objects[key] = found
        return found

    async def _variable(
        self,
        parent: Node,
        path: tuple[str, ...],
        value: Any,
        vtype: ua.VariantType,
        unit: str | None = None,
    ) -> None:
        key = "/".join(path)
        if key in self._variables:
            return
        var = await parent.add_variable(
            self.node_id(*path), ua.QualifiedName(path[-1], self.ns), ua.Variant(value, vtype)
        )
        if unit is not None:
            await var.add_property(
                self.node_id(*path, "EngineeringUnits"),
                ua.QualifiedName("EngineeringUnits", 0),
                eu_information(unit),
                datatype=ua.NodeId(ua.Int32(ua.ObjectIds.EUInformation)),
            )
            await var.add_property(
                self.node_id(*path, "Unit"),
                ua.QualifiedName("Unit", self.ns),
                ua.Variant(unit, ua.VariantType.String),
            )
        self._variables.add(key)

    async def apply(self, report: Report, now: datetime | None = None) -> int:
        """Create what is new, then write every value of the report; returns joints written."""
        assert self.root is not None, "build() first"
        stamp = now or datetime.now(UTC)
        health = health_of(report)
        writes: list[tuple[ua.NodeId, ua.Variant]] = [
            (
                self.node_id("ReportMessageId"),
                ua.Variant(message_id_of(report), ua.VariantType.String),
            ),
            (
                self.node_id("ReportCreatedAt"),
                ua.Variant(_time(report.created_at_iso) or NULL_TIME, ua.VariantType.DateTime),
            ),
        ]
        for controller in _unique(h.controller for h in health):
            await self._ensure_controller(controller)
            mine = [h for h in health if h.controller == controller]
            judged = [
                h
                for h in mine
                if h.joint in {j.joint for j in report.joints if j.controller == controller}
            ]
            worst = max((h.status for h in judged), key=lambda s: s.severity, default=Status.OK)
            # A joint's identification verdict counts too (friction or stiffness out of
            # specification is as urgent as backlash), except "baseline being set" (C): that is
            # no fault, and by NE 107 precedence it would hide an S of the backlash.
            identified = [
                j.identification.ne107
                for j in (*report.joints, *report.indicator_joints)
                if j.controller == controller
                and j.identification is not None
                and j.identification.ne107 is not Ne107.CHECK_FUNCTION
            ]
            worst_ne107 = max(
                (*(h.ne107 for h in mine), *identified), key=_ne107_rank, default=Ne107.NORMAL
            )
            writes += [
                (
                    self.node_id(controller, "WorstStatus"),
                    ua.Variant(worst.value, ua.VariantType.String),
                ),
                (
                    self.node_id(controller, "WorstNe107Status"),
                    ua.Variant(worst_ne107.value, ua.VariantType.String),
                ),
            ]
        for h in health:
            await self._ensure_joint(h)
            base = (h.controller, h.joint)
            writes += [
                (self.node_id(*base, name), ua.Variant(v, ua.VariantType.String))
                for name, v in _string_values(h).items()
            ]
            writes += [
                (self.node_id(*base, name), ua.Variant(v, ua.VariantType.Double))
                for name, v in zip(
                    _DOUBLES,
                    (h.forecast_days, h.forecast_days_low, h.forecast_days_high),
                    strict=True,
                )
            ]
            writes += [
                (self.node_id(*base, i.name), ua.Variant(i.value, ua.VariantType.Double))
                for i in h.indicators
            ]
            writes.append(
                (
                    self.node_id(*base, "LastEstimateTime"),
                    ua.Variant(h.last_estimate or NULL_TIME, ua.VariantType.DateTime),
                )
            )
        for node_id, variant in writes:
            when = cast(ua.DateTime, stamp)  # asyncua's alias of datetime
            dv = ua.DataValue(variant, SourceTimestamp=when, ServerTimestamp=when)
            await self.server.write_attribute_value(node_id, dv)
        return len(health)

    async def _ensure_controller(self, controller: str) -> Node:
        assert self.root is not None
        node = await self._object(self.root, (controller,))
        for name in ("WorstStatus", "WorstNe107Status"):
            await self._variable(node, (controller, name), "", ua.VariantType.String)
        return node

    async def _ensure_joint(self, h: JointHealth) -> None:
        parent = await self._ensure_controller(h.controller)
        node = await self._object(parent, (h.controller, h.joint))
        base = (h.controller, h.joint)
        for name in _STRINGS:
            await self._variable(node, (*base, name), "", ua.VariantType.String)
        for name in _DOUBLES:
            await self._variable(node, (*base, name), math.nan, ua.VariantType.Double)
        await self._variable(node, (*base, "LastEstimateTime"), NULL_TIME, ua.VariantType.DateTime)
        for i in h.indicators:
            await self._variable(
                node, (*base, i.name), math.nan, ua.VariantType.Double, unit=i.unit
            )


_NE107_ORDER = (
    Ne107.NORMAL,
    Ne107.MAINTENANCE_REQUIRED,
    Ne107.OUT_OF_SPECIFICATION,
    Ne107.CHECK_FUNCTION,
    Ne107.FAILURE,
)


def _ne107_rank(signal: Ne107) -> int:
    """NE 107's default order of precedence: F over C over S over M over N."""
    return _NE107_ORDER.index(signal)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
