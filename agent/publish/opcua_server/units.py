"""Engineering units of the OPC UA health server's indicator variables: the SI unit of an
indicator, and its UNECE EUInformation (OPC UA Part 8)."""

from __future__ import annotations

from asyncua import ua

from agent.health.display import indicator_info

CEFACT_URI = "http://www.opcfoundation.org/UA/units/un/cefact"
# SI unit text -> (UN/CEFACT common code, description); OPC UA Part 8 derives the UnitId.
UNECE_UNITS: dict[str, tuple[str, str]] = {
    "rad": ("C81", "radian"),
    "rad/s": ("2A", "radian per second"),
    "rad/s²": ("2B", "radian per second squared"),
    "N·m": ("NU", "newton metre"),
    "N·m/rad": ("", "newton metre per radian"),
    "N·m·s/rad": ("", "newton metre second per radian"),
    "kg·m²": ("B32", "kilogram metre squared"),
    "s": ("SEC", "second"),
    "Hz": ("HTZ", "hertz"),
    "A": ("AMP", "ampere"),
    "1": ("C62", "one"),
}
# Unit by the name's suffix, for indicators the display table does not know.
_SUFFIX_UNITS = (
    ("_nm_s_rad", "N·m·s/rad"),
    ("_nm_rad", "N·m/rad"),
    ("_rad_s2", "rad/s²"),
    ("_rad_s", "rad/s"),
    ("_rad", "rad"),
    ("_nm", "N·m"),
    ("_kg_m2", "kg·m²"),
    ("_hz", "Hz"),
    ("_s", "s"),
    ("_a", "A"),
)
_UNIT_ALIASES = {
    "Nm": "N·m",
    "Nm/rad": "N·m/rad",
    "N*m": "N·m",
    "N*m/rad": "N·m/rad",
    "Nms/rad": "N·m·s/rad",
    "kg*m^2": "kg·m²",
    "kgm2": "kg·m²",
    "": "",
}


def unit_of(indicator: str, given: str = "") -> str:
    """The SI unit text of an indicator: the one given, else the display table's, else by the
    name's unit suffix (`stiffness_nm_rad` -> N·m/rad)."""
    unit = _UNIT_ALIASES.get(given, given) or indicator_info(indicator).unit
    if unit:
        return unit
    lower = indicator.lower()
    return next((u for suffix, u in _SUFFIX_UNITS if lower.endswith(suffix)), "")


def unece_unit_id(code: str) -> int:
    """OPC UA Part 8: the UnitId is the common code's characters as big-endian bytes."""
    value = 0
    for c in code.upper():
        value = (value << 8) | ord(c)
    return value


def eu_information(unit: str) -> ua.EUInformation:
    code, description = UNECE_UNITS.get(unit, ("", unit))
    return ua.EUInformation(
        NamespaceUri=CEFACT_URI,
        UnitId=unece_unit_id(code) if code else -1,
        DisplayName=ua.LocalizedText(unit),
        Description=ua.LocalizedText(description),
    )
