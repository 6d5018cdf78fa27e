"""delta = f(A): the monotone cubic of Giovannitti et al. 2022 eq. 10."""

from __future__ import annotations

import numpy as np
import pytest

from agent.errors import EstimationError
from agent.estimation.backlash.calibration import (
    PAPER_EQ10_COEFFS,
    BacklashCalibration,
    fit_calibration,
)


def eq10(a: np.ndarray) -> np.ndarray:
    c0, c1, c2, c3 = PAPER_EQ10_COEFFS
    return c0 + a * (c1 + a * (c2 + a * c3))


def test_recovers_the_papers_eq10_from_its_own_points() -> None:
    """Ten (A, delta) pairs on eq. 10 give back eq. 10's printed coefficients."""
    a = np.linspace(15.0, 70.0, 10)
    cal = fit_calibration(list(zip(a, eq10(a), strict=True)))
    for got, want in zip(cal.coeffs, PAPER_EQ10_COEFFS, strict=True):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-12)
    assert cal.rmse_rad < 1e-12
    assert cal.backlash_rad(40.0) == pytest.approx(float(eq10(np.array(40.0))), rel=1e-9)


def test_noisy_non_monotone_points_give_a_monotone_curve() -> None:
    a = np.linspace(0.0, 5.0, 11)
    d = 4e-4 * a + np.where(np.arange(11) % 2 == 0, 3e-4, -3e-4)  # zig-zag
    cal = fit_calibration(list(zip(a, d, strict=True)))
    grid = np.linspace(0.0, 5.0, 501)
    values = [cal.backlash_rad(x) for x in grid]
    assert np.all(np.diff(values) >= -1e-12)


def test_range_round_trip_and_errors() -> None:
    a = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    cal = fit_calibration(list(zip(a, 1e-4 * a**1.5, strict=True)), source="bench")
    assert cal.covers(2.0) and not cal.covers(10.0)
    assert BacklashCalibration.from_dict(cal.to_dict()) == cal
    assert cal.backlash_rad(-5.0) >= 0.0  # never a negative gap
    with pytest.raises(EstimationError, match="at least 4"):
        fit_calibration([(1.0, 1e-4), (2.0, 2e-4), (3.0, 3e-4)])
    with pytest.raises(EstimationError, match="all equal"):
        fit_calibration([(1.0, 1e-4)] * 4)
    with pytest.raises(EstimationError, match="finite"):
        fit_calibration([(1.0, 1e-4), (2.0, float("nan")), (3.0, 3e-4), (4.0, 4e-4)])
