"""Capture: one time base, named channels in SI units, and the metadata of the cycle.

File formats live in `agent.capture.files`; this module holds the data type and the
derivations every consumer agrees on (speed from position).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.errors import CaptureError

Array = npt.NDArray[np.float64]

# Channel name -> unit. Names carry their unit so a column is never misread.
CHANNEL_UNITS: dict[str, str] = {
    "motor_counts": "count",
    "motor_pos_rad": "rad",
    "motor_speed_rad_s": "rad/s",
    "motor_speed_rps": "rev/s",
    "link_pos_rad": "rad",
    "link_counts": "count",
    "current_a": "A",
    "motor_torque_nm": "N·m",
}

DEFAULT_ENCODER_BITS = 19


@dataclass(frozen=True)
class CaptureMeta:
    """What a capture is evidence of.

    Speeds are motor-side; gear_ratio = motor turns / load turn.
    """

    machine: str = ""
    joint: str = ""
    cycle: str = ""
    commanded_speed_rad_s: float | None = None
    gear_ratio: float | None = None
    encoder_bits: int | None = None
    sample_rate_hz: float | None = None
    started_at: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def load_turn_period_s(self) -> float | None:
        """T_f of Giovannitti et al. 2022: time for one load turn at the commanded motor speed."""
        if not self.commanded_speed_rad_s or not self.gear_ratio:
            return None
        return 2.0 * math.pi * self.gear_ratio / abs(self.commanded_speed_rad_s)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CaptureMeta:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown metadata keys: {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in d.items() if k != "extra"}, extra=dict(d.get("extra") or {}))


@dataclass(frozen=True)
class Capture:
    """A time base plus channels of the same length, every value finite."""

    time_s: Array
    channels: Mapping[str, Array]
    meta: CaptureMeta = field(default_factory=CaptureMeta)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        # Copies, not views: freezing the caller's own array (or sharing a buffer the caller
        # can still write through) would make the capture neither private nor immutable.
        try:
            t = np.array(self.time_s, dtype=np.float64)
        except (TypeError, ValueError):
            raise CaptureError(self.source, "time_s must be an array of numbers") from None
        object.__setattr__(self, "time_s", t)
        if t.ndim != 1 or t.size < 2:
            raise CaptureError(self.source, "time_s must be a 1-D array of at least two samples")
        if not np.all(np.isfinite(t)):
            bad = int(np.flatnonzero(~np.isfinite(t))[0])
            raise CaptureError(self.source, f"time_s sample {bad} is not finite")
        dt = np.diff(t)
        if np.any(dt <= 0):
            bad = int(np.flatnonzero(dt <= 0)[0]) + 1
            raise CaptureError(
                self.source, f"time_s is not strictly increasing at sample {bad} ({t[bad]!r} s)"
            )
        chans: dict[str, Array] = {}
        for name, values in self.channels.items():
            if name not in CHANNEL_UNITS:
                raise CaptureError(
                    self.source,
                    f"unknown channel {name!r}; expected one of {', '.join(CHANNEL_UNITS)}",
                )
            v = np.array(values)
            if v.dtype.kind not in "iuf":
                raise CaptureError(
                    self.source, f"channel {name} must hold numbers, not {v.dtype} values"
                )
            if v.shape != t.shape:
                raise CaptureError(
                    self.source, f"channel {name} has {v.size} samples, time_s has {t.size}"
                )
            if not np.all(np.isfinite(v)):
                bad = int(np.flatnonzero(~np.isfinite(v))[0])
                raise CaptureError(self.source, f"channel {name} sample {bad} is not finite")
            v.setflags(write=False)
            chans[name] = v
        t.setflags(write=False)
        object.__setattr__(self, "channels", chans)

    def __len__(self) -> int:
        return int(self.time_s.size)

    @property
    def duration_s(self) -> float:
        return float(self.time_s[-1] - self.time_s[0])

    @property
    def sample_rate_hz(self) -> float:
        """Mean rate over the capture (the metadata value, when given, is what was asked for)."""
        return (len(self) - 1) / self.duration_s

    def channel(self, name: str) -> Array:
        try:
            return self.channels[name]
        except KeyError:
            raise CaptureError(self.source, f"channel {name!r} is missing") from None


def speed_from_position(time_s: Array, pos_rad: Array) -> Array:
    """Speed in rad/s from a position trace: second-order central differences.

    Central differences (np.gradient: (x[k+1] - x[k-1]) / (t[k+1] - t[k-1]) inside, one-sided
    at both ends, exact for non-uniform time) have no phase lag, so a fitted oscillation keeps
    its timing; their gain at frequency f is sin(2 pi f dt) / (2 pi f dt) (0.91 at 60 Hz and
    500 Hz), which a calibration made at the same sample rate absorbs.
    """
    return np.gradient(np.asarray(pos_rad, dtype=np.float64), np.asarray(time_s, dtype=np.float64))


def motor_speed_rad_s(capture: Capture) -> Array:
    """Motor speed from whichever motor channel the capture has, best first."""
    ch = capture.channels
    if "motor_speed_rad_s" in ch:
        return np.asarray(ch["motor_speed_rad_s"], dtype=np.float64)
    if "motor_speed_rps" in ch:
        return np.asarray(ch["motor_speed_rps"], dtype=np.float64) * (2.0 * math.pi)
    if "motor_pos_rad" in ch:
        return speed_from_position(capture.time_s, ch["motor_pos_rad"])
    if "motor_counts" in ch:
        from agent.capture.encoder import unwrap_counts

        bits = capture.meta.encoder_bits
        if bits is None:
            raise CaptureError(capture.source, "motor_counts given without the encoder bit width")
        pos = unwrap_counts(ch["motor_counts"], bits)
        return speed_from_position(capture.time_s, pos)
    raise CaptureError(
        capture.source,
        "no motor channel: need one of motor_speed_rad_s, motor_speed_rps, motor_pos_rad, "
        "motor_counts",
    )
