"""GRBL or DNC CNC controllers on a serial port (`driver: grbl`): toolpath streaming only.

stop_motion (driver.py) is a feed hold, then a soft reset once the machine stands still.
"""

from drivers.grbl.driver import GrblDriver
from drivers.grbl.settings import GrblSettings

__all__ = ["GrblDriver", "GrblSettings"]
