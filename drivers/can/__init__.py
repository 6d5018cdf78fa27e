"""CAN controllers through python-can and a DBC file: trigger, status, encoder frames."""

from drivers.can.driver import CanDriver
from drivers.can.settings import CanSettings

__all__ = ["CanDriver", "CanSettings"]
