"""OPC UA controllers through asyncua: secure session, chunked sample buffers, watchdog."""

from drivers.opcua.driver import OpcUaDriver
from drivers.opcua.settings import OpcUaSettings

__all__ = ["OpcUaDriver", "OpcUaSettings"]
