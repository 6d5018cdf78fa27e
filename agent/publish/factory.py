"""The publishers a config asks for; none when the `publish:` section is empty."""

from __future__ import annotations

from pathlib import Path

from agent.publish.base import HealthPublisher
from agent.publish.settings import PublishSettings


def publishers_for(settings: PublishSettings, state_dir: Path) -> list[HealthPublisher]:
    out: list[HealthPublisher] = []
    if settings.mqtt is not None:
        from agent.publish.mqtt import MqttPublisher

        out.append(MqttPublisher(settings.mqtt, state_dir))
    if settings.opcua_server is not None:
        from agent.publish.opcua_server import OpcUaHealthServer

        out.append(OpcUaHealthServer(settings.opcua_server, state_dir))
    return out
