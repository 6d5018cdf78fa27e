"""How each indicator is shown to people: label, display unit and the scale from its SI value.

One table for every page and payload (the agent's reports, the fleet's plan); it imports
nothing heavy, so the fleet service (no numpy) can use it too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Indicator:
    """How an indicator is shown to people: SI value * scale, in `display_unit`."""

    name: str
    label: str
    unit: str  # SI unit of the stored value
    display_unit: str
    scale: float

    def format(self, value: float | None, digits: int = 3) -> str:
        if value is None or not math.isfinite(value):
            return "n/a"
        return f"{value * self.scale:.{digits}g} {self.display_unit}"


INDICATORS: dict[str, Indicator] = {
    "backlash_rad": Indicator("backlash_rad", "backlash", "rad", "mrad", 1e3),
    "amplitude_rad_s": Indicator("amplitude_rad_s", "amplitude A", "rad/s", "rad/s", 1.0),
    # The identification's (agent.estimation.identification.fit.JointHealth.rows) and stiffness's.
    "coulomb_friction_nm": Indicator("coulomb_friction_nm", "Coulomb friction", "N·m", "N·m", 1.0),
    "viscous_friction_nm_s_rad": Indicator(
        "viscous_friction_nm_s_rad", "viscous friction", "N·m·s/rad", "N·m·s/rad", 1.0
    ),
    "stiffness_nm_rad": Indicator("stiffness_nm_rad", "stiffness", "N·m/rad", "kN·m/rad", 1e-3),
    "rotor_inertia_kg_m2": Indicator("rotor_inertia_kg_m2", "rotor inertia", "kg·m²", "kg·m²", 1.0),
    "torque_nmse_nm": Indicator("torque_nmse_nm", "torque-prediction NMSE", "N·m", "N·m", 1.0),
}


def indicator_info(name: str) -> Indicator:
    """Display facts of an indicator; unknown names are shown in SI as they are."""
    return INDICATORS.get(name, Indicator(name, name, "", "", 1.0))
