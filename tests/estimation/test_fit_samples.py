"""The fit's sample budget (agent.estimation.backlash.samples): a capture longer than the fit
may hold is cut to its first samples and says so; the cut fit recovers the signature as a
capture of that length does; `config check` refuses a cycle whose capture the fit could not
use whole. Here the budget is made small (the real one is measured by `python -m bench
fit_memory`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agent.capture.bounds import MAX_CAPTURE_SAMPLES
from agent.cli.main import main
from agent.errors import EX_CONFIG
from agent.estimation.backlash import samples
from agent.estimation.backlash.fit import BacklashFitSettings, fit_backlash_residual
from agent.estimation.backlash.samples import FIT_MAX_SAMPLES, plan_fit_samples
from agent.estimation.backlash.signature import SignatureParams, paper_signature

TF_S = 0.4  # 100 rev/s motor, gear ratio 40


def test_the_plan_of_the_largest_capture_a_file_may_hold() -> None:
    assert plan_fit_samples(2_401, 500.0) == samples.FitSamples(2_401, 500.0, 2_401, False)
    cut = plan_fit_samples(MAX_CAPTURE_SAMPLES, 10_000.0)
    assert (cut.fitted, cut.cut) == (FIT_MAX_SAMPLES, True)
    assert cut.fitted_duration_s == pytest.approx(26.2143)


def _long_capture(rate_hz: float, turns: float) -> tuple[np.ndarray, np.ndarray, float]:
    t = np.arange(0.0, turns * TF_S + 0.5 / rate_hz, 1.0 / rate_hz)
    p = SignatureParams(A=2.0, t0=0.05, tau=40.0, omega=2 * math.pi * 48.0, T1=0.003, T2=0.15,
                        Td=TF_S / 2, Tf=TF_S, n=int(turns) + 1)  # fmt: skip
    rng = np.random.default_rng(7)
    r = paper_signature(t, p) + 0.7 * np.sin(2 * math.pi * t / TF_S + 0.3) + 0.05
    r += 0.2 * rng.uniform(-0.5, 0.5, t.size)
    u = np.linspace(p.T1, p.T2, 20001)
    peak = float(np.max(np.abs(p.A * np.exp(-(u - p.T1) * p.tau) * np.sin(p.omega * u))))
    return t, r, peak


def test_a_cut_fit_recovers_the_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    t, r, peak = _long_capture(500.0, 24.0)  # 4,801 samples
    monkeypatch.setattr(samples, "FIT_MAX_SAMPLES", 2_401)
    res = fit_backlash_residual(t, r, TF_S, BacklashFitSettings(seed=3))
    assert res.time_s.size == 2_401 and res.time_s[-1] == pytest.approx(4.8)
    note = "only the first 4.8 s (12 load turns, 2,401 of 4,801 samples) are fitted"
    assert any(note in w for w in res.warnings), res.warnings
    # As tests/estimation/test_backlash_estimator.py judges a 12-turn capture.
    assert res.params["resonance_hz"] == pytest.approx(48.0, rel=2e-3)
    assert res.amplitude_rad_s == pytest.approx(peak, rel=0.02)


def test_a_capture_that_fits_whole_is_fitted_as_before() -> None:
    t, r, _ = _long_capture(500.0, 12.0)
    res = fit_backlash_residual(t, r, TF_S, BacklashFitSettings(seed=3))
    assert res.time_s.size == t.size and not any("fitted" in w for w in res.warnings)


def test_config_check_refuses_a_cycle_the_fit_could_not_use_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.yaml"

    def check(load_turns: int, rate_hz: int) -> tuple[int, str]:
        config.write_text(f"""\
controllers:
  - name: robot
    driver: sim
    joints:
      - name: j1
        index: 1
        gear_ratio: 40
        backlash_cycle:
          motor_speed_rps: 100
          load_turns: {load_turns}
          sample_rate_hz: {rate_hz}
        calibration: {{source: none}}
""")  # fmt: skip
        code = main(["config", "check", str(config)])
        return code, capsys.readouterr().err

    code, err = check(100, 5_000)  # 40 s at 5 kHz: 200,001 samples
    assert code == 0, err
    # The example: 100 turns at 49 kHz, 1,960,001 samples (40 s), fitted 5.35 s of it.
    code, err = check(100, 49_000)
    assert code == EX_CONFIG
    where = f"{config}:8: controllers[0].joints[0].backlash_cycle"
    assert f"{where}: expected a capture the fit can use whole, at most 262,144 samples" in err
    assert "found 1,960,001 (40 s): the rest would be motion for nothing" in err
