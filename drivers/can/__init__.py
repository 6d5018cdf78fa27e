"""CAN controllers through python-can and a DBC file (`driver: can`): trigger, status, encoders.

stop_motion (driver.py) sends the STOP frame (connection.py, owed and resent on reconnect when
the link is down); the controller's watchdog stops the motion by itself when the agent's NOP
heartbeat of a running cycle ceases. link.py reads the bus, recorder.py checks a cycle's frames.
"""

from drivers.can.driver import CanDriver
from drivers.can.settings import CanSettings

__all__ = ["CanDriver", "CanSettings"]
