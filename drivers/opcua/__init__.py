"""OPC UA controllers through asyncua (`driver: opcua`): secure session, chunked sample buffers.

stop_motion (driver.py) performs the configured stop action, resent after a reconnect when it
could not be delivered; the controller's watchdog stops the motion by itself when the counter
the agent feeds during a cycle stops changing (watchdog.py).
"""

from drivers.opcua.driver import OpcUaDriver
from drivers.opcua.settings import OpcUaSettings

__all__ = ["OpcUaDriver", "OpcUaSettings"]
