"""MQTT topics and payloads: sanitised topic levels, health documents, report split per controller,
and the validation of MqttSettings with file:line errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.model import ThresholdSettings
from agent.config.mqtt import MqttSettings, OutboxSettings
from agent.errors import ConfigError
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import Status, TrendPoint
from agent.publish.mqtt.payloads import (
    HEALTH_SCHEMA,
    derived_id,
    health_topic,
    report_messages,
    report_topic,
    status_payload,
    status_topic,
    topic_part,
)
from agent.report.model import IndicatorSummary, Report, joint_report
from agent.schema.validate import load

T0 = datetime(2024, 3, 1, 6, 0, tzinfo=UTC)
LIMITS = ThresholdSettings(backlash_watch_rad=1e-3, backlash_alert_rad=2e-3)


def result(backlash: float | None = 8e-4, amplitude: float = 0.05) -> BacklashResult:
    return BacklashResult(
        amplitude_rad_s=amplitude,
        backlash_rad=backlash,
        rmse_rad_s=0.004,
        residual_rms_rad_s=0.02,
        params={"A_rad_s": amplitude},
        evaluations=10,
        restarts=0,
        converged=True,
        stop_reason="tolfun",
        fit_seconds=0.1,
        seed=0,
        period_metadata_s=1.0,
        period_estimated_s=1.0,
        period_mismatch=float("nan"),
    )


def points(values: list[float]) -> list[TrendPoint]:
    return [TrendPoint((T0 + timedelta(days=7 * i)).isoformat(), v) for i, v in enumerate(values)]


def sample_report() -> Report:
    stiffness = IndicatorSummary(
        "stiffness_nm_per_rad", "N*m/rad", points([1.1e4, 1.05e4, 1.0e4]), None
    )
    joints = (
        joint_report(
            "robot1",
            "J1",
            result(1.2e-3),
            LIMITS,
            points([0.8e-3, 0.9e-3, 1.05e-3, 1.2e-3]),
            indicators=[stiffness],
        ),
        joint_report("robot1", "J2/a+b#", result(None, amplitude=0.03), LIMITS),
        joint_report("cnc", "X", None, LIMITS, error="driver: timeout", indicator="backlash_rad"),
    )
    return Report(T0.isoformat(), ("robot1", "cnc"), joints, host="edge1")


def test_topic_part_encodes_mqtt_special_characters() -> None:
    assert topic_part("J1") == "J1"
    assert topic_part("a/b") == "a%2Fb"
    assert topic_part("a+b#c") == "a%2Bb%23c"
    assert topic_part("50%") == "50%25"
    assert topic_part("nul\x00") == "nul%00"
    assert topic_part("$SYS") == "%24SYS"
    assert topic_part("a$b") == "a$b"  # only a leading $ is special
    assert topic_part("Gelenk-Ä") == "Gelenk-Ä"
    with pytest.raises(ValueError, match="empty"):
        topic_part("")


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_topic_part_is_one_safe_level_and_reversible(name: str) -> None:
    part = topic_part(name)
    assert not set(part) & set("/+#\x00")
    assert not part.startswith("$")
    assert all(ord(c) >= 0x20 and ord(c) != 0x7F for c in part)
    assert unquote(part, errors="strict") == name


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=10), st.text(min_size=1, max_size=10))
def test_different_names_never_share_a_topic(a: str, b: str) -> None:
    if a != b:
        assert topic_part(a) != topic_part(b)


def test_topics() -> None:
    assert health_topic("plant/jha", "robot 1", "J/1") == "plant/jha/robot 1/J%2F1/health"
    assert report_topic("jha", "cnc") == "jha/cnc/report"
    assert status_topic("jha", "jha-edge+1") == "jha/agent/jha-edge%2B1/status"


def test_report_messages_split_per_controller_with_ids_and_health() -> None:
    report = sample_report()
    msgs = report_messages(report, "jha", "2024-03-01T06:00:01.000Z")
    assert [(m.kind, m.topic, m.retain) for m in msgs] == [
        ("report", "jha/robot1/report", False),
        ("health", "jha/robot1/J1/health", True),
        ("health", "jha/robot1/J2%2Fa%2Bb%23/health", True),
        ("report", "jha/cnc/report", False),
        ("health", "jha/cnc/X/health", True),
    ]
    assert len({m.message_id for m in msgs}) == len(msgs)
    assert all(m.supersedes == m.topic for m in msgs if m.kind == "health")
    # Split in two: each part's id is derived from the report's, which each part names.
    assert msgs[0].message_id == derived_id(report.message_id, "robot1")
    assert msgs[3].message_id == derived_id(report.message_id, "cnc")
    assert msgs[1].message_id == derived_id(report.message_id, "robot1", "J1")
    robot = json.loads(msgs[0].payload)
    assert robot["message_id"] == msgs[0].message_id
    assert robot["source_message_id"] == report.message_id
    assert robot["queued_at"] == "2024-03-01T06:00:01.000Z"
    assert robot["created_at"] == T0.isoformat()
    assert robot["machines"] == ["robot1"]
    assert [j["joint"] for j in robot["joints"]] == ["J1", "J2/a+b#"]
    assert json.loads(msgs[3].payload)["summary"]["counts"]["unknown"] == 1


def test_single_controller_report_keeps_its_message_id_and_ids_are_stable() -> None:
    report = Report(T0.isoformat(), ("r",), (joint_report("r", "J1", result(), LIMITS),))
    first = report_messages(report, "jha", "q1")
    again = report_messages(report, "jha", "q2")
    assert first[0].message_id == report.message_id
    assert json.loads(first[0].payload)["message_id"] == report.message_id
    assert "source_message_id" not in json.loads(first[0].payload)
    assert [m.message_id for m in first] == [m.message_id for m in again]
    other = Report(T0.isoformat(), ("r",), report.joints)
    assert {m.message_id for m in report_messages(other, "jha", "q")}.isdisjoint(
        m.message_id for m in first
    )


def test_indicator_only_joints_get_health_too() -> None:
    stiffness = IndicatorSummary("stiffness_nm_per_rad", "N*m/rad", points([1e4, 1e4, 1e4]), None)
    only = joint_report("r", "J9", None, LIMITS, indicators=[stiffness])
    report = Report(T0.isoformat(), ("r",), (), indicator_joints=(only,))
    msgs = report_messages(report, "jha", "q")
    assert [m.topic for m in msgs] == ["jha/r/report", "jha/r/J9/health"]
    health = json.loads(msgs[1].payload)
    assert health["status"] == "unknown"
    assert health["indicators"][1]["name"] == "stiffness_nm_per_rad"
    assert health["estimated_at"] == points([0, 0, 0])[-1].time_iso


def test_health_document() -> None:
    msgs = report_messages(sample_report(), "jha", "q")
    j1 = json.loads(msgs[1].payload)
    assert j1["schema"] == HEALTH_SCHEMA
    assert j1["message_id"] == msgs[1].message_id
    assert j1["report_message_id"] == msgs[0].message_id
    assert (j1["controller"], j1["joint"]) == ("robot1", "J1")
    assert j1["status"] == Status.WATCH.value
    assert j1["ne107"] == {"status": "maintenance_required", "letter": "M"}
    assert j1["estimated_at"] == points([0, 0, 0, 0])[-1].time_iso
    first = j1["indicators"][0]
    assert first == {
        "name": "backlash_rad",
        "value": 1.2e-3,
        "unit": "rad",
        "judged": True,
        "limits": {"watch": 1e-3, "alert": 2e-3},
        "time": None,
    }
    names = {i["name"]: i for i in j1["indicators"]}
    assert names["amplitude_rad_s"]["unit"] == "rad/s"
    assert names["stiffness_nm_per_rad"]["value"] == 1.0e4
    assert names["stiffness_nm_per_rad"]["unit"] == "N*m/rad"
    forecast = j1["forecast"]
    assert forecast["indicator"] == "backlash_rad"
    assert forecast["slope_per_day"] > 0
    assert (
        forecast["alert"]["days"] > 0 and forecast["alert"]["days_low"] <= forecast["alert"]["days"]
    )
    assert forecast["watch"]["reached"] is True
    failed = json.loads(msgs[4].payload)
    assert failed["ne107"] == {"status": "failure", "letter": "F"}
    assert failed["error"] == "driver: timeout"
    assert failed["forecast"] is None
    assert failed["estimated_at"] == T0.isoformat()


def test_payloads_are_strict_json_without_nan() -> None:
    report = Report(
        T0.isoformat(), ("r",), (joint_report("r", "J1", result(float("nan")), LIMITS),)
    )

    def refuse(constant: str) -> None:
        pytest.fail(f"{constant} in a payload")

    for m in report_messages(report, "jha", "q"):
        json.loads(m.payload, parse_constant=refuse)


def test_status_payload() -> None:
    online = json.loads(status_payload("jha-1", True, "t", "connected"))
    will = json.loads(status_payload("jha-1", False, None, "connection lost"))
    assert (online["state"], online["at"]) == ("online", "t")
    assert (will["state"], will["at"], will["reason"]) == ("offline", None, "connection lost")


# -- settings ----------------------------------------------------------------------------------


def load_settings(tmp_path: Path, text: str) -> MqttSettings:
    path = tmp_path / "mqtt.yaml"
    path.write_text(text)
    return load(MqttSettings, path)


def test_settings_defaults_are_secure(tmp_path: Path) -> None:
    s = load_settings(tmp_path, "host: broker.plant\n")
    assert (s.port, s.tls, s.tls_insecure, s.qos) == (8883, True, False, 1)
    assert s.outbox == OutboxSettings()


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("host: b\nport: 70000\n", 2, "port: expected an integer >= 1 and <= 65535, found 70000"),
        ("host: b\nkeepalive_s: 0\n", 2, "keepalive_s: expected an integer >= 5"),
        ("host: b\nqos: 2\n", 2, "qos: expected one of 1, found 2"),
        ("host: b\ntopic_prefix: a/+/b\n", 2, "topic_prefix: expected no wildcard"),
        ("host: b\ntopic_prefix: $SYS\n", 2, "topic_prefix: expected no leading $"),
        ("host: b\ntopic_prefix: a//b\n", 2, "topic_prefix: expected no empty topic level"),
        ("host: b\ncert_file: c.pem\n", 1, "key_file: cert_file and key_file go together"),
        ("host: b\ntls: false\ntls_insecure: true\n", 3, "tls_insecure needs tls: true"),
        ("host: b\npassword_file: /p\n", 2, "password_file: a password_file needs a username"),
        (
            "host: b\nreconnect_min_s: 5\nreconnect_max_s: 1\n",
            3,
            "reconnect_max_s: expected a number >= reconnect_min_s (5), found 1",
        ),
        ("host: b\noutbox:\n  max_messages: 1\n", 3, "outbox.max_messages: expected an integer"),
        ("host: b\npasword_file: x\n", 2, "did you mean 'password_file'"),
    ],
)
def test_settings_errors_name_file_line_and_field(
    tmp_path: Path, text: str, line: int, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path, text)
    message = str(info.value)
    assert f"mqtt.yaml:{line}:" in message or f"mqtt.yaml, line {line}" in message, message
    assert expected in message, message
