"""How many samples the backlash fit works on: a longer capture is cut to its first
FIT_MAX_SAMPLES, and the result says so.

The fit's memory grows with the samples it holds: the nuisance basis and its SVD are N x ~31
float64 columns, the residual, model and evidence arrays a few N each (the population is
evaluated in row blocks of a fixed byte size, agent.estimation.backlash.search). `python -m
bench fit_memory` measures the peak of `jha analyze backlash` against the capture's samples.

Why a cut and not a decimation: the signature starts abruptly at each gap closure, and an
anti-alias filter smooths that onset, which the model does not have. Measured on the
synthetic signature of tests/estimation/test_fit_samples.py (48 Hz, 12 load turns): decimated
by 5 from 5 kHz to 1 kHz, the resonance read 48.48 Hz and the amplitude 4.7 % low with an
interval that missed the truth; thinned without a filter 48.36 Hz and 3.9 % low (the fit at
1 kHz is biased on that signal even when drawn at 1 kHz). The first samples at the capture's
own rate keep the fit as it is on every capture that fits whole. The config check refuses a
cycle that would capture more than the fit uses (agent.config.load): motion for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]

FIT_MAX_SAMPLES = 1 << 18  # 262,144: 26 s at 10 kHz, 524 s at 500 Hz


@dataclass(frozen=True)
class FitSamples:
    """What the fit makes of a capture of `captured` samples at `sample_rate_hz`."""

    captured: int
    sample_rate_hz: float
    fitted: int  # the first ones
    cut: bool  # the capture's end is not fitted

    @property
    def fitted_duration_s(self) -> float:
        return (self.fitted - 1) / self.sample_rate_hz

    def notes(self, load_turn_period_s: float) -> list[str]:
        """What a result says of the cut (nothing when there was none)."""
        if not self.cut:
            return []
        turns = self.fitted_duration_s / load_turn_period_s
        return [
            f"only the first {self.fitted_duration_s:.4g} s ({turns:.3g} load turns, "
            f"{self.fitted:,} of {self.captured:,} samples) are fitted: the fit holds at most "
            f"{FIT_MAX_SAMPLES:,} samples"
        ]


def plan_fit_samples(captured: int, sample_rate_hz: float) -> FitSamples:
    """The cut `fit_backlash` applies to a capture of `captured` samples."""
    fitted = min(captured, FIT_MAX_SAMPLES)
    return FitSamples(captured, sample_rate_hz, fitted, fitted < captured)


def reduce_to_plan(t: Array, r: Array, plan: FitSamples) -> tuple[Array, Array]:
    """`t` and `r` cut as `plan` says (unchanged when it says nothing, or when they are cut
    already)."""
    if not plan.cut or t.size <= plan.fitted:
        return t, r
    return np.ascontiguousarray(t[: plan.fitted]), np.ascontiguousarray(r[: plan.fitted])
