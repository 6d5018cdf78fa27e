"""Settings of the identification test cycle (`controllers[].identification:`), after Zollo,
Lopez et al. 2014 and Madsen et al. 2020.

The cycle runs an optimised finite Fourier excitation
(agent.estimation.identification.excitation) on every joint at once; the job
(agent.kinds.identification.analysis) identifies friction, stiffness and the dynamic model from
its capture and refuses one it cannot trust. Constraints in the field metadata are enforced by
agent.schema.validate; check() adds the ones that tie fields together.

When the daemon queues it (agent.kinds.identification.kind): on its own cadence, not on every
production stop, because it moves every joint at once for the whole trajectory (tens of seconds)
and friction or stiffness drift over weeks, not hours. `every_s` (default: weekly) queues one
every_s after the last was queued; when the daemon (re)starts, the clock starts from the last
successful identification in the history, so a restart does not repeat it, and one is queued at
once when the history has none. `window` (local time) limits when the cadence may queue it;
null `every_s` leaves it to `jha cycle now --identification`. `jha run --once` never queues it.
A queued identification, like every cycle, runs only in a production stop announced long enough
for settle_s + duration_s + triggers.cycle_margin_s, only once its trajectory is designed (in
the process pool, cached in <state_dir>/identification/), and only while every interlock holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.capture.bounds import capture_samples
from agent.config.identification_limits import IdentificationLimitSettings


@dataclass(frozen=True)
class ExcitationDesignSettings:
    """The trajectory the optimiser may use; limits are the robot file's times the fractions."""

    period_s: float = field(default=10.0, metadata={"gt": 0.0, "le": 120.0})
    harmonics: int = field(default=5, metadata={"ge": 2, "le": 20})
    periods: int = field(default=3, metadata={"ge": 1, "le": 60, "doc": "periods captured"})
    hold_s: float = field(
        default=0.5, metadata={"ge": 0.0, "le": 10.0, "doc": "at rest before and after motion"}
    )
    position_center_rad: tuple[float, ...] | None = field(
        default=None, metadata={"doc": "centre of each joint's motion (default mid-range)"}
    )
    position_halfrange_rad: float = field(
        default=1.5, metadata={"gt": 0.0, "le": math.pi, "doc": "cap on the excursion"}
    )
    speed_fraction: float = field(default=1.0, metadata={"gt": 0.0, "le": 1.0})
    accel_fraction: float = field(default=1.0, metadata={"gt": 0.0, "le": 1.0})
    maxiter: int = field(default=60, metadata={"ge": 1, "le": 1000, "doc": "SLSQP iterations"})
    seed: int = field(default=0, metadata={"ge": 0, "doc": "the optimiser's random start"})

    @property
    def bandwidth_hz(self) -> float:
        return self.harmonics / self.period_s


@dataclass(frozen=True)
class IdentificationCycleSettings:
    robot: str = field(
        metadata={"min_len": 1, "doc": "robot description file (config/robots/*.yaml)"}
    )
    sample_rate_hz: float = field(default=1000.0, metadata={"gt": 0.0, "le": 100_000.0})
    settle_s: float = field(
        default=0.5, metadata={"ge": 0.0, "le": 60.0, "doc": "standstill before capture"}
    )
    trajectory: ExcitationDesignSettings = field(default_factory=ExcitationDesignSettings)
    method: Literal["ols", "wls"] = "wls"
    model: Literal["elastic", "rigid"] = field(
        default="elastic",
        metadata={
            "doc": "elastic: Zollo, Lopez et al. 2014 (needs both encoders); "
            "rigid: Madsen et al. 2020 IDIM"
        },
    )
    # Refusals: a capture beyond these is not analysed (the reason is recorded instead).
    max_condition_number: float = field(
        default=500.0,
        metadata={"gt": 1.0, "doc": "refuse a trajectory whose base regressor is worse"},
    )
    saturation_fraction: float = field(
        default=0.999,
        metadata={"gt": 0.0, "le": 1.0, "doc": "of the torque limit that counts as saturated"},
    )
    min_friction_speed_rad_s: float = field(
        default=0.05, metadata={"ge": 0.0, "doc": "rows slower than this leave the fit"}
    )
    # On by default: without it a strain-wave gear's friction that grows with the torque it
    # carries is read into the Coulomb friction, and a wear that scales only the unloaded
    # friction reads low on the joints that carry the arm's weight (+37 % for +60 % on a
    # simulated UR5e's shoulder); fitted only where the capture pins it (fit.MU_STD_MAX).
    load_friction: bool = field(
        default=True,
        metadata={
            "doc": "fit a friction share growing with the transmitted torque, per joint where "
            "the capture can show it"
        },
    )
    # Signal chain of Madsen et al. 2020 (None: derived, see
    # agent.estimation.identification.filters).
    bandwidth_hz: float | None = field(default=None, metadata={"gt": 0.0})
    cutoff_hz: float | None = field(default=None, metadata={"gt": 0.0})
    decimation: int = field(default=20, metadata={"ge": 1, "le": 1000})
    # The daemon's cadence (see the module docstring).
    every_s: float | None = field(
        default=7 * 86400.0,
        metadata={"gt": 0.0, "doc": "queue one this long after the last (null: on demand only)"},
    )
    window: str | None = field(
        default=None, metadata={"doc": "HH:MM-HH:MM (local time) in which the cadence queues"}
    )
    # The verdicts on the indicators (agent.health.identification).
    limits: IdentificationLimitSettings = field(default_factory=IdentificationLimitSettings)

    @property
    def duration_s(self) -> float:
        """The captured part of the cycle: rest, the periods of motion, rest."""
        t = self.trajectory
        return t.periods * t.period_s + 2.0 * t.hold_s

    @property
    def samples_per_channel(self) -> int:
        """Samples each channel of the cycle's capture holds (bounded: agent.capture.bounds)."""
        return capture_samples(self.duration_s, self.sample_rate_hz)

    def check(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        t = self.trajectory
        per_period = t.period_s * self.sample_rate_hz
        if per_period < 100:
            found.append(
                (
                    "sample_rate_hz",
                    f"expected at least 100 samples per trajectory period ({t.period_s:g} s), "
                    f"found {per_period:g}",
                )
            )
        nyquist = self.sample_rate_hz / (2.0 * self.decimation)
        if t.bandwidth_hz >= nyquist:
            found.append(
                (
                    "trajectory.harmonics",
                    f"the highest harmonic ({t.bandwidth_hz:g} Hz) must stay below the Nyquist "
                    f"frequency after decimation ({nyquist:g} Hz)",
                )
            )
        if self.cutoff_hz is not None and self.cutoff_hz >= self.sample_rate_hz / 2.0:
            found.append(("cutoff_hz", f"expected below {self.sample_rate_hz / 2.0:g} Hz"))
        if not Path(self.robot).is_file():
            found.append(("robot", f"no robot description file {self.robot!r}"))
        if self.window is not None:
            from agent.config.schedule import parse_window  # here: triggers imports the drivers

            try:
                parse_window(self.window)
            except ValueError as exc:
                found.append(("window", str(exc)))
            if self.every_s is None:
                found.append(("window", "expected every_s with a window (the cadence it limits)"))
        found += self.limits.check_joints(self.robot)
        return found
