"""The simulated fake controller: joints and a robot integrated from the papers' models."""

from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimSettings

__all__ = ["SimDriver", "SimSettings"]
