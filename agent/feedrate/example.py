"""The worked example of Farouki & Swett 2022, section 4.2, and the paper's numbers.

farouki2022_example(): the axis of section 4.2 under X = a sin(Omega t), solved in closed form
(eq. 19, eqs. 21-22 with Newton iterations): gamma, lambda, C, p, q, phi, the steady backlash
interval and the lag of each reversal behind the commanded one.

The PAPER_* constants are the paper's axis (section 4.2) and the setup of its figure 11
(section 6); the sweep of figure 11 is agent.feedrate.figure11's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agent.models.axis.model import HarmonicReversal, simulate_harmonic_p
from agent.models.axis.params import AxisParams

# Section 4.2. Delta theta_m = 0.125664 rad is printed (it is 4 pi / 100 to the printed digits).
PAPER_AXIS = AxisParams(
    b_s2=0.0005,
    c_s=0.005,
    gear_ratio=25.0,
    screw_lead_m_per_rad=1.0,
    motor_inertia_fraction=0.35,
    motor_time_constant_s=1.0,
    backlash_motor_rad=0.125664,
)
PAPER_AMPLITUDE_M = 0.25
PAPER_REVERSAL_INTERVAL_S = 6.0  # T, time between reversals; Omega = pi / T
# Section 6.
PAPER_DEGREE = 10
PAPER_HALF_WINDOW_S = 0.5
PAPER_LEAD_ANGLE_RAD = 0.5 * math.pi
PAPER_STEP_S = 1e-3


PAPER_RATIO_RANGE = (-1.0, 1.5)


@dataclass(frozen=True)
class Farouki2022Example:
    """Section 4.2 reproduced; the printed values are in `printed` for comparison."""

    params: AxisParams
    amplitude_m: float
    omega_rad_s: float
    gamma_1_s: float
    lambda_1_s: float
    discriminant_s2: float
    motor_gain_rad_m_s2: float
    p: float
    q: float
    phi_rad: float
    steady_backlash_s: float
    reversal_lag_s: float
    steady_lag_s: float  # the engaged steady state's lag, atan2(q, -p) / Omega
    period_s: float  # between like reversals (the paper: 2T = 12 s)
    reversals: tuple[HarmonicReversal, ...]
    printed: dict[str, float] = field(
        default_factory=lambda: {
            "gamma_1_s": 5.0,
            "lambda_1_s": 44.440972,
            "motor_gain_rad_m_s2": 1.428571e5,
            "p": -1.000130,
            "q": 0.002619,
            "phi_rad": 1.088448,
            "discriminant_s2": -0.001975,
            "omega_rad_s": 0.523599,
            "steady_backlash_s": 0.118743,
            "reversal_lag_s": 0.005001,
            "period_s": 12.0,
        }
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "example": "farouki2022",
            "params": self.params.to_dict(),
            "amplitude_m": self.amplitude_m,
            "omega_rad_s": self.omega_rad_s,
            "gamma_1_s": self.gamma_1_s,
            "lambda_1_s": self.lambda_1_s,
            "discriminant_s2": self.discriminant_s2,
            "motor_gain_rad_m_s2": self.motor_gain_rad_m_s2,
            "p": self.p,
            "q": self.q,
            "phi_rad": self.phi_rad,
            "steady_backlash_s": self.steady_backlash_s,
            "reversal_lag_s": self.reversal_lag_s,
            "steady_lag_s": self.steady_lag_s,
            "period_s": self.period_s,
            "reversals": [r.to_dict() for r in self.reversals],
            "printed": dict(self.printed),
        }


def farouki2022_example(reversals: int = 5) -> Farouki2022Example:
    """Section 4.2: x = 0, x' = a Omega at t = 0, run through `reversals` axis reversals.

    The steady values are those of the last reversal (the start-up transient decays as
    e^{-gamma t}, e^{-15} by the first reversal, so all of them agree to the printed digits).
    """
    if reversals < 2:
        raise ValueError(f"farouki2022_example: need >= 2 reversals, got {reversals}")
    omega = math.pi / PAPER_REVERSAL_INTERVAL_S
    end = (reversals + 0.2) * PAPER_REVERSAL_INTERVAL_S
    run = simulate_harmonic_p(PAPER_AXIS, PAPER_AMPLITUDE_M, omega, end)
    hc = run.constants
    last = run.reversals[-1]
    return Farouki2022Example(
        params=PAPER_AXIS,
        amplitude_m=PAPER_AMPLITUDE_M,
        omega_rad_s=omega,
        gamma_1_s=hc.gamma_1_s,
        lambda_1_s=hc.lambda_1_s,
        discriminant_s2=hc.discriminant_s2,
        motor_gain_rad_m_s2=hc.motor_gain_rad_m_s2,
        p=hc.p,
        q=hc.q,
        phi_rad=hc.phi_rad,
        steady_backlash_s=last.backlash_s,
        reversal_lag_s=last.lag_s,
        steady_lag_s=hc.steady_lag_s,
        period_s=run.reversals[-1].time_s - run.reversals[-3].time_s
        if len(run.reversals) >= 3
        else 2.0 * PAPER_REVERSAL_INTERVAL_S,
        reversals=run.reversals,
    )
