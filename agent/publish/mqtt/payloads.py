"""MQTT topics and JSON payloads of a report: pure functions, no I/O.

Topics (every name part sanitised by `topic_part`):
  <prefix>/<controller>/<joint>/health   retained, "jha.health/1": latest health of one joint
                                         (its backlash verdict, and under `identification` the
                                         verdict on its identification indicators, or null;
                                         `recommendation`, `history` (the newest 32 points)
                                         and `forecast.last_time`, the time the forecast's
                                         days count from, for the fleet's plan)
  <prefix>/<controller>/report           not retained, "jha.report/1" plus message_id, queued_at
Both carry `agent_client_id`, the publishing agent's client id: its status topic below.
  <prefix>/agent/<client_id>/status      retained, "jha.agent_status/1": online / offline

Every message carries a `message_id` (a UUID). A report's message is the report's own
`message_id` (the one in its report.json), so a receiver can account for reports end to end. The
other ids are derived from it (UUID 5), so publishing the same report twice queues the same
messages, not new ones: the health of a joint is uuid5(report id, controller, joint), and a
report covering several controllers, split into one message per controller, gives each part
uuid5(report id, controller) and keeps the original id as `source_message_id`.

Delivery is at least once: after a crash between the broker's acknowledgement and the outbox
delete, a message is sent again with the same id, so receivers dedupe on message_id.

Sanitising: a name becomes one topic level. The characters MQTT gives a meaning (/ level
separator, + and # wildcards), NUL and other control characters, %, and a leading $ (broker
topics) are percent-encoded as %XX of their UTF-8 bytes, like a URL path segment. Two different
names therefore never share a topic, and the original name can be recovered (unquote).
"""

from __future__ import annotations

import json
import math
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from agent import __version__
from agent.health.display import indicator_info
from agent.publish.mqtt.message import MessageKind, OutMessage
from agent.report.model import INTERVAL_CONFIDENCE, JointReport, Report, report_to_dict
from agent.wire import HEALTH_HISTORY_POINTS, HEALTH_SCHEMA, STATUS_SCHEMA

__all__ = [
    "HEALTH_SCHEMA",
    "STATUS_SCHEMA",
    "AgentState",
    "derived_id",
    "encode",
    "health_document",
    "health_topic",
    "identification_health",
    "indicator_entries",
    "report_messages",
    "report_topic",
    "status_payload",
    "status_topic",
    "topic_part",
]


_ENCODE = frozenset("/+#%")


class AgentState(StrEnum):
    """What the agent's retained status topic says of it."""

    ONLINE = "online"  # published at each connection
    OFFLINE = "offline"  # the last will, or published on a clean close


# Namespace of the derived message ids (fixed: the ids must not change between versions).
_ID_NAMESPACE = uuid.UUID("f55d2b00-ab8d-475e-bd9f-b0100cdaec85")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def default_client_id() -> str:
    return f"jha-{socket.gethostname()}"


def derived_id(*parts: str) -> str:
    """A UUID 5 of `parts` (JSON-joined, so that no two different tuples share an id)."""
    return str(uuid.uuid5(_ID_NAMESPACE, json.dumps(list(parts))))


def topic_part(name: str) -> str:
    """`name` as one topic level (see the module docstring); ValueError for an empty name."""
    if not name:
        raise ValueError("a topic level name must not be empty")
    out = []
    for i, ch in enumerate(name):
        if ch in _ENCODE or ord(ch) < 0x20 or ord(ch) == 0x7F or (i == 0 and ch == "$"):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def health_topic(prefix: str, controller: str, joint: str) -> str:
    return f"{prefix}/{topic_part(controller)}/{topic_part(joint)}/health"


def report_topic(prefix: str, controller: str) -> str:
    return f"{prefix}/{topic_part(controller)}/report"


def status_topic(prefix: str, client_id: str) -> str:
    return f"{prefix}/agent/{topic_part(client_id)}/status"


def encode(document: Mapping[str, Any]) -> bytes:
    """Compact strict JSON (non-finite numbers become null), UTF-8."""
    return json.dumps(_finite(document), separators=(",", ":"), allow_nan=False).encode("utf-8")


def report_messages(
    report: Report,
    prefix: str,
    queued_at_iso: str,
    client_id: str | None = None,
) -> tuple[OutMessage, ...]:
    """The messages of one report: per controller its report, then the health of its joints
    (those with a verdict, then those with other indicators only).

    A report spanning several controllers is split so that each controller's topic carries only
    its own joints. With `client_id` (the publisher's MQTT client id), every message names it as
    `agent_client_id`: a receiver then knows which agent's status topic speaks for the machine.
    """
    out: list[OutMessage] = []
    controllers = _controllers(report)
    for controller in controllers:
        split = len(controllers) > 1
        report_id = derived_id(report.message_id, controller) if split else report.message_id
        part = _only(report, controller, report_id)
        document = report_to_dict(part)
        document["message_id"] = report_id
        if split:
            document["source_message_id"] = report.message_id
        document["queued_at"] = queued_at_iso
        if client_id is not None:
            document["agent_client_id"] = client_id
        out.append(
            OutMessage(
                report_id,
                MessageKind.REPORT,
                report_topic(prefix, controller),
                encode(document),
                retain=False,
            )
        )
        for joint in (*part.joints, *part.indicator_joints):
            topic = health_topic(prefix, controller, joint.joint)
            health_id = derived_id(report.message_id, controller, joint.joint)
            body = health_document(joint, report_id, health_id, part.created_at_iso, queued_at_iso)
            if client_id is not None:
                body["agent_client_id"] = client_id
            out.append(
                OutMessage(
                    health_id,
                    MessageKind.HEALTH,
                    topic,
                    encode(body),
                    retain=True,
                    supersedes=topic,
                )
            )
    return tuple(out)


def health_document(
    joint: JointReport,
    report_message_id: str,
    message_id: str,
    report_created_at_iso: str,
    queued_at_iso: str,
) -> dict[str, Any]:
    """The retained health of one joint (schema jha.health/1)."""
    signal = joint.signal
    latest = [s.latest.time_iso for s in joint.indicators if s.latest is not None]
    if joint.history:
        estimated_at = joint.history[-1].time_iso
    elif latest:  # a joint with other indicators only: its newest estimate
        estimated_at = max(latest)
    else:
        estimated_at = report_created_at_iso
    trend = joint.trend
    return {
        "schema": HEALTH_SCHEMA,
        "message_id": message_id,
        "report_message_id": report_message_id,
        "controller": joint.controller,
        "joint": joint.joint,
        "status": joint.status.value,
        "ne107": {"status": signal.value, "letter": signal.letter},
        "reason": joint.verdict_reason,
        "error": joint.error,
        "estimated_at": estimated_at,
        "report_created_at": report_created_at_iso,
        "queued_at": queued_at_iso,
        "indicator": joint.indicator_name,
        "indicators": indicator_entries(joint),
        "forecast": None
        if trend is None
        else {
            "indicator": trend.indicator,
            "slope_per_day": trend.slope_per_day,
            "slope_low_per_day": trend.slope_low_per_day,
            "slope_high_per_day": trend.slope_high_per_day,
            "confidence": trend.confidence,
            "n_points": trend.n_points,
            "level_now": trend.level_now,
            # The forecasts' days count from here (added in jha.health/1: keys only get added).
            "last_time": trend.last_time_iso,
            "watch": None if trend.forecast_watch is None else trend.forecast_watch.to_dict(),
            "alert": None if trend.forecast_alert is None else trend.forecast_alert.to_dict(),
        },
        "identification": identification_health(joint),
        # What to do and by when, as in the report: a plan built from health alone needs it.
        "recommendation": joint.recommendation.to_dict(),
        # The judged indicator's newest points, for a trend line without the full report (the
        # outbox drops full reports first); bounded so the retained message stays small.
        "history": [p.to_dict() for p in joint.history[-HEALTH_HISTORY_POINTS:]],
        "agent_version": __version__,
    }


def identification_health(joint: JointReport) -> dict[str, Any] | None:
    """The joint's identification verdict in the shape of the backlash one (status, ne107,
    reason, forecast), with each indicator's verdict against its baseline; None without one."""
    v = joint.identification
    if v is None:
        return None
    # The verdict's own dict, with each indicator in the health payload's flatter shape.
    return {
        **v.to_dict(),
        "indicators": [{
            "name": w.indicator, "status": w.status.value,
            "ne107": {"status": w.ne107.value, "letter": w.ne107.letter}, "reason": w.reason,
            "value": w.value, "unit": indicator_info(w.indicator).unit, "time": w.time_iso,
            "baseline": None if w.baseline is None else w.baseline.value,
            "baseline_source": None if w.baseline is None else w.baseline.source,
            "change": w.change, "change_sigma": w.sigma,
            "limits": {"watch": w.watch, "alert": w.alert},
            "forecast": None if w.forecast is None else w.forecast.to_dict(),
        } for w in v.indicators],
    }  # fmt: skip


def indicator_entries(joint: JointReport) -> list[dict[str, Any]]:
    """Every indicator of the joint with its value and SI unit; the judged one comes first."""
    watch, alert = joint.limits
    judged = joint.indicator_name
    band = joint.interval
    entries = [
        {
            "name": judged,
            "value": joint.value,
            "unit": indicator_info(judged).unit,
            "judged": True,
            "limits": {"watch": watch, "alert": alert},
            "time": None,
            # Only for an estimate that came with one (keys are only ever added to the schema).
            **(
                {}
                if band is None
                else {
                    "interval": {
                        "low": band[0],
                        "high": band[1],
                        "confidence": INTERVAL_CONFIDENCE,
                    },
                    "ambiguous": joint.ambiguous,
                }
            ),
        }
    ]
    if joint.result is not None:
        for name, value in (
            ("amplitude_rad_s", joint.result.amplitude_rad_s),
            ("backlash_rad", joint.result.backlash_rad),
        ):
            if name != judged and value is not None:
                entries.append(
                    {
                        "name": name,
                        "value": value,
                        "unit": indicator_info(name).unit,
                        "judged": False,
                        "limits": None,
                        "time": None,
                    }
                )
    for summary in joint.indicators:
        last = summary.latest
        v = summary.verdict
        entries.append(
            {
                "name": summary.indicator,
                "value": None if last is None else last.value,
                "unit": summary.unit,
                "judged": False,
                "limits": None if v is None else {"watch": v.watch, "alert": v.alert},
                "time": None if last is None else last.time_iso,
                **({} if v is None else {"status": v.status.value}),
            }
        )
    return entries


def status_payload(client_id: str, online: bool, at_iso: str | None, reason: str) -> bytes:
    """The agent's retained status; the last will is built with at_iso None (time unknown)."""
    return encode(
        {
            "schema": STATUS_SCHEMA,
            "client_id": client_id,
            "state": AgentState.ONLINE if online else AgentState.OFFLINE,
            "at": at_iso,
            "reason": reason,
            "agent_version": __version__,
        }
    )


def _controllers(report: Report) -> list[str]:
    seen = dict.fromkeys(report.machines)
    for j in (*report.joints, *report.indicator_joints):
        seen.setdefault(j.controller)
    return list(seen)


def _only(report: Report, controller: str, message_id: str) -> Report:
    return replace(
        report,
        message_id=message_id,
        machines=(controller,),
        joints=tuple(j for j in report.joints if j.controller == controller),
        indicator_joints=tuple(j for j in report.indicator_joints if j.controller == controller),
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_finite(v) for v in value]
    return value
