"""The `publish:` section: every publisher is opt-in, so an empty section opens no socket."""

from __future__ import annotations

from dataclasses import dataclass

from agent.config.mqtt import MqttSettings
from agent.config.opcua_server import OpcUaServerSettings
from agent.config.prometheus import PrometheusSettings


@dataclass(frozen=True)
class PublishSettings:
    mqtt: MqttSettings | None = None
    opcua_server: OpcUaServerSettings | None = None
    prometheus: PrometheusSettings | None = None
