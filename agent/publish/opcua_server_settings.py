"""Settings of the opt-in OPC UA server that exposes joint health (`publish.opcua_server:`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OpcUaServerSettings:
    endpoint: str = field(
        default="opc.tcp://127.0.0.1:4841/jha/", metadata={"doc": "where the server listens"}
    )
