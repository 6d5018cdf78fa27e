"""One queued MQTT message: what the outbox stores and the sender hands to the client.

Kept apart from agent.publish.mqtt.payloads (which needs the report and health modules, hence
numpy and scipy) so that the outbox loads fast and alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class MessageKind(StrEnum):
    """What a message carries; the outbox's bound drops full reports first, never health."""

    REPORT = "report"  # a controller's full report, not retained
    HEALTH = "health"  # the retained latest health of one joint
    STATUS = "status"  # the agent's retained online / offline status


@dataclass(frozen=True)
class OutMessage:
    """One MQTT message to queue. `supersedes` names what a newer message replaces unsent: the
    topic of a retained health message (only the latest health of a joint matters), else None."""

    message_id: str
    kind: MessageKind
    topic: str
    payload: bytes
    retain: bool
    supersedes: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "kind": self.kind,
            "topic": self.topic,
            "payload_bytes": len(self.payload),
            "retain": self.retain,
            "supersedes": self.supersedes,
        }
