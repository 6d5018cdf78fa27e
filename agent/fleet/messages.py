"""What the fleet accepts from the broker: the agents' messages, parsed and held to their schema
before anything is stored. A message that breaks a rule raises PayloadError with the reason; the
ingest logs and counts it, and acknowledges it (a bad message redelivered forever would block
the session).

Topics (agent.publish.mqtt.payloads, which this package does not import: it pulls numpy):
  <prefix>/<controller>/report          "jha.report/1"
  <prefix>/<controller>/<joint>/health  "jha.health/1"
  <prefix>/agent/<client_id>/status     "jha.agent_status/1"
Names in topics are percent-encoded by the agent; the payload's own names must match them, so a
message cannot claim another machine's joint by its topic alone.

Strings holding NUL or unpaired surrogates are refused: PostgreSQL stores neither.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

import orjson

from agent.fleet.spark import spark_points, spark_values
from agent.health.status import Ne107, Status
from agent.wire import HEALTH_FAMILY, MAJOR, REPORT_FAMILY, STATUS_FAMILY

MAX_DEPTH = 64  # JSON nesting; the agents' deepest is about 8
MAX_NAME = 256  # characters of a machine or joint name


class Kind(StrEnum):
    REPORT = "report"
    HEALTH = "health"
    STATUS = "status"


class PayloadError(ValueError):
    """Why a message is refused (no part of the payload beyond short names is quoted)."""


@dataclass(frozen=True)
class Topic:
    kind: Kind
    prefix: str
    machine: str  # the controller, or for a status the agent's client id
    joint: str | None = None


@dataclass(frozen=True)
class ReportMessage:
    report_id: str
    prefix: str
    machine: str
    host: str | None
    created_at: datetime
    # The payload as received (validated), stored as jsonb without re-encoding; the parsed
    # document is not kept: a thousand messages in flight would hold megabytes of dicts.
    text: str
    client_id: str | None = None  # the publishing agent (its status topic), when it says


@dataclass(frozen=True)
class Forecast:
    """When the joint's trend line reaches its next limit, with the 95 % interval."""

    limit_name: str
    at: datetime | None
    low: datetime | None  # the early end
    high: datetime | None  # None: the interval reaches "never"


@dataclass(frozen=True)
class HealthMessage:
    message_id: str
    report_id: str
    prefix: str
    machine: str
    joint: str
    status: Status
    ne107: Ne107
    indicator: str
    value: float | None
    unit: str | None
    estimated_at: datetime
    report_created_at: datetime
    forecast: Forecast | None
    reason: str | None
    recommendation: dict[str, Any] | None
    # The judged indicator's newest points as SVG polyline coordinates (agent.fleet.spark),
    # computed here, on the session's thread, not on the writer's (its time is the ingest's).
    spark: str | None
    text: str
    indicator_names: tuple[str, ...] = ()  # every indicator the message carries
    client_id: str | None = None  # the publishing agent (its status topic), when it says


@dataclass(frozen=True)
class StatusMessage:
    prefix: str
    client_id: str
    state: str
    at: datetime | None
    text: str


Message = ReportMessage | HealthMessage | StatusMessage


def time_stamps(m: Message) -> tuple[tuple[str, datetime], ...]:
    """The message's time stamps, by field name (a status may carry none)."""
    if isinstance(m, ReportMessage):
        return (("created_at", m.created_at),)
    if isinstance(m, HealthMessage):
        return (("estimated_at", m.estimated_at), ("report_created_at", m.report_created_at))
    return () if m.at is None else (("at", m.at),)


def ahead_of_clock(m: Message, now: datetime, max_skew_s: float) -> str | None:
    """Why the message is refused when one of its time stamps is more than `max_skew_s` ahead
    of the fleet's clock, else None. A stamp from the future would hold its machine "fresh" and
    its joint's newest health for as long as it stays ahead (a forged year 8999 for good)."""
    for name, at in time_stamps(m):
        ahead_s = (at - now).total_seconds()
        if ahead_s > max_skew_s:
            return (
                f"time stamp ahead of the fleet's clock: {name} {at.isoformat()} is "
                f"{ahead_s:.0f} s ahead, more than max_clock_skew_s {max_skew_s:g}"
            )
    return None


def parse_topic(topic: str, prefixes: tuple[str, ...]) -> Topic:
    """The kind and names of a topic under one of `prefixes` (the longest that fits)."""
    for prefix in sorted(prefixes, key=len, reverse=True):
        if not topic.startswith(prefix + "/"):
            continue
        levels = topic[len(prefix) + 1 :].split("/")
        if len(levels) == 3 and levels[0] == "agent" and levels[2] == "status":
            return Topic(Kind.STATUS, prefix, _name(levels[1]))
        if len(levels) == 2 and levels[1] == "report":
            return Topic(Kind.REPORT, prefix, _name(levels[0]))
        if len(levels) == 3 and levels[2] == "health":
            return Topic(Kind.HEALTH, prefix, _name(levels[0]), _name(levels[1]))
        raise PayloadError("topic is not a report, health or status topic")
    raise PayloadError("topic is under no configured prefix")


def parse_message(
    topic: str, payload: bytes | bytearray, prefixes: tuple[str, ...], limit: int
) -> Message:
    where = parse_topic(topic, prefixes)
    if len(payload) > limit:
        raise PayloadError(f"payload of {len(payload)} bytes, over max_payload_bytes {limit}")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError("payload is not UTF-8") from None
    doc = _json(payload)
    if where.kind is Kind.REPORT:
        return _report(where, doc, text)
    if where.kind is Kind.HEALTH:
        return _health(where, doc, text)
    return _status(where, doc, text)


# Everything but quotes and brackets, deleted before the nesting is measured (_within_depth).
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"{}[]')
_TO_PARENS = bytes.maketrans(b"{[}]", b"(())")


def _json(payload: bytes | bytearray) -> dict[str, Any]:
    # orjson, not json: three times faster on the agents' reports (issue 17's ingest rate), and
    # it refuses what the database cannot hold: NaN and Infinity, a number that overflows a
    # double, an unpaired surrogate, nesting past 1,024. NUL it accepts, so it is refused here
    # (escaped: JSON forbids a raw control character in a string).
    if b"\\" in payload and b"\\u0000" in payload:  # one byte is found far faster than six
        raise PayloadError("a string holds NUL")
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise PayloadError(f"payload is not JSON: {_first_words(str(exc))}") from None
    if not isinstance(doc, dict):
        raise PayloadError("payload is not a JSON object")
    _within_depth(payload, doc)
    return doc


def _first_words(error: str) -> str:
    """orjson's reason without its position (the position of what a payload hides is noise)."""
    return error.split(":", 1)[0][:80]


def _within_depth(payload: bytes | bytearray, doc: dict[str, Any]) -> None:
    """MAX_DEPTH (the web side reads stored documents back with Python's json, which stops near
    1,000 levels). Measured on the text: a walk of the parsed document cost as much as parsing
    it. With strings taken out, brackets nest as the values do; each pass of removing "()"
    pairs peels one level."""
    outline = payload.translate(None, _NOT_STRUCTURE)
    if outline.count(b"{") + outline.count(b"[") <= MAX_DEPTH:
        return  # fewer containers than the limit: most health messages stop here
    # Removing '""' empties every string that holds no quote or bracket; a quote left over
    # belongs to one that does, and an escaped quote breaks the pairing: both take the walk.
    # (A backslash is looked for first: one byte is found far faster than two.)
    outline = outline.replace(b'""', b"")
    if b'"' in outline or (b"\\" in payload and b'\\"' in payload):
        _walk_depth(doc)
        return
    outline = outline.translate(_TO_PARENS)
    for _ in range(MAX_DEPTH):
        if not outline:
            return
        outline = outline.replace(b"()", b"")
    if outline:
        raise PayloadError(f"JSON nested deeper than {MAX_DEPTH}")


def _walk_depth(value: Any) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise PayloadError(f"JSON nested deeper than {MAX_DEPTH}")
        for item in v.values() if isinstance(v, dict) else v:
            if isinstance(item, dict | list):
                stack.append((item, depth + 1))


def _name(level: str) -> str:
    name = unquote(level, errors="strict") if "%" in level else level
    if not name:
        raise PayloadError("empty name in topic")
    return name


def _schema(doc: dict[str, Any], family: str) -> None:
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith(f"{family}/"):
        raise PayloadError(f"schema: expected {family}/{MAJOR}")
    if schema.split("/", 1)[1] != MAJOR:  # a later major version changes meanings
        raise PayloadError(f"schema: expected {family}/{MAJOR}, found another major version")


def _str(doc: dict[str, Any], key: str, *, optional: bool = False) -> str | None:
    v = doc.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, str) or not v or len(v) > MAX_NAME:
        raise PayloadError(f"{key}: expected a string of 1 to {MAX_NAME} characters")
    return v


# The agents' form (uuid.UUID's str): taken as it is; any other spelling is normalised to it.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _uuid(doc: dict[str, Any], key: str) -> str:
    v = doc.get(key)
    if isinstance(v, str) and _CANONICAL_UUID.fullmatch(v):
        return v
    try:
        return str(uuid.UUID(v)) if isinstance(v, str) and len(v) <= 45 else _bad(key)
    except ValueError:
        return _bad(key)


def _bad(key: str) -> str:
    raise PayloadError(f"{key}: expected a UUID")


def _time(v: Any, key: str, *, optional: bool = False) -> datetime | None:
    if v is None and optional:
        return None
    if not isinstance(v, str) or len(v) > 40:
        raise PayloadError(f"{key}: expected an ISO 8601 time")
    try:
        t = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise PayloadError(f"{key}: expected an ISO 8601 time") from None
    if t.tzinfo is None:
        raise PayloadError(f"{key}: expected a time with its UTC offset")
    if not 1970 <= t.year <= 9000:
        raise PayloadError(f"{key}: time out of range")
    return t


def _number(v: Any, key: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise PayloadError(f"{key}: expected a number")
    if abs(v) > 1e300:
        raise PayloadError(f"{key}: number out of range")
    return float(v)


def _report(where: Topic, doc: dict[str, Any], text: str) -> ReportMessage:
    _schema(doc, REPORT_FAMILY)
    machines = doc.get("machines")
    if not isinstance(machines, list) or where.machine not in machines:
        raise PayloadError("machines: expected a list naming the topic's controller")
    joints = doc.get("joints")
    if not isinstance(joints, list) or not all(isinstance(j, dict) for j in joints):
        raise PayloadError("joints: expected a list of objects")
    for j in (*joints, *(doc.get("indicator_joints") or [])):
        if not isinstance(j, dict) or j.get("controller") != where.machine:
            raise PayloadError("joints: a joint of another controller than the topic's")
    created = _time(doc.get("created_at"), "created_at")
    assert created is not None
    return ReportMessage(
        _uuid(doc, "message_id"),
        where.prefix,
        where.machine,
        _str(doc, "host", optional=True),
        created,
        text,
        _str(doc, "agent_client_id", optional=True),
    )


def _health(where: Topic, doc: dict[str, Any], text: str) -> HealthMessage:
    _schema(doc, HEALTH_FAMILY)
    if doc.get("controller") != where.machine or doc.get("joint") != where.joint:
        raise PayloadError("controller/joint: expected the names in the topic")
    try:
        status = Status(str(doc.get("status")))
        ne107 = Ne107(str((doc.get("ne107") or {}).get("status")))
    except (ValueError, AttributeError):
        raise PayloadError("status, ne107: expected the agent's values") from None
    indicators = doc.get("indicators")
    if not isinstance(indicators, list) or not indicators or not isinstance(indicators[0], dict):
        raise PayloadError("indicators: expected a list whose first is the judged indicator")
    first = indicators[0]
    estimated = _time(doc.get("estimated_at"), "estimated_at")
    created = _time(doc.get("report_created_at"), "report_created_at")
    assert estimated is not None and created is not None
    unit = first.get("unit")
    return HealthMessage(
        _uuid(doc, "message_id"),
        _uuid(doc, "report_message_id"),
        where.prefix,
        where.machine,
        str(where.joint),
        status,
        ne107,
        _str(doc, "indicator") or "",
        _number(first.get("value"), "indicators[0].value"),
        unit if isinstance(unit, str) and len(unit) <= MAX_NAME else None,
        estimated,
        created,
        _forecast(doc.get("forecast"), status, estimated),
        reason if isinstance(reason := doc.get("reason"), str) else None,
        rec if isinstance(rec := doc.get("recommendation"), dict) else None,
        spark_points(spark_values(doc.get("history"))),
        text,
        _indicator_names(indicators),
        _str(doc, "agent_client_id", optional=True),
    )


def _indicator_names(indicators: list[Any]) -> tuple[str, ...]:
    return tuple(
        name
        for i in indicators
        if isinstance(i, dict) and isinstance(name := i.get("name"), str) and len(name) <= MAX_NAME
    )


def _forecast(v: Any, status: Status, estimated: datetime) -> Forecast | None:
    """The forecast of the joint's next limit: watch while below it, else alert."""
    if v is None:
        return None
    if not isinstance(v, dict):
        raise PayloadError("forecast: expected an object or null")
    # Older agents (before forecast.last_time) count the days from the estimate's time.
    base = _time(v.get("last_time"), "forecast.last_time", optional=True) or estimated
    order = ("alert",) if status in (Status.WATCH, Status.ALERT) else ("watch", "alert")
    for name in order:
        f = v.get(name)
        if f is None:
            continue
        if not isinstance(f, dict):
            raise PayloadError(f"forecast.{name}: expected an object or null")
        return Forecast(
            name,
            _after(base, _number(f.get("days"), f"forecast.{name}.days")),
            _after(base, _number(f.get("days_low"), f"forecast.{name}.days_low")),
            _after(base, _number(f.get("days_high"), f"forecast.{name}.days_high")),
        )
    return None


def _after(base: datetime, days: float | None) -> datetime | None:
    if days is None or not 0 <= days < 1e6:  # past a few thousand years: never, in practice
        return None
    return base + timedelta(days=days)


def _status(where: Topic, doc: dict[str, Any], text: str) -> StatusMessage:
    _schema(doc, STATUS_FAMILY)
    if doc.get("client_id") != where.machine:
        raise PayloadError("client_id: expected the name in the topic")
    state = doc.get("state")
    if state not in ("online", "offline"):
        raise PayloadError("state: expected online or offline")
    return StatusMessage(
        where.prefix,
        where.machine,
        str(state),
        _time(doc.get("at"), "at", optional=True),
        text,
    )
