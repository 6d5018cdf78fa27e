"""The publishers a config asks for; none when the `publish:` section is empty."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.config.publish import PublishSettings
from agent.publish.base import HealthPublisher


def publishers_for(settings: PublishSettings, state_dir: Path) -> list[HealthPublisher]:
    out: list[HealthPublisher] = []
    depth: Callable[[], int] | None = None
    if settings.mqtt is not None:
        from agent.publish.mqtt.publisher import MqttPublisher

        mqtt = MqttPublisher(settings.mqtt, state_dir)
        out.append(mqtt)
        depth = lambda: mqtt.stats().queued  # noqa: E731 - the metrics endpoint reads it
    if settings.opcua_server is not None:
        from agent.publish.opcua_server.server import OpcUaHealthServer

        out.append(OpcUaHealthServer(settings.opcua_server, state_dir))
    if settings.prometheus is not None:
        from agent.publish.prometheus.exporter import PrometheusExporter

        out.append(PrometheusExporter(settings.prometheus, outbox_depth=depth))
    return out
