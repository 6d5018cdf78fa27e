"""What a simulation of the backlash axis (agent.models.axis.pid) takes and returns: the
commanded motion, the gap phases it went through and the sampled trajectory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from agent.models.axis.params import AxisParams

Array = npt.NDArray[np.float64]


class GapOutcome(StrEnum):
    """How a gap phase ended: on the new flank (the backlash was crossed), back on the old one
    (the command reversed again first), or not by the end of the simulation."""

    NEW_FLANK = "new_flank"
    OLD_FLANK = "old_flank"
    OPEN = "open"


class AxisCommand(Protocol):
    """Commanded axis motion: position (m) and velocity (m/s) at the given instants (vectorised)."""

    def __call__(self, t: Array, /) -> tuple[Array, Array]: ...


@dataclass(frozen=True)
class BacklashInterval:
    """One gap phase: the axis held at position_m from start_s to end_s (None: still open)."""

    start_s: float
    end_s: float | None
    position_m: float
    direction: int  # sense of the motor rotation through the gap, +1 or -1 (0: none yet)
    outcome: GapOutcome

    @property
    def duration_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "duration_s": self.duration_s}


@dataclass(frozen=True, eq=False)
class AxisTrajectory:
    """Samples of one simulated axis: the uniform grid start + k*step plus every switch instant.

    At a switch the sample appears twice (before and after), so velocity jumps are visible.
    """

    params: AxisParams
    step_s: float
    trigger: str
    engagement: str
    intervals: tuple[BacklashInterval, ...]
    time_s: Array = field(repr=False)
    position_m: Array = field(repr=False)
    velocity_m_s: Array = field(repr=False)
    motor_speed_rad_s: Array = field(repr=False)
    gap_angle_rad: Array = field(repr=False)
    integral_m_s: Array = field(repr=False)
    engaged: npt.NDArray[np.bool_] = field(repr=False)
    command_position_m: Array = field(repr=False)

    def position_at(self, t: Array | float) -> Array:
        """x at arbitrary instants (linear between samples; exact on the grid)."""
        return np.asarray(np.interp(t, self.time_s, self.position_m))

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        err = self.command_position_m - self.position_m
        d: dict[str, Any] = {
            "params": self.params.to_dict(),
            "step_s": self.step_s,
            "trigger": self.trigger,
            "engagement": self.engagement,
            "start_s": float(self.time_s[0]),
            "end_s": float(self.time_s[-1]),
            "max_abs_following_error_m": float(np.max(np.abs(err))),
            "intervals": [i.to_dict() for i in self.intervals],
        }
        if samples:
            d["samples"] = {
                "time_s": self.time_s.tolist(),
                "position_m": self.position_m.tolist(),
                "velocity_m_s": self.velocity_m_s.tolist(),
                "motor_speed_rad_s": self.motor_speed_rad_s.tolist(),
                "engaged": self.engaged.tolist(),
                "command_position_m": self.command_position_m.tolist(),
            }
        return d
