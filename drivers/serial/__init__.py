"""Encoder interface boards on a serial line (`driver: serial`): framed samples, CRC, heartbeat.

stop_motion (driver.py) sends STOP and waits for its acknowledgement; the board stops the joint
by itself when the HEARTBEATs of a running cycle cease. frames.py is the wire format.
"""

from drivers.serial.driver import SerialEncoderDriver
from drivers.serial.settings import SerialSettings

__all__ = ["SerialEncoderDriver", "SerialSettings"]
