"""Universal Robots through ur_rtde; the C++ clients run in a worker process (worker/)."""

from drivers.ur_rtde.driver import UrRtdeDriver
from drivers.ur_rtde.settings import UrRtdeSettings

__all__ = ["UrRtdeDriver", "UrRtdeSettings"]
