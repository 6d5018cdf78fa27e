"""The MQTT publisher's sender thread: drains the outbox into paho and deletes what the broker
acknowledged.

The sender hands the oldest unsent messages to paho, at most `max_inflight` at a time, and
deletes each from the outbox when paho reports its PUBACK (the connection's on_publish only
queues the mid, because paho calls it holding a lock that publish() also takes). A message
handed to paho stays with paho across reconnects: paho resends it, flagged DUP, once connected
again; so the sender never hands the same row twice within one process. After a restart
everything still in the outbox is sent again in order; a message whose PUBACK arrived just
before a crash is therefore sent twice, with the same message_id.
"""

from __future__ import annotations

import logging
import queue
import threading

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode

from agent.publish.mqtt.connection import BrokerConnection, quote
from agent.publish.mqtt.outbox import Outbox, OutboxError

log = logging.getLogger(__name__)

_POLL_S = 1.0


class OutboxSender:
    """Hands queued messages to paho and acknowledges them in the outbox, in a thread of its
    own; the connection reports PUBACKs to it (agent.publish.mqtt.connection.DeliveryListener).
    """

    def __init__(self, max_inflight: int) -> None:
        self.max_inflight = max_inflight
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.idle = threading.Event()  # outbox empty and nothing in flight
        self._acks: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._ack_lock = threading.Lock()  # never held while calling paho (see acknowledged)
        self._inflight: dict[int, int] = {}  # paho mid -> outbox seq; sender thread only
        self._handed_seq = 0  # highest seq handed to paho; sender thread only
        self._thread: threading.Thread | None = None
        self.handed = 0  # messages given to paho to send
        self.acknowledged_total = 0  # PUBACKs of outbox messages

    # -- what the connection tells it ----------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def acknowledged(self, mid: int) -> None:
        self._acks.put(mid)
        self._wake.set()

    def in_flight(self) -> int:
        return len(self._inflight)

    # -- what the publisher asks of it ---------------------------------------------------------

    def start(self, outbox: Outbox, link: BrokerConnection) -> None:
        self._wake.set()  # the first look at the outbox is immediate
        self._thread = threading.Thread(
            target=self._main, args=(outbox, link), name="jha-mqtt-send", daemon=True
        )
        self._thread.start()

    def queued(self) -> None:
        """New messages are in the outbox."""
        self.idle.clear()
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)

    def unprocessed_acks(self) -> int:
        """PUBACKs received whose outbox rows are not deleted yet."""
        with self._ack_lock:
            return self._acks.qsize()

    def take_acks(self, outbox: Outbox) -> None:
        """Delete the rows of the PUBACKs received so far."""
        # Under _ack_lock, so that unprocessed_acks() never sees an ack taken off the queue
        # whose row is not deleted yet.
        with self._ack_lock:
            seqs = []
            while True:
                try:
                    mid = self._acks.get_nowait()
                except queue.Empty:
                    break
                seq = self._inflight.pop(mid, None)
                if seq is not None:  # else the status message, which is not in the outbox
                    seqs.append(seq)
            if seqs:
                outbox.ack(seqs)
                self.acknowledged_total += len(seqs)

    # -- the thread ----------------------------------------------------------------------------

    def _main(self, outbox: Outbox, link: BrokerConnection) -> None:
        while True:
            self._wake.wait(_POLL_S)
            self._wake.clear()
            try:
                self.take_acks(outbox)
                if self._stop.is_set():
                    return
                if link.connected.is_set():
                    self._hand_over(outbox, link)
                self._update_idle(outbox)
            except OutboxError as exc:
                link.last_error = str(exc)
                log.error("event=mqtt_outbox_error error=%s", quote(str(exc)))
                self._stop.wait(_POLL_S)
            except Exception as exc:  # a bug must not end delivery silently: log, go on
                log.exception("event=mqtt_sender_error error=%s", quote(repr(exc)))
                self._stop.wait(_POLL_S)

    def _hand_over(self, outbox: Outbox, link: BrokerConnection) -> None:
        room = self.max_inflight - len(self._inflight)
        while room > 0 and link.connected.is_set():
            batch = outbox.pending(self._handed_seq, room)
            if not batch:
                return
            for queued in batch:
                m = queued.message
                try:
                    info = link.client.publish(m.topic, m.payload, qos=1, retain=m.retain)
                except ValueError as exc:  # e.g. over MQTT's 256 MB: it never will be sent
                    outbox.discard(queued.seq, f"message {m.message_id}: {exc}")
                    continue
                # NO_CONN: paho keeps the message and sends it after the next CONNACK.
                if info.rc not in (MQTTErrorCode.MQTT_ERR_SUCCESS, MQTTErrorCode.MQTT_ERR_NO_CONN):
                    log.warning(
                        "event=mqtt_publish_refused message_id=%s rc=%s",
                        m.message_id,
                        paho.error_string(info.rc),
                    )
                    return
                self._inflight[info.mid] = queued.seq
                self._handed_seq = queued.seq
                self.handed += 1
            room = self.max_inflight - len(self._inflight)

    def _update_idle(self, outbox: Outbox) -> None:
        if not self._inflight and not outbox.pending(self._handed_seq, 1):
            self.idle.set()
        else:
            self.idle.clear()
