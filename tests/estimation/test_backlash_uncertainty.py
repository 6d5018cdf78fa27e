"""Every backlash estimate comes with its interval: the amplitude's from the noise (Laplace at the
optimum, coloured noise included), ambiguous fits flagged, the backlash's with the calibration's
model-mismatch term, and motor-revolution disturbances removed before they bias the fit."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from agent.capture.model import Capture, CaptureMeta
from agent.estimation.backlash import fit as fit_module
from agent.estimation.backlash.calibration import (
    BacklashCalibration,
    ModelSensitivity,
    fit_calibration,
)
from agent.estimation.backlash.fit import BacklashFitSettings, fit_backlash, fit_backlash_residual
from agent.estimation.backlash.search import SearchOutcome
from agent.estimation.backlash.signature import SignatureParams, paper_signature
from agent.estimation.backlash.uncertainty import influence
from agent.kinds.backlash.calibration import mismatch_jobs, sensitivities, tolerance_ends
from agent.models.joint import ConstantSpeedTest, JointPhysics, simulate_constant_speed
from tests.estimation.test_backlash_estimator import FS_HZ, TF_S, peak_of

MOTOR_RAD_S = 2 * math.pi * 100.0


def signature_capture(
    sigma: float, seed: int, freq_hz: float = 48.0, tf_s: float = TF_S, t0: float = 0.05
) -> tuple[np.ndarray, np.ndarray, float]:
    """Eq. 7 plus a once-per-turn ripple and Gaussian noise; with the true peak amplitude."""
    t = np.arange(0.0, 12 * tf_s + 0.5 / FS_HZ, 1.0 / FS_HZ)
    p = SignatureParams(
        A=2.0, t0=t0, tau=40.0, omega=2 * math.pi * freq_hz, T1=0.003, T2=0.15,
        Td=tf_s / 2, Tf=tf_s, n=13,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    r = paper_signature(t, p) + 0.7 * np.sin(2 * math.pi * t / tf_s + 0.3)
    return t, r + rng.normal(0.0, sigma, t.size), peak_of(p)


def test_amplitude_interval_is_the_cramer_rao_bound_and_covers_the_truth() -> None:
    """White Gaussian noise: the interval's standard deviation is sigma |v| at the truth (the
    Cramer-Rao bound of the fitted model), and the truth lies inside."""
    sigma = 0.3
    t, r, truth = signature_capture(sigma, seed=5003)
    res = fit_backlash_residual(t, r, TF_S, BacklashFitSettings(seed=1))
    assert res.amplitude_interval_rad_s is not None and res.amplitude_sd_rad_s is not None
    lo, hi = res.amplitude_interval_rad_s
    assert lo <= truth <= hi
    assert hi - lo == pytest.approx(2 * 1.96 * res.amplitude_sd_rad_s, rel=1e-4)
    amp = res.uncertainty["amplitude"]
    # The random part of the residual is the noise: its RMS and whiteness are recovered.
    assert amp["noise_rms_rad_s"] == pytest.approx(sigma, rel=0.05)
    assert amp["sd_rad_s"] == pytest.approx(amp["sd_white_rad_s"], rel=0.15)
    # The same bound from the noise-free fit (the truth) and the known sigma.
    _, clean, _ = signature_capture(0.0, seed=0)
    crb = sigma * _influence_norm(t, clean)
    assert res.amplitude_sd_rad_s == pytest.approx(crb, rel=0.15)
    assert not res.ambiguous
    d = res.to_dict()
    assert d["amplitude_interval_rad_s"] == [lo, hi] and d["ambiguous"] is False
    assert d["backlash_interval_rad"] is None  # no calibration


def _influence_norm(t: np.ndarray, r: np.ndarray) -> float:
    """|v| of the fit of r, with the fit's own problem (captured from its search call)."""
    seen: dict[str, object] = {}
    real = fit_module.search

    def spy(problem, **kw):  # type: ignore[no-untyped-def]
        out = real(problem, **kw)
        seen["problem"], seen["x"] = problem, out.x
        return out

    fit_module.search = spy  # type: ignore[assignment]
    try:
        fit_backlash_residual(t, r, TF_S, BacklashFitSettings(seed=1, intervals=False))
    finally:
        fit_module.search = real  # type: ignore[assignment]
    problem, x = seen["problem"], seen["x"]
    _, a, b = problem.solve(x[None, :])  # type: ignore[attr-defined]
    v = influence(problem, x, float(a[0]), float(b[0]))  # type: ignore[arg-type]
    return float(np.linalg.norm(v))


def test_coloured_noise_at_the_resonance_widens_the_interval() -> None:
    """Noise concentrated around the ringing's frequency moves A more than white noise of the
    same variance: the interval says so instead of trusting the white-noise formula."""
    t, r, _ = signature_capture(0.0, seed=0)
    rng = np.random.default_rng(11)
    white = rng.normal(0.0, 1.0, t.size + 64)
    # A resonant AR(2) filter at 48 Hz: narrow-band noise where the signature lives.
    pole = 0.97 * np.exp(2j * math.pi * 48.0 / FS_HZ)
    a1, a2 = 2 * pole.real, -(abs(pole) ** 2)
    y = np.zeros_like(white)
    for k in range(2, white.size):
        y[k] = white[k] + a1 * y[k - 1] + a2 * y[k - 2]
    noise = 0.15 * y[64:] / np.std(y[64:])
    res = fit_backlash_residual(t, r + noise, TF_S, BacklashFitSettings(seed=1))
    amp = res.uncertainty["amplitude"]
    assert amp["sd_rad_s"] > 1.4 * amp["sd_white_rad_s"]


def test_an_ambiguous_fit_is_flagged_and_its_interval_spans_the_optima(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A restart that fits as well within the noise but with another amplitude: the result says
    ambiguous, warns, and both intervals span the two amplitudes instead of picking one."""
    t, r, _ = signature_capture(0.3, seed=5003)
    real = fit_module.search

    def with_a_rival(problem, **kw):  # type: ignore[no-untyped-def]
        out: SearchOutcome = real(problem, **kw)
        rival = out.x.copy()
        rival[1] += 0.05  # another decay rate: another amplitude, claimed to fit as well
        out.runs.append((rival, out.rmse * (1 + 1e-6)))
        return out

    monkeypatch.setattr(fit_module, "search", with_a_rival)
    cal = fit_calibration([(0.0, 0.0), (1.0, 4e-4), (2.0, 8e-4), (3.0, 1.2e-3)])
    res = fit_backlash_residual(t, r, TF_S, BacklashFitSettings(seed=1), calibration=cal)
    assert res.ambiguous and res.to_dict()["ambiguous"] is True
    assert any(w.startswith("ambiguous fit") for w in res.warnings)
    tied = res.uncertainty["amplitude"]["optima"]
    amps = [o["amplitude_rad_s"] for o in tied]
    assert max(amps) - min(amps) > 2 * 1.96 * (res.amplitude_sd_rad_s or 0.0)
    lo, hi = res.amplitude_interval_rad_s or (0.0, 0.0)
    assert lo < min(amps) and hi > max(amps)
    blo, bhi = res.backlash_interval_rad or (0.0, 0.0)
    assert blo < cal.backlash_rad(min(amps)) and bhi > cal.backlash_rad(max(amps))


# -- the backlash interval -------------------------------------------------------------------


def linear_calibration(sensitivity: tuple[ModelSensitivity, ...] = ()) -> BacklashCalibration:
    """delta = 4e-4 A (rad) from pairs, with an RMSE of a few micro-radians."""
    a = np.linspace(0.0, 5.0, 11)
    d = 4e-4 * a + np.where(np.arange(11) % 2 == 0, 3e-6, -3e-6)
    return replace(fit_calibration(list(zip(a, d, strict=True))), sensitivity=sensitivity)


def test_backlash_interval_from_the_noise_alone_without_a_model_term() -> None:
    cal = linear_calibration()
    band = cal.interval([3.0], 0.01)
    assert band.model_half_width_rad is None
    # Slope 4e-4 rad per rad/s, sd 0.01 rad/s and the calibration's RMSE: about +-8 urad.
    half = 1.96 * math.hypot(4e-4 * 0.01, cal.rmse_rad)
    assert 0.5 * (band.high_rad - band.low_rad) == pytest.approx(half, rel=0.05)
    assert band.low_rad < cal.backlash_rad(3.0) < band.high_rad
    assert cal.interval([0.0], 0.01).low_rad >= 0.0  # never a negative gap


def test_joints_at_the_ends_of_the_tolerances_are_covered() -> None:
    """A joint whose load inertia sits at either end of its tolerance reads 20 % low or 15 %
    high: the interval made from what it reads still holds its true backlash."""
    sens = tuple(
        ModelSensitivity("load_inertia_kg_m2", (0.7, 1.3), d, -0.2 * d, 0.15 * d)
        for d in (3e-4, 1.2e-3, 2.1e-3)
    ) + tuple(
        ModelSensitivity("stiffness_nm_rad", (0.8, 1.2), d, -0.04 * d, 0.03 * d)
        for d in (3e-4, 1.2e-3, 2.1e-3)
    )
    cal = linear_calibration(sens)
    for truth in (3e-4, 8e-4, 1.2e-3, 2.1e-3):
        for error in (-0.2, 0.15):
            read = truth * (1 + error)
            band = cal.interval([read / 4e-4], 1e-3)
            assert band.low_rad <= truth <= band.high_rad, (truth, error, band)
            assert band.model_half_width_rad is not None
    # The model term dominates the noise term here, and is stated on its own.
    band = cal.interval([3.0], 1e-3)
    assert band.model_half_width_rad is not None
    assert band.model_half_width_rad > 10 * band.noise_half_width_rad
    again = BacklashCalibration.from_dict(cal.to_dict())
    assert again == cal and again.interval([3.0], 1e-3) == band
    # A calibration cached before the model term existed still loads, without one.
    old = cal.to_dict()
    del old["sensitivity"]
    assert BacklashCalibration.from_dict(old).sensitivity == ()


def test_mismatch_sweep_jobs_and_sensitivities() -> None:
    from tests.kinds.test_backlash_recovery import joint_and_cycle

    joint, _ = joint_and_cycle()
    ends = dict(tolerance_ends(joint.calibration.model_tolerance))
    assert ends == {
        "stiffness_nm_rad": (0.8, 1.2),
        "load_inertia_kg_m2": (0.7, 1.3),
        "damping_nm_s_rad": (0.5, 2.0),
    }
    jobs = mismatch_jobs(joint)
    assert sorted({d for _, _, d in jobs}) == [3e-4, 1.1e-3, 2.1e-3]  # smallest, middle, largest
    assert len(jobs) == 3 * (1 + 2 * 3)
    damping = sorted({f for n, f, _ in jobs if n == "damping_nm_s_rad"})
    assert damping == [0.5, 2.0]
    cal = linear_calibration()
    # Each run reads its factor times the nominal amplitude (2.5 rad/s per mrad).
    amps = [2.5e3 * d * f for _, f, d in jobs]
    found = sensitivities(cal, jobs, amps)
    assert len(found) == 9
    s = next(s for s in found if s.parameter == "damping_nm_s_rad" and s.backlash_rad == 2.1e-3)
    nominal = cal.backlash_rad(2.5e3 * 2.1e-3)
    low, high = damping[0] * 2.5e3 * 2.1e-3, damping[1] * 2.5e3 * 2.1e-3
    assert s.error_low_rad == pytest.approx(cal.backlash_rad(low) - nominal)
    assert s.error_high_rad == pytest.approx(cal.backlash_rad(high) - nominal)
    off = replace(
        joint,
        calibration=replace(
            joint.calibration,
            model_tolerance=replace(
                joint.calibration.model_tolerance,
                stiffness_rel=0.0,
                load_inertia_rel=0.0,
                damping_factor=1.0,
            ),
        ),
    )
    assert mismatch_jobs(off) == []


# -- periodic disturbances at motor-revolution harmonics -------------------------------------


def test_simulator_produces_eccentricity_and_cogging_at_motor_harmonics() -> None:
    """The encoder's eccentricity (once per revolution) and the cogging torque (6 per
    revolution, 600 Hz) show on the measured motor speed: at 100 rev/s sampled at 500 Hz both
    land on 100 Hz, inside the resonance search band."""
    test = ConstantSpeedTest(MOTOR_RAD_S, duration_s=0.8, sample_rate_hz=FS_HZ, settle_s=0.2)
    base = JointPhysics(gear_ratio=40.0)
    disturbed = replace(base, encoder_eccentricity_rad=3e-4, cogging_torque_nm=0.1)
    speed = []
    for joint in (base, disturbed):
        run = simulate_constant_speed(joint, test, encoder_noise_counts=0.0, seed=1)
        counts = np.unwrap(run.motor_counts * 2 * math.pi / 2**19)
        speed.append(np.gradient(counts, 1.0 / FS_HZ))
    diff = speed[1] - speed[0]
    spec = np.abs(np.fft.rfft(diff * np.hanning(diff.size)))
    freqs = np.fft.rfftfreq(diff.size, 1.0 / FS_HZ)
    line = float(spec[np.argmin(abs(freqs - 100.0))])
    assert line > 30 * float(np.median(spec[(freqs > 20) & (abs(freqs - 100) > 5)]))
    # Each alone makes its own share of the line.
    for alone in (
        replace(base, encoder_eccentricity_rad=3e-4),
        replace(base, cogging_torque_nm=0.1),
    ):
        run = simulate_constant_speed(alone, test, encoder_noise_counts=0.0, seed=1)
        one = np.gradient(np.unwrap(run.motor_counts * 2 * math.pi / 2**19), 1.0 / FS_HZ)
        part = np.abs(np.fft.rfft((one - speed[0]) * np.hanning(diff.size)))
        assert 0.05 * line < float(part[np.argmin(abs(freqs - 100.0))]) < 2 * line


def disturbed_capture() -> tuple[Capture, float]:
    """A signature on a joint of odd gear ratio (41: the motor harmonics fall on the
    signature's odd load-turn harmonics), with an eccentric encoder and cogging on the speed."""
    tf = 41 / 100.0
    # t0 puts no oscillation's start exactly on a sample (205 samples per turn, half a turn
    # apart), where rounding alone would decide whether eq. 7 counts it.
    t, r, truth = signature_capture(0.02, seed=3, freq_hz=55.0, tf_s=tf, t0=0.0505)
    eccentricity = 3e-4 * MOTOR_RAD_S * np.cos(MOTOR_RAD_S * t + 0.3)
    cogging = 0.1 * np.cos(6 * MOTOR_RAD_S * t + 1.1)  # 600 Hz: sampled, it aliases to 100 Hz
    meta = CaptureMeta(commanded_speed_rad_s=MOTOR_RAD_S, gear_ratio=41.0)
    speed = MOTOR_RAD_S + r + eccentricity + cogging
    return Capture(time_s=t, channels={"motor_speed_rad_s": speed}, meta=meta), truth


@pytest.mark.parametrize("removed", [True, False])
def test_motor_harmonics_are_removed_before_they_bias_the_amplitude(removed: bool) -> None:
    capture, truth = disturbed_capture()
    settings = BacklashFitSettings(seed=1, motor_harmonics=12 if removed else 0)
    res = fit_backlash(capture, settings)
    lo, hi = res.amplitude_interval_rad_s or (0.0, 0.0)
    if removed:
        assert lo <= truth <= hi
        assert res.params["motor_harmonics_rms_rad_s"] > 0.1
    else:
        # The stationary lines pull the fit away from the ringing, and the interval, which
        # counts only the random part of the residual, does not hold the truth.
        assert not lo <= truth <= hi
        assert "motor_harmonics_rms_rad_s" not in res.params
