"""Absolute single-turn encoder counts -> continuous multi-turn angle.

The one shared function every driver uses at its boundary (ARCHITECTURE.md, Conventions).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

# Absolute encoders in use report 12 to 32 bits per turn; outside that a bit width is a typo.
MIN_BITS = 12
MAX_BITS = 32
# Beyond 2**52 ticks a float angle no longer tells neighbouring ticks apart.
_MAX_TICKS = float(2**52)


def counts_per_turn(bits: int) -> int:
    """Counts in one turn for an encoder of `bits` bits (ValueError unless an int 12..32)."""
    if (
        isinstance(bits, bool)
        or not isinstance(bits, int | np.integer)
        or not MIN_BITS <= bits <= MAX_BITS
    ):
        raise ValueError(
            f"encoder bit width must be an integer {MIN_BITS}..{MAX_BITS}, got {bits!r}"
        )
    return 1 << int(bits)


def _radians_per_count(cpt: int) -> float:
    # cpt is a power of two, so this quotient is exact: n * it is the one float angle of tick n.
    return 2.0 * math.pi / cpt


def unwrap_counts(counts: npt.ArrayLike, bits: int) -> npt.NDArray[np.float64]:
    """Unwrap raw single-turn counts into a continuous angle in rad (first sample's turn = 0).

    Exact in integer arithmetic: each step is taken modulo one turn into [-half, half), so a
    wrap in either direction is followed as long as the true step is under half a turn per
    sample (a step of exactly half a turn is ambiguous and is read as -half). Radians are formed
    only at the end, so no rounding accumulates along the capture.
    """
    cpt = counts_per_turn(bits)
    raw = np.asarray(counts)
    if raw.ndim != 1:
        raise ValueError("encoder counts must be a 1-D array")
    if raw.dtype.kind not in "iuf":
        raise ValueError(f"encoder counts must be numbers, got an array of {raw.dtype}")
    if raw.size == 0:
        return np.zeros(0)
    if raw.dtype.kind == "f" and (not np.all(np.isfinite(raw)) or np.any(raw != np.floor(raw))):
        raise ValueError("encoder counts must be whole numbers")
    # Range check before the cast: a float or uint64 beyond int64 would wrap silently.
    if np.any(raw < 0) or np.any(raw >= cpt):
        raise ValueError(f"encoder counts must lie in 0..{cpt - 1} for {bits} bits")
    c = raw.astype(np.int64)
    half = cpt >> 1
    steps = (np.diff(c) + half) % cpt - half
    total = np.empty_like(c)
    total[0] = c[0]
    np.cumsum(steps, out=total[1:])
    total[1:] += c[0]
    return total.astype(np.float64) * _radians_per_count(cpt)


def angle_to_counts(angle_rad: npt.ArrayLike, bits: int) -> npt.NDArray[np.int64]:
    """Quantise a continuous angle the way an absolute encoder reports it (floor, modulo a turn).

    The floor is taken against the same tick angles unwrap_counts produces, so
    angle_to_counts(unwrap_counts(c)) == c exactly (a plain floor(a * cpt / 2 pi) lands one
    tick low on some of them through rounding).
    """
    cpt = counts_per_turn(bits)
    a = np.asarray(angle_rad, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError("angles must be finite to be quantised")
    step = _radians_per_count(cpt)
    ticks = np.floor(a / step)
    if np.any(np.abs(ticks) > _MAX_TICKS):
        raise ValueError("angles beyond 2**52 counts cannot be quantised exactly")
    ticks += (ticks + 1.0) * step <= a
    ticks -= ticks * step > a
    return np.mod(ticks.astype(np.int64), cpt)
