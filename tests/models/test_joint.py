"""The two-inertia joint with backlash (Giovannitti et al. 2022, eqs. 8-9) under servo control."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from agent.capture.encoder import unwrap_counts
from agent.capture.model import speed_from_position
from agent.models.joint import ConstantSpeedTest, JointPhysics, simulate_constant_speed

TEST = ConstantSpeedTest(motor_speed_rad_s=2 * math.pi * 100, duration_s=2.4, sample_rate_hz=2000.0)


def run(delta: float, seed: int = 0):  # type: ignore[no-untyped-def]
    return simulate_constant_speed(
        JointPhysics(gear_ratio=40.0, backlash_rad=delta), TEST, seed=seed
    )


def high_passed_speed(r) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Motor-speed residual without the once-per-turn gravity ripple (first 3 harmonics)."""
    v = speed_from_position(r.time_s, unwrap_counts(r.motor_counts, r.encoder_bits))
    res = v - TEST.motor_speed_rad_s
    w = TEST.motor_speed_rad_s / 40.0
    basis = np.column_stack(
        [np.ones_like(r.time_s)]
        + [f(k * w * r.time_s) for k in (1, 2, 3) for f in (np.cos, np.sin)]
    )
    return res - basis @ np.linalg.lstsq(basis, res, rcond=None)[0]


def test_no_backlash_no_ringing_and_tracking_holds() -> None:
    r = run(0.0)
    hp = high_passed_speed(r)
    assert np.abs(hp).max() < 0.1  # quantisation and servo noise only
    # The load follows the motor through the gear within the static twist under gravity.
    twist = r.motor_angle_rad / 40.0 - r.load_angle_rad
    assert np.abs(twist).max() < 1.1 * 5.0 * 0.1 * 9.81 / 6000.0


def test_signature_grows_monotonically_with_backlash() -> None:
    peaks = [np.abs(high_passed_speed(run(d))).max() for d in (0.0, 3e-4, 6e-4, 1.2e-3, 2.1e-3)]
    assert all(b > a for a, b in itertools.pairwise(peaks)), peaks
    assert peaks[-1] > 20 * peaks[0]


def test_two_impacts_per_load_turn_with_alternating_sign() -> None:
    """The largest excursions come in pairs half a load turn apart, of opposite sign."""
    r = run(1.2e-3)
    hp = high_passed_speed(r)
    fs, tf = TEST.sample_rate_hz, 2 * math.pi * 40.0 / TEST.motor_speed_rad_s
    per_turn = round(tf * fs)
    for k in range(int(len(hp) // per_turn)):
        turn = hp[k * per_turn : (k + 1) * per_turn]
        i_max, i_min = int(np.argmax(turn)), int(np.argmin(turn))
        # One gap closure pushes the motor speed one way, the other the opposite way; the
        # positive and negative extremes lie near the two closures, half a turn apart
        # (or within one ringing period of the same closure).
        assert turn[i_max] > 0 > turn[i_min]
    # Over the whole capture r(t + Tf/2) mirrors r(t).
    half = per_turn // 2
    corr = np.corrcoef(hp[:-half], hp[half:])[0, 1]
    assert corr < -0.8


def test_load_and_motor_gap_stays_within_backlash_plus_elastic_twist() -> None:
    delta = 1.2e-3
    r = run(delta)
    twist = r.motor_angle_rad / 40.0 - r.load_angle_rad
    assert np.abs(twist).max() < delta + 5.0 * 0.1 * 9.81 / 6000.0 * 1.5
    assert np.abs(twist).max() > delta  # the gap is crossed: contact on both flanks


def test_deterministic_for_a_seed_and_counts_are_19_bit() -> None:
    a, b, c = run(6e-4, seed=3), run(6e-4, seed=3), run(6e-4, seed=4)
    assert np.array_equal(a.motor_counts, b.motor_counts)
    assert not np.array_equal(a.motor_counts, c.motor_counts)
    assert a.motor_counts.min() >= 0 and a.motor_counts.max() < 2**19


@pytest.mark.parametrize("field", ["gear_ratio", "stiffness_nm_rad", "motor_inertia_kg_m2"])
def test_bad_physics_is_refused(field: str) -> None:
    kwargs = {"gear_ratio": 40.0, field: -1.0}
    with pytest.raises(ValueError, match=field):
        JointPhysics(**kwargs)
