"""The fields the fleet's plan needs in the agent's health message (jha.health/1, added without
changing any existing key): the recommendation, the newest points of the judged indicator, and
the time the forecast's days count from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.publish.mqtt.payloads import HEALTH_HISTORY_POINTS
from tests.fleet.agents import machine_report, messages_of, payload


def test_health_carries_recommendation_history_and_forecast_origin() -> None:
    end = datetime(2026, 5, 1, 6, 0, tzinfo=UTC)
    values = [1e-3 + 2e-5 * i for i in range(40)]
    report = machine_report("robot1", {"J1": values}, end=end)
    messages = messages_of(report)
    health = payload(messages, 1)
    assert health["report_message_id"] == report.message_id
    assert health["recommendation"] == report.joints[0].recommendation.to_dict()
    assert health["recommendation"]["action"]
    # The newest points only, oldest first, bounded.
    assert len(health["history"]) == HEALTH_HISTORY_POINTS
    assert [p["value"] for p in health["history"]] == values[-HEALTH_HISTORY_POINTS:]
    assert health["history"][-1]["time"] == end.isoformat()
    assert health["forecast"]["last_time"] == end.isoformat()
    alert = health["forecast"]["alert"]
    assert alert["days_low"] <= alert["days"]
    # The older keys are still there, with their meaning.
    assert health["estimated_at"] == end.isoformat()
    assert health["forecast"]["slope_per_day"] > 0


def test_a_joint_without_history_sends_an_empty_one() -> None:
    end = datetime(2026, 5, 1, tzinfo=UTC) - timedelta(days=1)
    report = machine_report("robot1", {"J1": [5e-4]}, end=end)
    health = payload(messages_of(report), 1)
    assert health["history"] == [{"time": end.isoformat(), "value": 5e-4}]
    assert health["forecast"] is None  # one point: no trend
    assert health["recommendation"]["action"]
