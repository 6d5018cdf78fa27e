"""Address space of the OPC UA health server: the nodes, and writing a report's values into them
(what is shown of a joint: agent.publish.opcua_server.joint_health).

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
from datetime import UTC, datetime
from typing import Any, cast

from asyncua import Server, ua
from asyncua.common.node import Node

from agent.errors import AgentError
from agent.health.status import Ne107, Status
from agent.publish.opcua_server.joint_health import (
    JointHealth,
    health_of,
    message_id_of,
    parse_time,
)
from agent.publish.opcua_server.units import eu_information
from agent.report.model import Report

# OPC UA encodes DateTime as 100 ns ticks since 1601; 0 is its null value (Part 6, 5.2.2.5).
NULL_TIME = datetime(1601, 1, 1, tzinfo=UTC)

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

    def built_root(self) -> Node:
        """The JointHealth folder; an AgentError before build()."""
        if self.root is None:
            raise AgentError("the OPC UA health address space is used before build()")
        return self.root

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
        self.built_root()  # build() first: nothing is written into a missing folder
        stamp = now or datetime.now(UTC)
        health = health_of(report)
        writes: list[tuple[ua.NodeId, ua.Variant]] = [
            (
                self.node_id("ReportMessageId"),
                ua.Variant(message_id_of(report), ua.VariantType.String),
            ),
            (
                self.node_id("ReportCreatedAt"),
                ua.Variant(parse_time(report.created_at_iso) or NULL_TIME, ua.VariantType.DateTime),
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
        node = await self._object(self.built_root(), (controller,))
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
