"""Machine description for the feedrate filter: axis drives, tolerance, dialect, lookahead.

One YAML file per machine (`config/machines/*.yaml`), validated by agent.schema.validate into these
frozen dataclasses; every mistake is reported with file:line. SI units throughout (m, s, rad).

Each axis drive is the model of Farouki & Swett 2022, section 3
(agent.models.axis.params.AxisParams), given either as the identified coefficients of eq. 8/9
(b = N J / (k_p k_a k_t r), c = N B / (k_p k_a k_t r): the position-loop gain k_p sits inside both)
with the motor's share of the inertia eta and its coast-down time constant tau = 1/beta
(section 3.4), or as the physical parts of figure 3 (`physical:`, turned into the same
coefficients by AxisParams.from_physical). Gear ratio N, screw transmission r and the backlash
angle at the motor dtheta_m are always given.

Only axes named under `axes:` are modulated: a reversal of an unnamed axis is left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent.errors import ConfigError
from agent.feedrate.gcode.dialect import DIALECTS, Dialect
from agent.models.axis.params import AxisParams
from agent.schema import validate as schema

AxisName = Literal["X", "Y", "Z"]
DialectName = Literal["generic", "grbl", "linuxcnc", "marlin"]
Policy = Literal["shortest", "fixed"]

# Half the last written digit on each of three axes: the most a rounded point moves (mm).
_ROUNDING_AXES = math.sqrt(3.0)


@dataclass(frozen=True)
class PhysicalDrive:
    """The parts of figure 3 (motor-side totals J, B of eq. 12); see AxisParams.from_physical."""

    proportional_gain_v_m: float = field(metadata={"gt": 0.0, "doc": "k_p, V per m of error"})
    amplifier_gain_a_v: float = field(metadata={"gt": 0.0, "doc": "k_a"})
    torque_constant_nm_a: float = field(metadata={"gt": 0.0, "doc": "k_t"})
    inertia_kg_m2: float = field(metadata={"gt": 0.0, "doc": "J, all inertia seen by the motor"})
    damping_nm_s_rad: float = field(metadata={"ge": 0.0, "doc": "B, seen by the motor"})
    motor_inertia_kg_m2: float = field(metadata={"gt": 0.0, "doc": "J_m, the motor alone"})
    motor_damping_nm_s_rad: float = field(metadata={"gt": 0.0, "doc": "B_m, the motor alone"})
    integral_gain_v_m_s: float = field(default=0.0, metadata={"ge": 0.0})
    derivative_gain_v_s_m: float = field(default=0.0, metadata={"ge": 0.0})

    def check(self) -> list[tuple[str, str]]:
        if self.motor_inertia_kg_m2 > self.inertia_kg_m2:
            return [
                (
                    "motor_inertia_kg_m2",
                    f"expected at most inertia_kg_m2 "
                    f"({self.inertia_kg_m2:g}), found {self.motor_inertia_kg_m2:g}",
                )
            ]
        return []


@dataclass(frozen=True)
class AxisSettings:
    """One axis drive with backlash (Farouki & Swett 2022, sections 3-4)."""

    gear_ratio: float = field(metadata={"gt": 0.0, "doc": "N, motor turns per screw turn"})
    screw_lead_m_per_rad: float = field(
        metadata={"gt": 0.0, "doc": "r, axis travel per screw radian (lead per turn / 2 pi)"}
    )
    backlash_motor_rad: float = field(
        metadata={"ge": 0.0, "doc": "dtheta_m, motor angle turned through the gap"}
    )
    b_s2: float | None = field(default=None, metadata={"gt": 0.0, "doc": "eq. 9 b"})
    c_s: float | None = field(default=None, metadata={"ge": 0.0, "doc": "eq. 9 c"})
    motor_inertia_fraction: float | None = field(
        default=None, metadata={"gt": 0.0, "le": 1.0, "doc": "eta = J_m / J"}
    )
    motor_time_constant_s: float | None = field(
        default=None, metadata={"gt": 0.0, "doc": "tau = 1/beta = J_m / B_m"}
    )
    integral_time_s: float | None = field(
        default=None, metadata={"gt": 0.0, "doc": "T_i = k_p / k_i (PI/PID; null: P)"}
    )
    derivative_time_s: float = field(default=0.0, metadata={"ge": 0.0, "doc": "T_d = k_d/k_p"})
    physical: PhysicalDrive | None = None

    _IDENTIFIED = ("b_s2", "c_s", "motor_inertia_fraction", "motor_time_constant_s")

    def check(self) -> list[tuple[str, str]]:
        given = [n for n in self._IDENTIFIED if getattr(self, n) is not None]
        if self.physical is not None:
            extra = given + [n for n in ("integral_time_s",) if getattr(self, n) is not None]
            if self.derivative_time_s:
                extra.append("derivative_time_s")
            if extra:
                return [
                    (
                        extra[0],
                        "expected either `physical:` or the identified coefficients "
                        f"({', '.join(self._IDENTIFIED)}), not both",
                    )
                ]
            return []
        missing = [n for n in self._IDENTIFIED if getattr(self, n) is None]
        if missing:
            return [
                (
                    missing[0],
                    "required key is missing: expected a number (give all of "
                    f"{', '.join(self._IDENTIFIED)}, or a `physical:` section)",
                )
            ]
        return []

    def params(self) -> AxisParams:
        """The model of agent.models.axis.model for this drive."""
        if self.physical is not None:
            p = self.physical
            return AxisParams.from_physical(
                gear_ratio=self.gear_ratio,
                screw_lead_m_per_rad=self.screw_lead_m_per_rad,
                inertia_kg_m2=p.inertia_kg_m2,
                damping_nm_s_rad=p.damping_nm_s_rad,
                motor_inertia_kg_m2=p.motor_inertia_kg_m2,
                motor_damping_nm_s_rad=p.motor_damping_nm_s_rad,
                proportional_gain_v_m=p.proportional_gain_v_m,
                amplifier_gain_a_v=p.amplifier_gain_a_v,
                torque_constant_nm_a=p.torque_constant_nm_a,
                backlash_motor_rad=self.backlash_motor_rad,
                integral_gain_v_m_s=p.integral_gain_v_m_s,
                derivative_gain_v_s_m=p.derivative_gain_v_s_m,
            )
        if (
            self.b_s2 is None
            or self.c_s is None
            or self.motor_inertia_fraction is None
            or self.motor_time_constant_s is None
        ):  # check() reports this with its file:line; a drive built in code gets this message
            raise ConfigError(
                f"axis drive: give all of {', '.join(self._IDENTIFIED)}, or a `physical:` section"
            )
        return AxisParams(
            b_s2=self.b_s2,
            c_s=self.c_s,
            gear_ratio=self.gear_ratio,
            screw_lead_m_per_rad=self.screw_lead_m_per_rad,
            motor_inertia_fraction=self.motor_inertia_fraction,
            motor_time_constant_s=self.motor_time_constant_s,
            backlash_motor_rad=self.backlash_motor_rad,
            integral_time_s=self.integral_time_s,
            derivative_time_s=self.derivative_time_s,
        )


@dataclass(frozen=True)
class ModulationSettings:
    """The feedrate profile about each turning point (Farouki & Swett 2022, section 5, eq. 26)."""

    ratio: float = field(
        default=0.25,
        metadata={
            "gt": -3.0,
            "le": 1.0,
            "doc": "V(1/2)/V_c: the feed at the turning point (section 6)",
        },
    )
    degree: int = field(default=10, metadata={"ge": 4, "le": 30, "doc": "n of eq. 26, even"})
    retrograde: bool = field(
        default=False, metadata={"doc": "allow ratio < 0 (back-and-forth motion on the path)"}
    )
    policy: Policy = field(
        default="shortest",
        metadata={
            "doc": "shortest: least t* that lets the gear take up the backlash inside the window "
            "(simulated, cached); fixed: t* = half_window_s"
        },
    )
    half_window_s: float = field(
        default=0.5,
        metadata={"gt": 0.0, "le": 10.0, "doc": "t* (fixed), or the largest t* (shortest)"},
    )
    min_half_window_s: float = field(
        default=0.002,
        metadata={
            "gt": 0.0,
            "doc": "windows the geometry keeps shorter than this are not modulated",
        },
    )
    segments: int = field(
        default=16,
        metadata={"ge": 4, "le": 1000, "doc": "G1 segments per window (block ends add more)"},
    )

    def check(self) -> list[tuple[str, str]]:
        found = []
        if self.degree % 2:
            found.append(("degree", f"expected an even integer (eq. 26), found {self.degree}"))
        if self.ratio < 0 and not self.retrograde:
            found.append(
                (
                    "ratio",
                    f"ratio {self.ratio:g} < 0 means retrograde motion; set "
                    "retrograde: true to allow it",
                )
            )
        if self.min_half_window_s > self.half_window_s:
            found.append(
                (
                    "min_half_window_s",
                    "expected at most half_window_s "
                    f"({self.half_window_s:g}), found {self.min_half_window_s:g}",
                )
            )
        return found


@dataclass(frozen=True)
class LookaheadSettings:
    """How far the filter may read ahead of what it has written (whichever limit comes first)."""

    lines: int = field(default=1000, metadata={"ge": 2, "le": 1_000_000})
    seconds: float = field(
        default=5.0, metadata={"gt": 0.0, "doc": "of motion at the programmed feeds"}
    )


@dataclass(frozen=True)
class MachineSettings:
    """One CNC machine: its axes with backlash, the path tolerance, the target controller."""

    name: str = field(metadata={"min_len": 1})
    axes: dict[AxisName, AxisSettings] = field(metadata={"min_len": 1})
    eps_m: float = field(
        metadata={
            "gt": 0.0,
            "le": 0.01,
            "doc": "largest distance of the output path from the input path",
        }
    )
    dialect: DialectName = "generic"
    inverse_time: bool = field(
        default=False,
        metadata={
            "doc": "write modulation windows in G93 inverse-time mode (exact segment durations)"
        },
    )
    modulation: ModulationSettings = field(default_factory=ModulationSettings)
    lookahead: LookaheadSettings = field(default_factory=LookaheadSettings)
    source: str = field(default="<memory>", metadata={"internal": True})

    def check(self) -> list[tuple[str, str]]:
        found = []
        d = self.emitter_dialect
        if self.inverse_time and not d.inverse_time:
            found.append(("inverse_time", f"dialect {d.name} has no G93 inverse-time mode"))
        floor = 2.0 * rounding_mm(d, inch=False) * 1e-3
        if self.eps_m < floor:
            found.append(
                (
                    "eps_m",
                    f"expected at least {floor:.3g} (twice what rounding to "
                    f"{d.decimals} decimals of mm moves a point), found {self.eps_m:g}",
                )
            )
        return found

    @property
    def emitter_dialect(self) -> Dialect:
        return DIALECTS[self.dialect]

    @property
    def eps_mm(self) -> float:
        return self.eps_m * 1e3

    def axis_params(self) -> dict[str, AxisParams]:
        return {name: axis.params() for name, axis in self.axes.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "eps_m": self.eps_m,
            "dialect": self.dialect,
            "inverse_time": self.inverse_time,
            "axes": {k: v.params().to_dict() for k, v in self.axes.items()},
            "modulation": {
                f: getattr(self.modulation, f)
                for f in (
                    "ratio",
                    "degree",
                    "retrograde",
                    "policy",
                    "half_window_s",
                    "min_half_window_s",
                    "segments",
                )
            },
            "lookahead": {"lines": self.lookahead.lines, "seconds": self.lookahead.seconds},
        }


def rounding_mm(dialect: Dialect, *, inch: bool) -> float:
    """The most that writing a point with the dialect's decimals moves it, in mm."""
    unit = 25.4 if inch else 1.0
    decimals = dialect.decimals + 1 if inch else dialect.decimals
    return _ROUNDING_AXES * 0.5 * 10.0 ** (-decimals) * unit


def load_machine(path: str | Path) -> MachineSettings:
    """Read and validate a machine file; ConfigError lists every mistake with file:line."""
    from dataclasses import replace

    machine = schema.load(MachineSettings, path)
    return replace(machine, source=str(path))
