"""The fit's sample budget (agent.estimation.backlash.samples): a capture longer than the fit
may hold is decimated to about five times the resonance band's top, then cut, and says so; the
reduced fit recovers the signature as the full one does; `config check` refuses a cycle whose
capture the fit could not use whole. Here the budget is made small (the real one is measured
by `python -m bench fit_memory`)."""

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
from agent.estimation.backlash.samples import FIT_MAX_SAMPLES, plan_fit_samples, reduce_to_plan
from agent.estimation.backlash.signature import SignatureParams, paper_signature

TF_S = 0.4  # 100 rev/s motor, gear ratio 40


def test_the_plan_of_the_largest_captures_the_config_allows() -> None:
    assert plan_fit_samples(2_401, 500.0, 200.0) == samples.FitSamples(
        2_401, 500.0, 1, 2_401, False
    )
    fast = plan_fit_samples(MAX_CAPTURE_SAMPLES, 10_000.0, 200.0)
    assert (fast.decimation, fast.fitted, fast.cut) == (10, 200_000, False)
    assert fast.fitted_rate_hz == 1_000.0
    # At 500 Hz nothing can be decimated under a 200 Hz band: the first FIT_MAX_SAMPLES only.
    slow = plan_fit_samples(MAX_CAPTURE_SAMPLES, 500.0, 200.0)
    assert (slow.decimation, slow.fitted, slow.cut) == (1, FIT_MAX_SAMPLES, True)


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


def test_a_decimated_and_cut_fit_recovers_the_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    t, r, peak = _long_capture(5_000.0, 12.0)  # 24,001 samples
    monkeypatch.setattr(samples, "FIT_MAX_SAMPLES", 4_000)
    plan = plan_fit_samples(t.size, 5_000.0, 200.0)
    assert (plan.decimation, plan.fitted, plan.cut) == (5, 4_000, True)
    res = fit_backlash_residual(t, r, TF_S, BacklashFitSettings(seed=3))
    assert res.time_s.size == 4_000
    assert any("decimated by 5 to 1000 Hz" in w for w in res.warnings), res.warnings
    assert any("only the first 3.999 s (10 load turns" in w for w in res.warnings), res.warnings
    assert res.params["resonance_hz"] == pytest.approx(48.0, rel=2e-3)
    assert res.amplitude_rad_s == pytest.approx(peak, rel=0.02)
    assert res.amplitude_low_rad_s is not None and res.amplitude_high_rad_s is not None
    assert res.amplitude_low_rad_s <= peak <= res.amplitude_high_rad_s


def test_decimation_leaves_the_resonance_band_untouched() -> None:
    # A 200 Hz tone (the band's top) through the decimation to 1 kHz keeps its amplitude.
    t = np.arange(0.0, 2.0, 1.0 / 10_000.0)
    tone = np.sin(2 * math.pi * 200.0 * t)
    plan = samples.FitSamples(t.size, 10_000.0, 10, t.size // 10, False)
    t_fit, reduced = reduce_to_plan(t, tone, plan)
    assert t_fit.size == reduced.size == 2_000
    ideal = np.sin(2 * math.pi * 200.0 * t_fit)  # the tone sampled at 1 kHz, no filter
    inner = slice(100, -100)  # away from the filter's edges
    assert np.max(np.abs(reduced[inner] - ideal[inner])) < 1e-3


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

    # The example: 100 turns at 49 kHz (1.96 M samples) decimates to 40,000: accepted.
    code, err = check(100, 49_000)
    assert code == 0, err
    # 2,000 turns at 500 Hz (800 s, 400,001 samples) cannot be decimated under a 200 Hz band.
    code, err = check(2_000, 500)
    assert code == EX_CONFIG
    where = f"{config}:8: controllers[0].joints[0].backlash_cycle"
    assert f"{where}: expected a capture the fit can use whole" in err
    assert "the fit holds at most 262,144 samples, 524.286 s at 500 Hz" in err
    assert "the cycle moves for 800 s (400,001 samples at 500 Hz)" in err
