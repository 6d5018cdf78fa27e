"""Encoder interface boards on a serial line: framed samples, CRC, heartbeat."""

from drivers.serial.driver import SerialEncoderDriver
from drivers.serial.settings import SerialSettings

__all__ = ["SerialEncoderDriver", "SerialSettings"]
