"""A report into the outbox: its messages built (agent.publish.mqtt.payloads), those the broker
would refuse as too large logged and left out, the rest written in one transaction. Shared by
the publisher and by its queue-only stand-in, so a report queued by either is the same rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agent.config.mqtt import MqttSettings
from agent.publish.mqtt.message import MessageKind, OutMessage
from agent.publish.mqtt.outbox import Outbox, PutResult
from agent.publish.mqtt.payloads import now_iso, report_messages
from agent.report.model import Report

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Queued:
    messages: tuple[OutMessage, ...]
    result: PutResult
    too_large: int  # messages left out: payload over max_payload_bytes

    def log(self) -> None:
        log.info(
            "event=mqtt_queued messages=%d report_message_ids=%s dropped=%d superseded=%d",
            len(self.messages),
            ",".join(m.message_id for m in self.messages if m.kind == MessageKind.REPORT),
            len(self.result.dropped),
            self.result.superseded,
        )


def queue_report(outbox: Outbox, report: Report, settings: MqttSettings, client_id: str) -> Queued:
    """Blocking (JSON of a long history, then an fsync'd write): call it from a thread."""
    messages = report_messages(report, settings.topic_prefix, now_iso(), client_id)
    limit = settings.max_payload_bytes
    # One over the limit is refused here rather than queued to be refused at every reconnect.
    for m in messages:
        if len(m.payload) > limit:
            log.error(
                "event=mqtt_message_too_large message_id=%s topic=%s payload_bytes=%d "
                "max_payload_bytes=%d",
                m.message_id,
                m.topic,
                len(m.payload),
                limit,
            )
    kept = tuple(m for m in messages if len(m.payload) <= limit)
    return Queued(kept, outbox.put(kept), len(messages) - len(kept))
