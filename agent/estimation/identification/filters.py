"""The signal chain's filters (Madsen et al. 2020, section 4): from sampled positions to speed and
acceleration, and from full-rate columns to decimated rows.

  1. positions -> zero-phase Butterworth (forward and reverse; default 4th order, cut-off 5x the
     bandwidth of the robot dynamics, section 4.1) -> central differences for speed and
     acceleration ("band-pass filtering");
  2. every column of the observation matrix and the measurement vector -> the same zero-phase
     Butterworth ("parallel filtering", section 4.2) -> keep every 20th sample (decimation).
The least squares that follow are agent.estimation.identification.least_squares'; the capture
that goes in, agent.estimation.identification.robot_signals'.

Madsen et al. 2020 do not give the cut-off of the parallel filter (lost in the extraction). The
value used here is the usual one for decimation (Gautier's IDIM practice, and Matlab's
`decimate`): 0.8 times the Nyquist frequency of the decimated signal,
0.8 * fs / (2 * decimation) = 20 Hz at 1 kHz and 20. It sits far above the dynamics band, so it
removes what the decimation would fold down (torque ripple, elastic ringing, quantisation and
measurement noise) and nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.errors import EstimationError
from agent.estimation.identification import butterworth

Array = npt.NDArray[np.float64]

DEFAULT_ORDER = 4
BANDWIDTH_FACTOR = 5.0  # Madsen et al. 2020, section 4.1: cut-off = 5 x the dynamics' frequency
DEFAULT_DECIMATION = 20  # Madsen et al. 2020, section 4.2
PARALLEL_NYQUIST_FRACTION = 0.8  # see the module docstring
BANDWIDTH_FLOOR = 1e-3  # see dynamics_bandwidth_hz


@dataclass(frozen=True)
class FilterSettings:
    """Band-pass process and parallel filtering. None means: derived as documented."""

    order: int = DEFAULT_ORDER
    cutoff_hz: float | None = None  # None: BANDWIDTH_FACTOR x bandwidth_hz
    bandwidth_hz: float | None = None  # None: estimated from the link positions
    decimation: int = DEFAULT_DECIMATION
    parallel_order: int = DEFAULT_ORDER
    parallel_cutoff_hz: float | None = None  # None: 0.8 x Nyquist after decimation

    def resolved(self, sample_rate_hz: float, bandwidth_hz: float) -> ResolvedFilter:
        nyquist = sample_rate_hz / 2.0
        par = self.parallel_cutoff_hz
        if par is None:
            par = PARALLEL_NYQUIST_FRACTION * sample_rate_hz / (2.0 * self.decimation)
        # a derived cut-off stops at the parallel filter's: nothing above it survives decimation
        cutoff = self.cutoff_hz
        if cutoff is None:
            cutoff = min(BANDWIDTH_FACTOR * bandwidth_hz, par)
        if self.decimation < 1 or self.order < 1 or self.parallel_order < 1:
            raise EstimationError("filter order and decimation must be at least 1")
        for name, f in (("cut-off", cutoff), ("parallel cut-off", par)):
            if not 0.0 < f < nyquist:
                raise EstimationError(
                    f"{name} {f:.4g} Hz must lie between 0 and the Nyquist frequency "
                    f"{nyquist:.4g} Hz of the capture"
                )
        return ResolvedFilter(
            sample_rate_hz,
            bandwidth_hz,
            cutoff,
            self.order,
            self.decimation,
            par,
            self.parallel_order,
        )


@dataclass(frozen=True)
class ResolvedFilter:
    sample_rate_hz: float
    bandwidth_hz: float
    cutoff_hz: float
    order: int
    decimation: int
    parallel_cutoff_hz: float
    parallel_order: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ------------------------------------------------------------------------------- filters


def zero_phase_lowpass(
    x: npt.ArrayLike, sample_rate_hz: float, cutoff_hz: float, order: int = DEFAULT_ORDER
) -> Array:
    """Butterworth low-pass run forward and backward along axis 0 (no lag, squared gain).

    The ends are padded with the odd extension over three time constants of the filter, so a
    capture that starts and ends at rest (the excitation cycles do) has no edge transient.
    """
    a = np.asarray(x, dtype=np.float64)
    padlen = min(a.shape[0] - 1, math.ceil(3.0 * sample_rate_hz / cutoff_hz))
    # numpy's FFTs, not scipy.signal (agent.estimation.identification.butterworth says why)
    return butterworth.zero_phase_lowpass(a, sample_rate_hz, cutoff_hz, order, padlen)


def central_difference(x: npt.ArrayLike, sample_rate_hz: float) -> Array:
    """d/dt along axis 0: (x[k+1] - x[k-1]) / 2 dt inside, second-order one-sided at the ends."""
    return np.gradient(np.asarray(x, dtype=np.float64), 1.0 / sample_rate_hz, axis=0, edge_order=2)


def band_pass(
    x: npt.ArrayLike, sample_rate_hz: float, cutoff_hz: float, order: int = DEFAULT_ORDER
) -> tuple[Array, Array, Array]:
    """Position, speed and acceleration: zero-phase low-pass, then two central differences."""
    xf = zero_phase_lowpass(x, sample_rate_hz, cutoff_hz, order)
    xd = central_difference(xf, sample_rate_hz)
    return xf, xd, central_difference(xd, sample_rate_hz)


def dynamics_bandwidth_hz(
    position: npt.ArrayLike, sample_rate_hz: float, floor: float = BANDWIDTH_FLOOR
) -> float:
    """Highest frequency at which the motion still carries power: the last bin of the speed
    spectrum (Hann window, all joints summed) above `floor` times its peak.

    The speed spectrum weights a harmonic by its frequency once; the inertial torques weigh it
    twice more, so the top harmonic of an excitation must lie inside the band even when its
    share of the position is small. A floor of 1e-3 in power (3 % in amplitude) finds it while
    staying above the noise floor of quantised encoders (1e-12 of the peak at 19 bits).
    """
    x = np.asarray(position, dtype=np.float64)
    x = x.reshape(x.shape[0], -1)
    v = np.diff(x, axis=0) * sample_rate_hz
    v = v - v.mean(axis=0)
    power = (np.abs(np.fft.rfft(v * np.hanning(v.shape[0])[:, None], axis=0)) ** 2).sum(axis=1)
    if power.max() <= 0.0:
        raise EstimationError("the link positions do not move: no dynamics to identify")
    freqs = np.fft.rfftfreq(v.shape[0], 1.0 / sample_rate_hz)
    k = int(np.flatnonzero(power >= floor * power.max())[-1])
    return float(max(freqs[k], freqs[1] if freqs.size > 1 else sample_rate_hz))


def parallel_decimate(
    x: npt.ArrayLike,
    flt: ResolvedFilter,
    keep: npt.NDArray[np.intp],
    sub: npt.NDArray[np.intp] | None = None,
) -> Array:
    """Parallel filtering (zero-phase Butterworth along axis 0), then the samples `keep`
    (decimation_index). All-zero columns are skipped.

    `sub` (subgrid) says that x holds only those samples of a signal band-limited far below
    their rate: it is filtered at that rate. The regressor qualifies, being a smooth function
    of positions already low-passed at or below the parallel cut-off; torque and sign columns
    do not and go through at the full rate.
    """
    a = np.asarray(x, dtype=np.float64)
    rate, pos = flt.sample_rate_hz, keep
    if sub is not None:
        stride = int(sub[1] - sub[0]) if sub.size > 1 else 1
        rate, pos = rate / stride, (keep - sub[0]) // stride
    flat = a.reshape(a.shape[0], -1)
    out = np.zeros((keep.size, flat.shape[1]))
    live = np.flatnonzero(np.any(flat != 0.0, axis=0))
    if live.size:
        filtered = zero_phase_lowpass(
            flat[:, live], rate, flt.parallel_cutoff_hz, flt.parallel_order
        )
        out[:, live] = filtered[pos]
    return out.reshape((keep.size, *a.shape[1:]))


def decimation_index(n_samples: int, flt: ResolvedFilter) -> npt.NDArray[np.intp]:
    """Samples kept after decimation: every decimation-th, away from both ends by one period of
    the parallel filter's cut-off (where its padding still shows)."""
    edge = math.ceil(flt.sample_rate_hz / flt.parallel_cutoff_hz)
    idx = np.arange(edge, n_samples - edge, flt.decimation)
    if idx.size < 2:
        raise EstimationError(f"{n_samples} samples are too few for the filters")
    return idx


def subgrid(
    n_samples: int, keep: npt.NDArray[np.intp], flt: ResolvedFilter
) -> npt.NDArray[np.intp]:
    """Every stride-th sample, through all of `keep`: where smooth columns are evaluated.

    The stride is the largest divisor of the decimation that keeps the rate at least ten times
    the parallel cut-off, so the parallel filter still acts there as it does at the full rate.
    """
    stride = (
        max(
            r
            for r in range(1, flt.decimation + 1)
            if flt.decimation % r == 0 and flt.sample_rate_hz / r >= 10.0 * flt.parallel_cutoff_hz
        )
        if flt.sample_rate_hz >= 10.0 * flt.parallel_cutoff_hz
        else 1
    )
    return np.arange(int(keep[0]) % stride, n_samples, stride)
