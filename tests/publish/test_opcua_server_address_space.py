"""The OPC UA health server's address space against a real asyncua Client over loopback: it
follows the reports, clients cannot write, and the health values of any report."""

from __future__ import annotations

import math
from datetime import UTC, timedelta
from typing import Any

import pytest
from asyncua import ua
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.opcua_server import HEALTH_NAMESPACE_URI
from agent.health.status import Ne107
from agent.publish.opcua_server.joint_health import health_of
from agent.publish.opcua_server.server import OpcUaHealthServer
from agent.publish.opcua_server.units import unece_unit_id, unit_of
from agent.report.model import Report, joint_report
from tests.support.publish.opcua_server import (
    JOINT_VARS,
    LIMITS,
    T0,
    Pki,
    client_for,
    first_report,
    history,
    read_joint,
    result,
    run,
    second_report,
)

# --- acceptance: the address space follows the reports --------------------------------------------


def test_address_space_follows_two_reports(server: OpcUaHealthServer, pki: Pki) -> None:
    first, second = first_report(), second_report()

    async def go() -> tuple[Any, ...]:
        await server.publish(first)
        c = await client_for(server.endpoint, pki.client)
        try:
            ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
            root = await c.nodes.objects.get_child(f"{ns}:JointHealth")
            robot = await root.get_child(f"{ns}:robot1")
            joints1 = sorted(
                [
                    (await n.read_browse_name()).Name
                    for n in await robot.get_children(nodeclassmask=ua.NodeClass.Object)
                ]
            )
            j1_vars = {
                (await n.read_browse_name()).Name
                for n in await (await robot.get_child(f"{ns}:J1")).get_children()
            }
            before = {j: await read_joint(c, ns, "robot1", j, JOINT_VARS) for j in ("J1", "J2")}
            j1_ind = await read_joint(
                c, ns, "robot1", "J1", ("backlash_rad", "amplitude_rad_s", "stiffness_nm_rad")
            )
            eu = await c.get_node(
                ua.NodeId("robot1/J1/backlash_rad/EngineeringUnits", ns)
            ).read_value()
            eu_k = await c.get_node(
                ua.NodeId("robot1/J1/stiffness_nm_rad/EngineeringUnits", ns)
            ).read_value()
            unit = await c.get_node(ua.NodeId("robot1/J1/stiffness_nm_rad/Unit", ns)).read_value()
            dtype = await c.get_node(ua.NodeId("robot1/J1/backlash_rad", ns)).read_data_type()
            await server.publish(second)
            after = {
                (ctrl, j): await read_joint(c, ns, ctrl, j, JOINT_VARS)
                for ctrl, j in (("robot1", "J1"), ("robot1", "J2"), ("cnc7", "X"))
            }
            worst = await c.get_node(ua.NodeId("robot1/WorstNe107Status", ns)).read_value()
            controllers = sorted(
                [
                    (await n.read_browse_name()).Name
                    for n in await root.get_children(nodeclassmask=ua.NodeClass.Object)
                ]
            )
            x_amp = await c.get_node(ua.NodeId("cnc7/X/amplitude_rad_s", ns)).read_value()
            report_id = await c.get_node(ua.NodeId("ReportMessageId", ns)).read_value()
        finally:
            await c.disconnect()
        return (
            joints1,
            j1_vars,
            before,
            j1_ind,
            eu,
            eu_k,
            unit,
            dtype,
            after,
            worst,
            controllers,
            x_amp,
            report_id,
        )

    (
        joints1,
        j1_vars,
        before,
        j1_ind,
        eu,
        eu_k,
        unit,
        dtype,
        after,
        worst,
        controllers,
        x_amp,
        report_id,
    ) = run(go())
    assert joints1 == ["J1", "J2"]
    assert set(JOINT_VARS) | {"backlash_rad", "amplitude_rad_s", "stiffness_nm_rad"} <= j1_vars
    # First report: J1 below the watch limit, J2 between watch and alert.
    assert (before["J1"]["Ne107Status"], before["J1"]["Ne107Letter"]) == ("normal", "N")
    assert (before["J2"]["Ne107Status"], before["J2"]["Ne107Letter"]) == (
        "maintenance_required",
        "M",
    )
    assert (before["J1"]["Status"], before["J2"]["Status"]) == ("ok", "watch")
    assert j1_ind == {"backlash_rad": 0.6e-3, "amplitude_rad_s": 0.05, "stiffness_nm_rad": 6000.0}
    assert dtype == ua.NodeId(ua.ObjectIds.Double)
    assert eu.UnitId == unece_unit_id("C81") == 4405297 and eu.DisplayName.Text == "rad"
    assert eu_k.UnitId == -1 and eu_k.DisplayName.Text == unit == "N·m/rad"
    # Rising 0.1 mrad a week: the watch limit (1 mrad) is 4 weeks after 0.6 mrad.
    assert before["J1"]["ForecastLimit"] == "watch"
    assert before["J1"]["ForecastDays"] == pytest.approx(28.0, rel=1e-6)
    assert before["J1"]["ForecastDaysLow"] - 1e-6 <= 28.0 <= before["J1"]["ForecastDaysHigh"] + 1e-6
    assert before["J2"]["ForecastLimit"] == "alert"
    assert before["J2"]["ForecastDays"] == pytest.approx(42.0, rel=1e-6)
    assert before["J1"]["LastEstimateTime"].replace(tzinfo=UTC) == T0 + timedelta(days=14)
    assert before["J1"]["ReportMessageId"] == first.message_id
    assert before["J1"]["Error"] == ""
    # Second report: the values follow, a failed cycle shows F, a new controller appears.
    assert (after[("robot1", "J1")]["Status"], after[("robot1", "J1")]["Ne107Letter"]) == (
        "alert",
        "S",
    )
    j2 = after[("robot1", "J2")]
    assert (j2["Ne107Status"], j2["Ne107Letter"], j2["Error"]) == (
        "failure",
        "F",
        "capture stalled",
    )
    assert math.isnan(j2["ForecastDays"]) and j2["ForecastLimit"] == ""
    assert after[("cnc7", "X")]["Indicator"] == "amplitude_rad_s" and x_amp == 0.02
    assert {v["ReportMessageId"] for v in after.values()} == {second.message_id} == {report_id}
    assert worst == "failure"
    assert controllers == ["cnc7", "robot1"]


@pytest.mark.security("OPC UA health server is read-only for clients")
def test_clients_cannot_write(server: OpcUaHealthServer, pki: Pki) -> None:
    async def go() -> tuple[set[int], Any]:
        await server.publish(first_report())
        c = await client_for(server.endpoint, pki.client)
        try:
            ns = await c.get_namespace_index(HEALTH_NAMESPACE_URI)
            node = c.get_node(ua.NodeId("robot1/J1/Ne107Status", ns))
            levels = await node.get_access_level() | await node.get_user_access_level()
            with pytest.raises(ua.UaStatusCodeError) as refused:
                await node.write_value("normal")
            return set(levels), refused.value.code
        finally:
            await c.disconnect()

    levels, code = run(go())
    assert levels == {ua.AccessLevel.CurrentRead}
    assert code in (ua.StatusCodes.BadUserAccessDenied, ua.StatusCodes.BadNotWritable)


# --- the pure parts -------------------------------------------------------------------------------


def test_health_values_of_a_report() -> None:
    health = {(h.controller, h.joint): h for h in health_of(second_report())}
    j2 = health[("robot1", "J2")]
    assert j2.ne107 is Ne107.FAILURE and j2.last_estimate is None
    assert math.isnan(next(i.value for i in j2.indicators if i.name == "backlash_rad"))
    assert health[("robot1", "J1")].to_dict()["ne107_letter"] == "S"
    assert unit_of("stiffness_nm_rad") == "N·m/rad" and unit_of("backlash_rad") == "rad"
    assert unit_of("friction_nm", "Nm") == "N·m" and unit_of("mystery") == ""


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    values=st.lists(st.floats(0.0, 3e-3, allow_nan=False), min_size=0, max_size=6),
    latest=st.one_of(st.none(), st.floats(0.0, 3e-3)),
    error=st.sampled_from([None, "capture stalled"]),
)
def test_health_follows_any_report(
    values: list[float], latest: float | None, error: str | None
) -> None:
    j = joint_report(
        "r",
        "j",
        None if latest is None else result(latest),
        LIMITS,
        history(values),
        error=error,
        indicator="backlash_rad",
    )
    (h,) = health_of(Report(T0.isoformat(), ("r",), (j,)))
    assert h.ne107 is j.ne107 and h.status is j.status
    assert (h.error != "") == (error is not None)
    assert all(i.unit for i in h.indicators)
    if h.forecast_limit:
        assert h.forecast_days_low <= h.forecast_days * (1 + 1e-9) + 1e-9
        assert h.forecast_days <= h.forecast_days_high * (1 + 1e-9) + 1e-9
    else:
        assert math.isnan(h.forecast_days) and math.isnan(h.forecast_days_high)
    assert (h.last_estimate is None) == (not values)
