"""Universal Robots through ur_rtde (`driver: ur_rtde`): RTDE capture, dashboard interlocks.

The asyncio side is driver.py (UrRtdeDriver, with stop_motion); the C++ clients run in a worker
process (worker/, started as `python -m drivers.ur_rtde.worker`), which sends the stops itself
(worker/cycle.py). The exports load on first use: the worker process imports this package on its
way to drivers.ur_rtde.worker and must not pay for the driver's imports (numpy, the capture
model) nor depend on them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drivers.ur_rtde.driver import UrRtdeDriver
    from drivers.ur_rtde.settings import UrRtdeSettings

__all__ = ["UrRtdeDriver", "UrRtdeSettings"]

_HOMES = {"UrRtdeDriver": "drivers.ur_rtde.driver", "UrRtdeSettings": "drivers.ur_rtde.settings"}


def __getattr__(name: str) -> Any:
    """The entry point `drivers.ur_rtde:UrRtdeDriver` and `from drivers.ur_rtde import ...`."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
