"""How many samples the backlash fit works on, and how a longer capture is brought down to them.

The fit's memory grows with the samples it holds: the nuisance basis and its SVD are N x ~31
float64 columns, the residual, model and evidence arrays a few N each (the population is
evaluated in row blocks of a fixed byte size, agent.estimation.backlash.search). Measured by
`python -m bench fit_memory`: about 1 kB per fitted sample on top of the interpreter, so a fit
of FIT_MAX_SAMPLES stays far inside the 512 MB an edge PC can give one analysis.

A longer capture is first decimated (anti-alias FIR filter, zero phase) to about
DECIMATED_RATE_PER_BAND_TOP times the top of the resonance band, never lower: the signature
rings at the joint resonance, and the filter must leave it untouched. What is still too long
after that is cut to its first FIT_MAX_SAMPLES. Both are stated in the result's warnings, and
the config check refuses a cycle that would capture samples the fit would never use
(agent.config.load): that is motion for nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]

FIT_MAX_SAMPLES = 1 << 18  # 262,144
# The decimated rate stays at least this many times the resonance band's top: scipy's FIR
# decimation filter (Hamming window, cutoff at the new Nyquist) passes 0.4 x Nyquist with
# well under 0.1 % of amplitude error.
DECIMATED_RATE_PER_BAND_TOP = 5.0


@dataclass(frozen=True)
class FitSamples:
    """What the fit makes of a capture of `captured` samples at `sample_rate_hz`."""

    captured: int
    sample_rate_hz: float
    decimation: int  # 1: none
    fitted: int  # after decimation and the cut
    cut: bool  # the capture's end is not fitted

    @property
    def fitted_rate_hz(self) -> float:
        return self.sample_rate_hz / self.decimation

    @property
    def fitted_duration_s(self) -> float:
        return (self.fitted - 1) / self.fitted_rate_hz

    def notes(self, load_turn_period_s: float) -> list[str]:
        """What a result says of the reduction (nothing when there was none)."""
        out = []
        if self.decimation > 1:
            out.append(
                f"{self.captured:,} samples decimated by {self.decimation} to "
                f"{self.fitted_rate_hz:.6g} Hz for the fit (it holds at most "
                f"{FIT_MAX_SAMPLES:,} samples)"
            )
        if self.cut:
            turns = self.fitted_duration_s / load_turn_period_s
            out.append(
                f"only the first {self.fitted_duration_s:.4g} s ({turns:.3g} load turns, "
                f"{self.fitted:,} samples) are fitted: the fit holds at most "
                f"{FIT_MAX_SAMPLES:,} samples"
            )
        return out


def plan_fit_samples(captured: int, sample_rate_hz: float, band_top_hz: float) -> FitSamples:
    """The decimation and cut `fit_backlash` applies to a capture of `captured` samples whose
    resonance band ends at `band_top_hz`."""
    if captured <= FIT_MAX_SAMPLES:
        return FitSamples(captured, sample_rate_hz, 1, captured, False)
    # As far as the band allows: fewer samples also make every evaluation of the fit cheaper.
    factor = max(1, math.floor(sample_rate_hz / (DECIMATED_RATE_PER_BAND_TOP * band_top_hz)))
    kept = math.ceil(captured / factor)
    return FitSamples(
        captured, sample_rate_hz, factor, min(kept, FIT_MAX_SAMPLES), kept > FIT_MAX_SAMPLES
    )


def reduce_to_plan(t: Array, r: Array, plan: FitSamples) -> tuple[Array, Array]:
    """`t` and `r` decimated and cut as `plan` says (unchanged when it says nothing)."""
    if plan.decimation > 1:
        from scipy.signal import decimate  # only long captures pay for importing scipy.signal

        r = np.asarray(decimate(r, plan.decimation, ftype="fir", zero_phase=True))
        t = t[:: plan.decimation]
        n = min(t.size, r.size)
        t, r = t[:n], r[:n]
    if plan.fitted < t.size:
        t, r = t[: plan.fitted], r[: plan.fitted]
    return np.ascontiguousarray(t), np.ascontiguousarray(r)
