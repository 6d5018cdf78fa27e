"""Settings of the MQTT publisher (`publish.mqtt:` in the config)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MqttSettings:
    host: str = field(metadata={"doc": "the plant broker"})
    port: int = field(default=8883, metadata={"ge": 1, "le": 65535})
    topic_prefix: str = field(default="jha", metadata={"doc": "topics are <prefix>/<site>/..."})
    client_id: str | None = None
