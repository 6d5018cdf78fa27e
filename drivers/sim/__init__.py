"""The simulated fake controller (`driver: sim`) for tests and the demo.

Its joints follow the joint model of Giovannitti et al. 2022 (backlash.py), its robot the elastic
model of Zollo, Lopez et al. 2014 (excitation.py). stop_motion (driver.py) ends the running
cycle's paced motion at once, as a real controller's stop would.
"""

from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimSettings

__all__ = ["SimDriver", "SimSettings"]
