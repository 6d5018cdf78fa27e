"""The MQTT publisher's link to the broker: the paho client and the network thread that keeps it
connected.

The network thread connects (TLS, verified unless `tls_insecure`), runs paho's loop until the
connection ends, then waits with exponential backoff (jittered, reset after a connection that
the broker accepted) and connects again. Failures are logged with their reason; the password is
never part of any message (see agent.publish.mqtt.security).

The agent's status topic holds "online" (published at each connection) or "offline": the last
will (retained, sent by the broker when the connection dies) or published on a clean close.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
from typing import Any, Protocol

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from agent.config.mqtt import MqttSettings
from agent.publish.mqtt.payloads import now_iso, status_payload
from agent.publish.mqtt.security import Secret

log = logging.getLogger(__name__)

_LOOP_TIMEOUT_S = 0.5


class DeliveryListener(Protocol):
    """What the connection tells the outbox sender (agent.publish.mqtt.sender)."""

    def wake(self) -> None:
        """The broker accepted a connection: time to hand over what waits."""

    def acknowledged(self, mid: int) -> None:
        """paho got the PUBACK of the message it numbered `mid`."""

    def in_flight(self) -> int:
        """Messages handed to paho and not acknowledged yet."""


class BrokerConnection:
    """The paho client, its callbacks, and the network thread that connects and reconnects."""

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        status_topic: str,
        password: Secret | None,
        tls: ssl.SSLContext | None,
        listener: DeliveryListener,
    ) -> None:
        self.settings = settings
        self.client_id = client_id
        self.status_topic = status_topic
        self._listener = listener
        self.connected = threading.Event()
        self._stop = threading.Event()  # no more connecting
        self.connects = 0
        # The last delivery problem, the outbox sender's too; None again once a connection works.
        self.last_error: str | None = None
        self._accepted_since_wait = False
        self._thread: threading.Thread | None = None
        self.client = self._make_client(password, tls)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="jha-mqtt-net", daemon=True)
        self._thread.start()

    def publish_offline(self, timeout_s: float) -> bool:
        """Publish the retained "offline" status and wait up to `timeout_s` for its PUBACK."""
        info = self.client.publish(
            self.status_topic,
            status_payload(self.client_id, False, now_iso(), "shutdown"),
            qos=1,
            retain=True,
        )
        try:
            info.wait_for_publish(timeout_s)
            return info.is_published()
        except (RuntimeError, ValueError):
            return False

    def stop(self) -> None:
        """Disconnect and end the network thread (the broker then keeps the status we left)."""
        self._stop.set()
        self.client.disconnect()
        if self._thread is not None:
            self._thread.join(timeout=10.0)

    # -- paho ----------------------------------------------------------------------------------

    def _make_client(self, password: Secret | None, tls: ssl.SSLContext | None) -> paho.Client:
        s = self.settings
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            clean_session=True,
            protocol=paho.MQTTv311,
        )
        client.max_inflight_messages_set(s.max_inflight)
        if s.username is not None:
            client.username_pw_set(s.username, None if password is None else password.reveal())
        if tls is not None:
            client.tls_set_context(tls)
        client.will_set(
            self.status_topic,
            status_payload(self.client_id, False, None, "connection lost"),
            qos=1,
            retain=True,
        )
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        # Unless an external loop is registered, paho writes a publish to the socket from the
        # calling thread: the sender thread and the network thread then drive one SSL object at
        # once, which OpenSSL does not allow (TLS links dropped with "Unspecified error"). With
        # this hook paho only queues the packet and wakes client.loop() in the network thread,
        # which then does every read and every write.
        client.on_socket_register_write = _write_in_network_thread
        return client

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        s = self.settings
        if reason.is_failure:
            hint = ""
            if str(reason) in ("Not authorized", "Bad user name or password"):
                hint = (
                    f" (check username {s.username!r} and the password in {s.password_file})"
                    if s.username
                    else " (the broker wants a login)"
                )
            self.last_error = f"broker refused the connection: {reason}{hint}"
            log.error(
                "event=mqtt_connect_refused host=%s port=%d username=%s reason=%s",
                s.host,
                s.port,
                s.username,
                quote(f"{reason}{hint}"),
            )
            return
        self.connects += 1
        self.last_error = None
        self._accepted_since_wait = True
        client.publish(
            self.status_topic,
            status_payload(self.client_id, True, now_iso(), "connected"),
            qos=1,
            retain=True,
        )
        self.connected.set()
        log.info(
            "event=mqtt_connected host=%s port=%d client_id=%s tls=%s",
            s.host,
            s.port,
            self.client_id,
            s.tls,
        )
        if s.tls_insecure:
            log.warning(
                'event=mqtt_tls_insecure host=%s warning="server certificate NOT '
                "verified (tls_insecure: true): anyone on the path can impersonate "
                'the broker"',
                s.host,
            )
        self._listener.wake()

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: Any, properties: Any
    ) -> None:
        was_connected = self.connected.is_set()
        self.connected.clear()
        if was_connected:
            level = logging.INFO if self._stop.is_set() else logging.WARNING
            log.log(
                level,
                "event=mqtt_disconnected host=%s reason=%s in_flight=%d",
                self.settings.host,
                quote(str(reason)),
                self._listener.in_flight(),
            )

    def _on_publish(
        self, client: paho.Client, userdata: Any, mid: int, reason: Any, properties: Any
    ) -> None:
        # paho calls this holding a lock that publish() also takes: only pass the mid on.
        self._listener.acknowledged(mid)

    def _main(self) -> None:
        s = self.settings
        delay = s.reconnect_min_s
        while not self._stop.is_set():
            self._accepted_since_wait = False
            try:
                self.client.connect(s.host, s.port, s.keepalive_s)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                self.last_error = f"connect failed: {exc}"
                log.warning(
                    "event=mqtt_connect_failed host=%s port=%d error=%s retry_in_s=%.3g",
                    s.host,
                    s.port,
                    quote(str(exc)),
                    delay,
                )
            else:
                try:
                    rc = MQTTErrorCode.MQTT_ERR_SUCCESS
                    while rc == MQTTErrorCode.MQTT_ERR_SUCCESS:
                        rc = self.client.loop(timeout=_LOOP_TIMEOUT_S)
                except Exception as exc:  # e.g. raised by a callback: reconnect, never die
                    log.exception("event=mqtt_loop_error error=%s", quote(repr(exc)))
                self.connected.clear()
            if self._stop.is_set():
                break
            if self._accepted_since_wait:
                delay = s.reconnect_min_s
            # Jitter: a fleet of agents must not reconnect in step after a broker restart.
            self._stop.wait(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2.0, s.reconnect_max_s)


def quote(text: str) -> str:
    """A logfmt value: quoted, inner quotes escaped, on one line."""
    flat = " ".join(text.split())
    return '"' + flat.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _write_in_network_thread(client: paho.Client, userdata: Any, sock: Any) -> None:
    """paho's register-write hook: nothing to do, the network thread's loop() writes."""
