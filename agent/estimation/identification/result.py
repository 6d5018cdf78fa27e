"""What an identification returns: per-joint wear indicators and the result with its evidence.

Frozen dataclasses with to_dict(); the algorithm that fills them is
agent.estimation.identification.fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from agent.estimation.identification.filters import ResolvedFilter
from agent.estimation.identification.least_squares import Method
from agent.estimation.identification.model import Array, DynamicModel, Model
from agent.estimation.identification.model_check import ModelCheck, largest_shifts

if TYPE_CHECKING:  # the feasible fit needs scipy, which the daemon never loads
    from agent.estimation.identification.feasible import FeasibleEstimate
    from agent.estimation.identification.uncertainty import RobustCovariance

# two-sided 95 % quantile of the normal distribution
Z_95 = 1.959963984540054


class IndicatorRow(NamedTuple):
    joint: str
    indicator: str
    value: float
    unit: str
    rel_std_pct: float | None


@dataclass(frozen=True)
class JointHealth:
    """Wear indicators of one joint, with the relative standard deviation of each estimate
    (the robust one: HAC and the torque-constant tolerance, IdentificationResult.robust)."""

    joint: str
    coulomb_nm: float
    viscous_nm_s_rad: float
    stiffness_nm_rad: float | None
    rotor_inertia_kg_m2: float
    torque_nmse_nm: float
    rel_std_pct: dict[str, float]
    torque_offset_nm: float | None = None  # fitted only with IdentificationSettings.torque_offset

    def rows(self) -> tuple[IndicatorRow, ...]:
        items = [
            ("coulomb_friction_nm", self.coulomb_nm, "N·m", "fc"),
            ("viscous_friction_nm_s_rad", self.viscous_nm_s_rad, "N·m·s/rad", "fv"),
            ("stiffness_nm_rad", self.stiffness_nm_rad, "N·m/rad", "k"),
            ("rotor_inertia_kg_m2", self.rotor_inertia_kg_m2, "kg·m²", "Ia"),
            ("torque_nmse_nm", self.torque_nmse_nm, "N·m", ""),
            ("torque_offset_nm", self.torque_offset_nm, "N·m", "off"),
        ]
        return tuple(
            IndicatorRow(self.joint, name, float(v), unit, self.rel_std_pct.get(key))
            for name, v, unit, key in items
            if v is not None
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "rel_std_pct": dict(self.rel_std_pct)}


@dataclass(frozen=True)
class IdentificationResult:
    robot: str
    model: Model
    method: Method
    names: tuple[str, ...]  # estimated parameters: link base parameters, then drive ones
    estimate: Array
    rel_std_pct: Array
    combinations: tuple[str, ...]  # what each link base parameter stands for
    group_names: tuple[str, ...]
    group_sigma: Array  # residual std of each equation group (N·m)
    condition_number: float
    n_samples: int  # of every segment together
    n_rows: int
    filter: ResolvedFilter
    joints: tuple[JointHealth, ...]
    nmse_nm: float
    dynamic_model: DynamicModel = field(repr=False)
    seconds: float = 0.0
    warnings: tuple[str, ...] = ()
    # Evidence for the report's measured-vs-predicted plots: the decimated rows of the fit
    # (time from the start of the capture; NaN where a joint stood still and was left out).
    time_s: Array = field(default_factory=lambda: np.zeros(0), repr=False)
    measured_torque_nm: Array = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    predicted_torque_nm: Array = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    feasible: FeasibleEstimate | None = None  # with IdentificationSettings.feasible
    # Samples per run when several runs were stacked as separate segments (one run: one entry).
    segment_samples: tuple[int, ...] = ()
    # HAC + torque-constant covariance (agent.estimation.identification.uncertainty);
    # rel_std_pct above is the textbook one, as Madsen et al. 2020's Table 4 gives it.
    robust: RobustCovariance | None = None
    # The extended model's shift of each parameter, added to its interval (GUM F.2.4.5).
    model_check: ModelCheck | None = None

    def __post_init__(self) -> None:
        for a in (
            self.estimate,
            self.rel_std_pct,
            self.group_sigma,
            self.time_s,
            self.measured_torque_nm,
            self.predicted_torque_nm,
        ):
            a.setflags(write=False)

    def value(self, name: str) -> float:
        return float(self.estimate[self.names.index(name)])

    @property
    def std_robust(self) -> Array:
        """Robust standard deviation of every estimate (the textbook one without `robust`)."""
        if self.robust is None:
            return self.rel_std_pct * np.abs(self.estimate) / 100.0
        return self.robust.std

    def interval_95(self) -> Array:
        """(n, 2) lower and upper bound of each estimate's 95 % interval: the robust one (its
        normal HAC part and uniform torque-constant part combined as JCGM 101 does), else
        1.96 textbook standard deviations; widened by the model check's shift when it ran."""
        half = self.noise_half_width_95()
        if self.model_check is not None:
            half = half + self.model_check.term
        return np.stack([self.estimate - half, self.estimate + half], axis=1)

    def noise_half_width_95(self) -> Array:
        """The 95 % half-width of noise and torque constant alone, without the model term."""
        return Z_95 * self.std_robust if self.robust is None else self.robust.half_width_95

    def with_model_check(self, check: ModelCheck) -> IdentificationResult:
        """This result with the model term in its intervals, and a warning where it dominates."""
        notes: tuple[str, ...] = ()
        if check.skipped is not None:
            notes = (f"model check skipped ({check.skipped}): intervals hold noise only",)
        else:
            shifts = largest_shifts(check, self.names, self.estimate, self.noise_half_width_95())
            if shifts:
                notes = (
                    f"the fit with {check.alternative} moves estimates beyond their noise "
                    f"(intervals widened by it): {shifts}",
                )
        return replace(self, model_check=check, warnings=(*self.warnings, *notes))

    def indicator_rows(self) -> tuple[IndicatorRow, ...]:
        return tuple(r for j in self.joints for r in j.rows())

    def to_dict(self, evidence: bool = False) -> dict[str, Any]:
        d = self._summary()
        if evidence:
            d["evidence"] = {
                "time_s": self.time_s.tolist(),
                "measured_torque_nm": _nan_to_none(self.measured_torque_nm),
                "predicted_torque_nm": _nan_to_none(self.predicted_torque_nm),
            }
        return d

    def _summary(self) -> dict[str, Any]:
        return {
            "robot": self.robot,
            "model": self.model,
            "method": self.method,
            "parameters": [
                {
                    "name": n,
                    "value": float(v),
                    "rel_std_pct": _finite(s),
                    "std_robust": _finite(r),
                    "interval_95": [_finite(lo), _finite(hi)],
                }
                for n, v, s, r, (lo, hi) in zip(
                    self.names,
                    self.estimate,
                    self.rel_std_pct,
                    self.std_robust,
                    self.interval_95().tolist(),
                    strict=True,
                )
            ],
            "uncertainty": None
            if self.robust is None
            else {
                "method": "Newey-West HAC per equation group + torque-constant type B"
                " (95 % interval by JCGM 101 Monte Carlo)",
                "lags": list(self.robust.lags),
                "torque_constant_tolerance": self.robust.torque_constant_tolerance,
                # widened by |model_check.bias| (GUM F.2.4.5) when the check ran
                "model_check": None
                if self.model_check is None
                else self.model_check.to_dict(self.names),
            },
            "combinations": list(self.combinations),
            "group_sigma": dict(zip(self.group_names, map(_finite, self.group_sigma), strict=True)),
            "condition_number": self.condition_number,
            "n_samples": self.n_samples,
            "segment_samples": list(self.segment_samples or (self.n_samples,)),
            "n_rows": self.n_rows,
            "filter": self.filter.to_dict(),
            "joints": [j.to_dict() for j in self.joints],
            "nmse_nm": self.nmse_nm,
            "seconds": self.seconds,
            "warnings": list(self.warnings),
            "feasible": None if self.feasible is None else self.feasible.to_dict(),
        }


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _nan_to_none(a: Array) -> list[list[float | None]]:
    return [[_finite(v) for v in row] for row in a.tolist()]
