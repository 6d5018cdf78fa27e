"""Verdicts on the identification indicators as an arm wears, shown in every report form (JSON,
HTML, the terminal table, MQTT, the OPC UA health server).

The end-to-end test identifies the elastic 2-dof planar arm of Zollo, Lopez et al. 2014 six times
(the fast path of tests/kinds/test_identification_cycle.py: simulate_excitation +
analyze_identification, one torque-noise seed each) while joint_2's friction wears up; the
healthy joint_1 gives only the noise of six identifications."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from asyncua import Server, ua

from agent.config.opcua_server import HEALTH_NAMESPACE_URI
from agent.health.identification.joint import joint_verdict
from agent.health.status import Ne107, Status
from agent.history.identification import assess_history
from agent.history.records import Estimate
from agent.history.store import HistoryStore
from agent.kinds.identification.analysis import analyze_identification, excitation_cycle
from agent.publish.mqtt.payloads import report_messages
from agent.publish.opcua_server.identification import IdentificationAddressSpace
from agent.report.history import report_from_history
from agent.report.html.page import render_html
from agent.report.model import report_to_dict
from agent.report.table import summary_table
from drivers.sim.excitation import simulate_excitation
from drivers.sim.settings import SimJointWear, SimRobotSettings
from tests.support.identification.captures import PLANAR, controller, cycle_settings
from tests.support.identification.history import T0, WEEK, record_identification
from tests.support.summary import record

# joint_2's true friction (Coulomb, viscous, Stribeck) per identification, against the robot
# file: three healthy ones set the baseline, then it wears.
FRICTION_SCALE = (1.0, 1.0, 1.0, 1.12, 1.4, 1.75)


def identify_worn_arm() -> list[dict[str, tuple[Estimate, ...]]]:
    cycle = excitation_cycle(controller())
    found = []
    for i, scale in enumerate(FRICTION_SCALE):
        truth = SimRobotSettings(
            robot=PLANAR, torque_noise_nm=0.2, wear={"joint_2": SimJointWear(friction_scale=scale)}
        )
        capture = simulate_excitation(cycle, truth, seed=11 + i, machine="cell1")
        found.append(dict(analyze_identification(capture, cycle_settings()).estimates))
    return found


@pytest.fixture(scope="module")
def identifications() -> list[dict[str, tuple[Estimate, ...]]]:
    return identify_worn_arm()


# --- the simulated arm wears ---------------------------------------------------------------------


def test_friction_wearing_up_turns_watch_then_alert_at_the_right_identification(
    identifications: list[dict[str, tuple[Estimate, ...]]], tmp_path: Path
) -> None:
    seen: dict[str, list[tuple[str, str]]] = {"joint_1": [], "joint_2": []}
    forecasts = []
    with HistoryStore(tmp_path / "history.sqlite") as store:
        for i, by_joint in enumerate(identifications):
            record_identification(store, T0 + i * WEEK, by_joint)
            for joint in seen:
                v = joint_verdict(list(assess_history(store, "cell1", joint).values()))
                assert v is not None
                seen[joint].append((v.status.value, v.ne107.letter))
                if joint == "joint_2":
                    forecasts.append(v)
        report = report_from_history(store, "cell1", created_at=T0 + 5 * WEEK)

    # Three identifications set the baseline (NE 107 C until then); +12 % is no warning;
    # +40 % is past the watch limit (+30 %): M; +75 % past the alert limit (+60 %): S.
    assert seen["joint_2"] == [
        ("unknown", "C"),
        ("unknown", "C"),
        ("ok", "N"),
        ("ok", "N"),
        ("watch", "M"),
        ("alert", "S"),
    ]
    # The healthy joint: only the noise of six identifications, never a warning.
    assert seen["joint_1"] == [("unknown", "C")] * 2 + [("ok", "N")] * 4

    at_watch, at_alert = forecasts[4], forecasts[5]
    fc_w = at_watch.worst
    assert fc_w.indicator in ("coulomb_friction_nm", "viscous_friction_nm_s_rad")
    assert fc_w.change is not None and 0.3 < fc_w.change < 0.6 and fc_w.significant
    # At WATCH the forecast says when the alert limit comes, from the trend of the history.
    soon = at_watch.forecast
    assert soon is not None and soon.forecast is not None and soon.trend is not None
    fc = soon.forecast
    assert fc.limit_name == "alert" and fc.days > 0 and fc.days_low <= fc.days
    assert soon.alert is not None
    assert fc.days == pytest.approx((soon.alert - soon.trend.level_now) / soon.trend.slope_per_day)
    assert "reaches the alert limit" in at_watch.forecast_text
    # The line of the whole history (three flat weeks, then the wear) is shallower than the
    # wear itself: the alert came after 7 days, the forecast said more, with an interval that
    # starts no later than the line's time.
    assert fc.days_low <= fc.days and (fc.days_high is None or fc.days <= fc.days_high)
    assert at_alert.forecast is None and "no further limit" in at_alert.forecast_text
    record(
        "identification verdicts",
        "planar arm joint_2 friction x1.40: WATCH (M)",
        f"alert forecast {fc.days:.3g} d (from {fc.days_low:.3g} d); crossed after 7 d",
    )

    # Every form of the report carries the verdict.
    doc = report_to_dict(report)
    joints = {j["joint"]: j for j in doc["indicator_joints"]}
    j2 = joints["joint_2"]
    assert (j2["status"], j2["ne107"]) == ("alert", "out_of_specification")
    assert j2["identification"]["status"] == "alert"
    assert j2["identification"]["ne107"] == {"status": "out_of_specification", "letter": "S"}
    by_name = {v["indicator"]: v for v in j2["identification"]["indicators"]}
    assert by_name["coulomb_friction_nm"]["baseline"]["source"] == "median"
    assert by_name["stiffness_nm_rad"]["status"] == "ok"  # friction wore, stiffness did not
    assert joints["joint_1"]["identification"]["status"] == "ok"
    assert doc["summary"]["identification"]["worst_status"] == "alert"
    assert doc["summary"]["identification"]["ne107_counts"]["out_of_specification"] == 1
    json.dumps(doc, allow_nan=False)
    table = summary_table(report)
    assert "cell1/joint_2 ident" in table and "ALERT" in table and "fc >= alert +60 %" in table
    assert "identification: ALERT" in table
    page = render_html(report)
    assert page.count("<h4>Identification verdict") == 2 and "+60 %" in page
    health = {
        json.loads(m.payload)["joint"]: json.loads(m.payload)
        for m in report_messages(report, "jha", "q")
        if m.kind == "health"
    }
    ident = health["joint_2"]["identification"]
    assert ident["status"] == "alert" and ident["ne107"]["letter"] == "S"
    assert health["joint_2"]["ne107"]["letter"] == "S"
    assert {i["name"] for i in ident["indicators"]} == {
        "coulomb_friction_nm", "viscous_friction_nm_s_rad", "stiffness_nm_rad",
        "torque_nmse_nm"}  # fmt: skip


def test_the_opcua_health_server_shows_the_identification_verdict(
    identifications: list[dict[str, tuple[Estimate, ...]]], tmp_path: Path
) -> None:
    with HistoryStore(tmp_path / "history.sqlite") as store:
        for i, by_joint in enumerate(identifications[:5]):
            record_identification(store, T0 + i * WEEK, by_joint)
        report = report_from_history(store, "cell1", created_at=T0 + 4 * WEEK)

    async def go() -> dict[str, Any]:
        server = Server()  # its address space only: nothing listens
        await server.init()
        ns = await server.register_namespace(HEALTH_NAMESPACE_URI)
        space = IdentificationAddressSpace(server, ns)
        await space.build()
        await space.apply(report)
        names = (
            "Status",
            "Ne107Letter",
            "Indicator",
            "ForecastLimit",
            "ForecastDays",
            "coulomb_friction_nm/Baseline",
            "coulomb_friction_nm/WatchLimit",
            "coulomb_friction_nm/Status",
            "stiffness_nm_rad/AlertLimit",
        )
        found = {
            n: await server.get_node(
                ua.NodeId(f"cell1/joint_2/Identification/{n}", ns)
            ).read_value()
            for n in names
        }
        found["joint"] = await server.get_node(
            ua.NodeId("cell1/joint_2/Ne107Letter", ns)
        ).read_value()
        eu = await server.get_node(
            ua.NodeId(
                "cell1/joint_2/Identification/stiffness_nm_rad/AlertLimit/EngineeringUnits", ns
            )
        ).read_value()
        found["eu"] = eu.DisplayName.Text
        # The same joint with a backlash verdict that is normal: the controller's worst NE 107
        # signal still carries its identification's M.
        joint_2 = next(j for j in report.indicator_joints if j.joint == "joint_2")
        judged = replace(joint_2, status=Status.OK, ne107=Ne107.NORMAL)
        assert judged.identification is not None
        await space.apply(replace(report, joints=(judged,), indicator_joints=()))
        found["worst"] = await server.get_node(ua.NodeId("cell1/WorstNe107Status", ns)).read_value()
        await server.stop()
        return found

    found = asyncio.run(go())
    assert (found["Status"], found["Ne107Letter"], found["joint"]) == ("watch", "M", "M")
    assert found["Indicator"] in ("coulomb_friction_nm", "viscous_friction_nm_s_rad")
    assert found["ForecastLimit"] == "alert" and found["ForecastDays"] > 0
    assert found["coulomb_friction_nm/WatchLimit"] == pytest.approx(
        1.3 * found["coulomb_friction_nm/Baseline"]
    )
    assert found["coulomb_friction_nm/Status"] == "watch"
    assert found["stiffness_nm_rad/AlertLimit"] > 0 and found["eu"] == "N·m/rad"
    assert found["worst"] == "maintenance_required"
