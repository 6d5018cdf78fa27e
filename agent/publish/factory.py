"""The publishers a config asks for; none when the `publish:` section is empty."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.config.mqtt import MqttSettings
from agent.config.publish import PublishSettings
from agent.publish.base import HealthPublisher

# Told of each publisher that could not be made (its name, why); the others are made anyway.
OnFailure = Callable[[str, Exception], None]


def publishers_for(
    settings: PublishSettings, state_dir: Path, failed: OnFailure | None = None
) -> list[HealthPublisher]:
    """Each publisher `settings` asks for. Without `failed` the first that cannot be made
    raises; with it, that one is reported and the others are made: a bad MQTT password file
    must not switch off the metrics endpoint or the OPC UA server. An MQTT publisher that
    cannot be made is replaced by its outbox alone (agent.publish.mqtt.queue_only), so its
    reports wait there instead of being dropped."""
    out: list[HealthPublisher] = []

    def make(name: str, build: Callable[[], HealthPublisher]) -> HealthPublisher | None:
        try:
            made = build()
        except Exception as exc:
            if failed is None:
                raise
            failed(name, exc)
            return None
        out.append(made)
        return made

    depth: Callable[[], int] | None = None
    if settings.mqtt is not None:
        mqtt, depth = _mqtt(settings.mqtt, state_dir, failed)
        out.append(mqtt)
    if settings.opcua_server is not None:
        from agent.publish.opcua_server.server import OpcUaHealthServer

        opcua_settings = settings.opcua_server
        make("opcua_server", lambda: OpcUaHealthServer(opcua_settings, state_dir))
    if settings.prometheus is not None:
        from agent.publish.prometheus.exporter import PrometheusExporter

        prometheus_settings = settings.prometheus
        make("prometheus", lambda: PrometheusExporter(prometheus_settings, outbox_depth=depth))
    return out


def _mqtt(
    settings: MqttSettings, state_dir: Path, failed: OnFailure | None
) -> tuple[HealthPublisher, Callable[[], int]]:
    """The MQTT publisher and how many messages its outbox holds; when it cannot be made (and
    `failed` is told), its outbox alone: the reports wait there for a later start to send."""
    from agent.publish.mqtt.queue_only import QueueOnlyPublisher

    try:
        from agent.publish.mqtt.publisher import MqttPublisher  # paho and TLS: either may fail

        made = MqttPublisher(settings, state_dir)
    except Exception as exc:
        if failed is None:
            raise
        failed("mqtt", exc)
        stand_in = QueueOnlyPublisher(settings, state_dir, f"{type(exc).__name__}: {exc}")
        return stand_in, stand_in.queued_messages
    return made, lambda: made.stats().queued
