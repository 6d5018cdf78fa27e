"""The identification's zero-phase Butterworth low-pass (numpy FFTs, so that `jha identify` does
not import scipy.signal) is scipy.signal's butter + sosfiltfilt(padtype="odd"), to rounding:
every order, cut-offs from 1e-4 to 0.4 of the sampling rate, short and long signals, 1-D and
many columns, with and without padding."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import signal

from agent.estimation.identification.butterworth import butterworth_poles, zero_phase_lowpass


@pytest.mark.parametrize("order", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize(
    ("sample_rate_hz", "cutoff_hz"), [(1000.0, 20.0), (200.0, 0.597), (1000.0, 0.1), (500.0, 200.0)]
)
def test_it_is_scipys_filter(order: int, sample_rate_hz: float, cutoff_hz: float) -> None:
    rng = np.random.default_rng(order)
    sos = signal.butter(order, cutoff_hz, fs=sample_rate_hz, output="sos")
    for n, columns in ((40, 1), (5027, 3), (21000, 2)):
        x = np.cumsum(rng.normal(size=(n, columns)), axis=0) + rng.normal(size=(n, columns))
        for padlen in (0, min(n - 1, math.ceil(3 * sample_rate_hz / cutoff_hz))):
            ref = signal.sosfiltfilt(sos, x, axis=0, padtype="odd", padlen=padlen)
            got = zero_phase_lowpass(x, sample_rate_hz, cutoff_hz, order, padlen)
            assert got.shape == x.shape
            assert np.max(np.abs(got - ref)) <= 1e-8 * np.max(np.abs(ref)), (n, padlen)
    one = zero_phase_lowpass(x[:, 0], sample_rate_hz, cutoff_hz, order, 10)
    ref1 = signal.sosfiltfilt(sos, x[:, 0], padtype="odd", padlen=10)
    assert np.allclose(one, ref1, rtol=0, atol=1e-8 * np.max(np.abs(ref1)))


def test_the_poles_are_scipys() -> None:
    for order in (1, 4, 7):
        _, p, _ = signal.butter(order, 3.0, fs=200.0, output="zpk")
        assert np.allclose(
            np.sort_complex(butterworth_poles(order, 3.0, 200.0)), np.sort_complex(p)
        )


def test_impossible_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="0 < cut-off < 50 Hz"):
        butterworth_poles(4, 60.0, 100.0)
    with pytest.raises(ValueError, match="padlen 10 must be below the signal's length 10"):
        zero_phase_lowpass(np.zeros(10), 100.0, 5.0, 2, 10)
