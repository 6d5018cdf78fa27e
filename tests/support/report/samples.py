"""A sample report for the report tests: four joints (watch, ok, refused, alert) over two
machines, one with a hostile name, built from hand-made fits and weekly histories."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from agent.config.model import ThresholdSettings
from agent.estimation.backlash.result import BacklashResult
from agent.health.status import TrendPoint
from agent.report.model import Report, joint_report

T0 = datetime(2024, 3, 1, 6, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script>&amp;\x1b[2J\ud800'
LIMITS = ThresholdSettings(
    backlash_watch_rad=1e-3,
    backlash_alert_rad=2e-3,
    amplitude_watch_rad_s=0.1,
    amplitude_alert_rad_s=0.2,
)


def result(
    amplitude: float = 0.05, backlash: float | None = 8e-4, n: int = 1500, seed: int = 0
) -> BacklashResult:
    """A hand-built fit: a damped sine as the signature, plus seeded noise as the residual."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 3.0, n)
    fitted = amplitude * np.exp(-8 * (t % 0.5)) * np.sin(2 * np.pi * 35 * t)
    return BacklashResult(
        amplitude_rad_s=amplitude,
        backlash_rad=backlash,
        rmse_rad_s=0.004,
        residual_rms_rad_s=0.02,
        params={"A_rad_s": amplitude, "tau_per_s": 8.0, "omega_rad_s": 2 * np.pi * 35},
        evaluations=2400,
        restarts=2,
        converged=True,
        stop_reason="tolfun",
        fit_seconds=3.4,
        seed=seed,
        period_metadata_s=1.0,
        period_estimated_s=1.002,
        period_mismatch=float("nan"),
        warnings=("period from metadata",),
        time_s=t,
        residual_rad_s=fitted + rng.normal(0, 0.004, n),
        fitted_rad_s=fitted,
    )


def points(values: list[float]) -> list[TrendPoint]:
    return [TrendPoint((T0 + timedelta(days=7 * i)).isoformat(), v) for i, v in enumerate(values)]


def sample_report() -> Report:
    joints = (
        joint_report(
            "robot1",
            "J1",
            result(backlash=1.2e-3),
            LIMITS,
            points([0.8e-3, 0.9e-3, 1.05e-3, 1.2e-3]),
            capture_path="/var/c/j1.npz",
        ),
        joint_report(
            "robot1", "J2", result(amplitude=0.03, backlash=None), LIMITS, points([0.02, 0.03])
        ),
        joint_report(
            "robot1",
            "J3",
            None,
            LIMITS,
            error="interlock: joint not in pose",
            indicator="backlash_rad",
        ),
        joint_report("cnc<&>", HOSTILE, result(backlash=2.5e-3, seed=1), LIMITS, points([2.5e-3])),
    )
    return Report("2024-03-22T06:00:00Z", ("robot1", "cnc<&>"), joints, host="edge-01")
