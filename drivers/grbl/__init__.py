"""A GRBL CNC on a serial port: streaming only, feed hold then soft reset as its stop."""

from drivers.grbl.driver import GrblDriver
from drivers.grbl.settings import GrblSettings

__all__ = ["GrblDriver", "GrblSettings"]
