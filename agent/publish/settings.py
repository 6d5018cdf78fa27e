"""The `publish:` section: every publisher is opt-in, so an empty section opens no socket."""

from __future__ import annotations

from dataclasses import dataclass

from agent.publish.mqtt_settings import MqttSettings
from agent.publish.opcua_server_settings import OpcUaServerSettings


@dataclass(frozen=True)
class PublishSettings:
    mqtt: MqttSettings | None = None
    opcua_server: OpcUaServerSettings | None = None
