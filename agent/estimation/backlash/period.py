"""Load-turn period T_f from the signal itself: the strongest autocorrelation peak.

Everything in a constant-speed capture repeats once per load turn (gravity ripple, both gap
closures), so the autocorrelation of the residual peaks at T_f. Half a turn does not compete:
there the two oscillations have opposite signs and the correlation is negative.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


def autocorrelation(x: Array) -> Array:
    """Normalised (biased) autocorrelation for lags 0..len-1, by FFT."""
    x = np.asarray(x, dtype=np.float64) - float(np.mean(x))
    n = x.size
    nfft = 1 << (2 * n - 1).bit_length()
    spec = np.fft.rfft(x, nfft)
    ac = np.fft.irfft(spec * np.conj(spec), nfft)[:n]
    return ac / ac[0] if ac[0] > 0 else ac


def estimate_period(
    residual: Array, dt_s: float, lo_s: float | None = None, hi_s: float | None = None
) -> float | None:
    """Period in seconds, refined to a fraction of a sample by a parabola through the peak.

    Searches lags in [lo_s, hi_s] (default: after the autocorrelation's first zero crossing, up
    to half the capture). Returns None when no positive peak exists there.
    """
    ac = autocorrelation(residual)
    n = ac.size
    hi = n // 2 if hi_s is None else min(n - 2, int(hi_s / dt_s))
    if lo_s is None:
        below = np.flatnonzero(ac < 0)
        if below.size == 0:
            return None
        lo = int(below[0])
    else:
        lo = max(1, int(lo_s / dt_s))
    if hi <= lo + 1:
        return None
    seg = ac[lo : hi + 1]
    interior = (seg[1:-1] >= seg[:-2]) & (seg[1:-1] >= seg[2:])
    peaks = np.flatnonzero(interior) + 1
    if peaks.size == 0:
        return None
    k = int(peaks[np.argmax(seg[peaks])]) + lo
    if ac[k] <= 0:
        return None
    y0, y1, y2 = ac[k - 1], ac[k], ac[k + 1]
    denom = y0 - 2.0 * y1 + y2
    frac = 0.5 * (y0 - y2) / denom if denom < 0 else 0.0
    return float((k + frac) * dt_s)
