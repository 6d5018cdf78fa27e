"""RTDE `safety_status_bits` (Universal Robots, RTDE guide: "Bits 0-10: Is normal mode | Is
reduced mode | Is protective stopped | Is recovery mode | Is safeguard stopped | Is system
emergency stopped | Is robot emergency stopped | Is emergency stopped | Is violation | Is fault |
Is stopped due to safety"), read by the worker every package and by the status read.

Named, so an abort says which stop it was: the dashboard's safety string can lag the RTDE word by
a status period, and "safety status NORMAL (bits 0x404)" alone tells a person nothing.
"""

from __future__ import annotations

_NAMES = (
    "normal mode",
    "reduced mode",
    "protective stopped",
    "recovery mode",
    "safeguard stopped",
    "system emergency stopped",
    "robot emergency stopped",
    "emergency stopped",
    "violation",
    "fault",
    "stopped due to safety",
)
# Every bit that means the arm was stopped by its safety system.
STOP_BITS = sum(1 << b for b in (2, 4, 5, 6, 7, 8, 9, 10))


def stop_names(bits: int) -> str:
    """The stop bits set in `bits`, named, with the word in hex: "protective stopped,
    stopped due to safety (bits 0x405)"."""
    names = [name for b, name in enumerate(_NAMES) if bits & STOP_BITS & (1 << b)]
    return f"{', '.join(names) or 'no stop bit'} (bits {bits:#x})"
