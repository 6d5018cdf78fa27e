"""One CNC axis drive with gear backlash (Farouki & Swett 2022, fig. 3 and eq. 9): its parameters,
checked, and the constants of the dead-zone model derived from them.

The models that use it are agent.models.axis.model (the P-controller closed form) and
agent.models.axis.pid (P, PI or PID, integrated).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class AxisParams:
    """One axis drive (Farouki & Swett 2022, fig. 3 and eq. 9); SI units, names carry them.

    b_s2, c_s: coefficients of eq. 8, b = N J / (k_p k_a k_t r), c = N B / (k_p k_a k_t r)
    (the proportional gain k_p sits inside both; `from_physical` builds them from the parts).
    gear_ratio: N, motor turns per screw turn. screw_lead_m_per_rad: r, axis travel per screw
    radian. motor_inertia_fraction: eta = J_m / J (0 < eta <= 1). motor_time_constant_s:
    tau = 1/beta = J_m / B_m, the coast-down time constant of the free motor. backlash_motor_rad:
    dtheta_m, the motor angle turned through the gap. integral_time_s: T_i = k_p / k_i (None: no
    integral action). derivative_time_s: T_d = k_d / k_p (0: no derivative action).
    """

    b_s2: float
    c_s: float
    gear_ratio: float
    screw_lead_m_per_rad: float
    motor_inertia_fraction: float
    motor_time_constant_s: float
    backlash_motor_rad: float
    integral_time_s: float | None = None
    derivative_time_s: float = 0.0

    def __post_init__(self) -> None:
        checks: list[tuple[str, float, bool, str]] = [
            ("b_s2", self.b_s2, self.b_s2 > 0, "> 0"),
            ("c_s", self.c_s, self.c_s >= 0, ">= 0"),
            ("gear_ratio", self.gear_ratio, self.gear_ratio > 0, "> 0"),
            (
                "screw_lead_m_per_rad",
                self.screw_lead_m_per_rad,
                self.screw_lead_m_per_rad > 0,
                "> 0",
            ),
            (
                "motor_inertia_fraction",
                self.motor_inertia_fraction,
                0 < self.motor_inertia_fraction <= 1,
                "in (0, 1]",
            ),
            (
                "motor_time_constant_s",
                self.motor_time_constant_s,
                self.motor_time_constant_s > 0,
                "> 0",
            ),
            ("backlash_motor_rad", self.backlash_motor_rad, self.backlash_motor_rad >= 0, ">= 0"),
            ("derivative_time_s", self.derivative_time_s, self.derivative_time_s >= 0, ">= 0"),
        ]
        if self.integral_time_s is not None:
            checks.append(
                (
                    "integral_time_s",
                    self.integral_time_s,
                    self.integral_time_s > 0,
                    "> 0 (or None for no integral action)",
                )
            )
        for name, value, ok, expected in checks:
            if not (isinstance(value, int | float) and math.isfinite(value) and ok):
                raise ValueError(
                    f"AxisParams.{name}: expected a finite number {expected}, got {value!r}"
                )

    @classmethod
    def from_physical(
        cls,
        *,
        gear_ratio: float,
        screw_lead_m_per_rad: float,
        inertia_kg_m2: float,
        damping_nm_s_rad: float,
        motor_inertia_kg_m2: float,
        motor_damping_nm_s_rad: float,
        proportional_gain_v_m: float,
        amplifier_gain_a_v: float,
        torque_constant_nm_a: float,
        backlash_motor_rad: float,
        integral_gain_v_m_s: float = 0.0,
        derivative_gain_v_s_m: float = 0.0,
    ) -> AxisParams:
        """Eq. 9 and section 3.4 from the block diagram's parts (J, B: motor-side totals, eq 12)."""
        if not (proportional_gain_v_m > 0 and inertia_kg_m2 > 0 and motor_inertia_kg_m2 > 0):
            raise ValueError(
                "AxisParams.from_physical: proportional_gain_v_m, inertia_kg_m2 and "
                "motor_inertia_kg_m2 must be > 0"
            )
        if not (motor_damping_nm_s_rad > 0):
            raise ValueError(
                "AxisParams.from_physical: motor_damping_nm_s_rad must be > 0 "
                "(the free motor must coast down, tau = J_m / B_m)"
            )
        loop = proportional_gain_v_m * amplifier_gain_a_v * torque_constant_nm_a
        scale = gear_ratio / (loop * screw_lead_m_per_rad)
        return cls(
            b_s2=scale * inertia_kg_m2,
            c_s=scale * damping_nm_s_rad,
            gear_ratio=gear_ratio,
            screw_lead_m_per_rad=screw_lead_m_per_rad,
            motor_inertia_fraction=motor_inertia_kg_m2 / inertia_kg_m2,
            motor_time_constant_s=motor_inertia_kg_m2 / motor_damping_nm_s_rad,
            backlash_motor_rad=backlash_motor_rad,
            integral_time_s=(
                proportional_gain_v_m / integral_gain_v_m_s if integral_gain_v_m_s > 0 else None
            ),
            derivative_time_s=derivative_gain_v_s_m / proportional_gain_v_m,
        )

    @property
    def controller(self) -> str:
        """'P', 'PI', 'PD' or 'PID' (section 3.1)."""
        return (
            "P"
            + ("I" if self.integral_time_s is not None else "")
            + ("D" if self.derivative_time_s > 0 else "")
        )

    @property
    def discriminant_s2(self) -> float:
        """Delta = c^2 - 4b of section 4 (< 0: underdamped)."""
        return self.c_s**2 - 4.0 * self.b_s2

    @property
    def gamma_1_s(self) -> float:
        """gamma = c / 2b, decay rate of eq. 19."""
        return self.c_s / (2.0 * self.b_s2)

    @property
    def lambda_1_s(self) -> float:
        """lambda = sqrt|Delta| / 2b, eq. 19 (a frequency when Delta < 0, a rate when > 0)."""
        return math.sqrt(abs(self.discriminant_s2)) / (2.0 * self.b_s2)

    @property
    def beta_1_s(self) -> float:
        """beta = B_m / J_m = 1 / tau (eq. 16)."""
        return 1.0 / self.motor_time_constant_s

    @property
    def motor_gain_rad_m_s2(self) -> float:
        """C = k_p k_a k_t / J_m = N / (eta r b) of eq. 16: motor acceleration per metre error."""
        return self.gear_ratio / (
            self.motor_inertia_fraction * self.screw_lead_m_per_rad * self.b_s2
        )

    @property
    def backlash_axis_m(self) -> float:
        """The gap seen at the axis: r dtheta_m / N."""
        return self.screw_lead_m_per_rad * self.backlash_motor_rad / self.gear_ratio

    @property
    def eq7_coefficients(self) -> dict[str, float]:
        """a, b, c, d, e of eq. 7 (a x''' + b x'' + c x' + x = d X'' + e X' + X).

        Derived from the loop b x'' + c x' = e + e_int / T_i + T_d e' with e = X - x: multiply the
        time derivative by T_i. Without integral action the equation is second order (eq. 8 plus
        the derivative term), reported with a = 0 and T_i -> infinity limits taken.
        """
        td = self.derivative_time_s
        if self.integral_time_s is None:
            return {"a": 0.0, "b": self.b_s2, "c": self.c_s + td, "d": 0.0, "e": td}
        ti = self.integral_time_s
        return {"a": ti * self.b_s2, "b": ti * (self.c_s + td), "c": ti, "d": ti * td, "e": ti}

    def to_dict(self) -> dict[str, Any]:
        derived = (
            "controller",
            "discriminant_s2",
            "gamma_1_s",
            "lambda_1_s",
            "beta_1_s",
            "motor_gain_rad_m_s2",
            "backlash_axis_m",
        )
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}
