"""Zero-phase Butterworth low-pass (what scipy.signal's butter + sosfiltfilt with odd padding
compute, to rounding), in numpy alone: importing scipy.signal costs about 1 s (it loads
scipy.stats), two thirds of a whole `jha identify` of a 25 s capture (bench kuka_lwr4).

The same filter, computed differently:
  - design: the analog Butterworth poles, pre-warped and mapped by the bilinear transform,
    zeros at z = -1, unit gain at DC (scipy.signal.butter's steps);
  - each pass: scipy starts the filter in the steady state of a constant input equal to the
    first sample (sosfilt_zi); with unit DC gain that is the first sample plus the zero-state
    response to the signal minus it, and the zero-state response is a convolution with the
    impulse response, done with FFTs long enough that its tail (below 1e-18 of its peak) does
    not wrap around;
  - forward, then backward, on the odd extension, then trimmed (sosfiltfilt's padtype="odd").
tests/estimation/test_butterworth.py holds it to scipy.signal's output.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
_TAIL = 1e-18  # the impulse response is negligible below this fraction of its start


def butterworth_poles(
    order: int, cutoff_hz: float, sample_rate_hz: float
) -> npt.NDArray[np.complex128]:
    """The digital low-pass's poles (its zeros are all at z = -1)."""
    if order < 1 or not 0.0 < cutoff_hz < sample_rate_hz / 2.0:
        raise ValueError(
            f"a Butterworth low-pass needs order >= 1 and 0 < cut-off < {sample_rate_hz / 2:g} Hz,"
            f" found order {order}, cut-off {cutoff_hz:g} Hz"
        )
    fs2 = 2.0 * sample_rate_hz
    warped = fs2 * math.tan(math.pi * cutoff_hz / sample_rate_hz)
    analog = -np.exp(1j * np.pi * np.arange(-order + 1, order, 2) / (2 * order)) * warped
    return np.asarray((fs2 + analog) / (fs2 - analog))


def _response(poles: npt.NDArray[np.complex128], n_fft: int) -> npt.NDArray[np.complex128]:
    """H on the rfft grid of n_fft points, with H(1) = 1."""
    z = np.exp(2j * np.pi * np.arange(n_fft // 2 + 1) / n_fft)
    h = np.ones_like(z)
    for p in poles:
        h *= (z + 1.0) * (1.0 - p) / (2.0 * (z - p))
    return h


def _one_pass(x: Array, poles: npt.NDArray[np.complex128]) -> Array:
    """Causal filtering along axis 0, started in the steady state of x[0]."""
    n = x.shape[0]
    radius = float(np.max(np.abs(poles)))
    tail = math.ceil(math.log(_TAIL) / math.log(radius)) if radius > 0 else 1
    n_fft = 1 << max(1, (n + tail - 1).bit_length())
    start = x[:1]
    spectrum = np.fft.rfft(x - start, n_fft, axis=0)
    shape = (-1,) + (1,) * (x.ndim - 1)
    out = np.fft.irfft(spectrum * _response(poles, n_fft).reshape(shape), n_fft, axis=0)[:n]
    return np.asarray(out + start)


def zero_phase_lowpass(
    x: npt.ArrayLike, sample_rate_hz: float, cutoff_hz: float, order: int, padlen: int
) -> Array:
    """Forward and backward Butterworth low-pass along axis 0, the ends padded with the odd
    extension of `padlen` samples (scipy.signal.sosfiltfilt(..., padtype="odd"))."""
    a = np.asarray(x, dtype=np.float64)
    if not 0 <= padlen < a.shape[0]:
        raise ValueError(f"padlen {padlen} must be below the signal's length {a.shape[0]}")
    poles = butterworth_poles(order, cutoff_hz, sample_rate_hz)
    if padlen:
        left = 2.0 * a[:1] - a[padlen:0:-1]
        right = 2.0 * a[-1:] - a[-2 : -padlen - 2 : -1]
        a = np.concatenate([left, a, right], axis=0)
    forward = _one_pass(a, poles)
    both = _one_pass(forward[::-1], poles)[::-1]
    return np.ascontiguousarray(both[padlen : both.shape[0] - padlen])
