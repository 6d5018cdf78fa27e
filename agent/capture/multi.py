"""MultiCapture: several joints sampled together on one time base (the excitation cycle).

agent.capture.model.Capture holds one joint (one array per channel name). An identification needs
every joint's link position, motor position and motor torque on the same clock, so this type
keeps one (N, n) array per channel, column j for joints[j]. `joint_captures()` splits it into
the per-joint Captures the estimators read; the .npz format (atomic write) keeps it whole.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agent.atomic import atomic_writer
from agent.capture.bounds import bounded_json, check_npz_archive
from agent.capture.model import CHANNEL_UNITS, Array, Capture, CaptureMeta
from agent.errors import CaptureError, unreadable

FORMAT = "jha-multi-capture"
FORMAT_VERSION = 1
_CHANNEL_PREFIX = "channel__"
StrPath = str | os.PathLike[str]


@dataclass(frozen=True)
class MultiCapture:
    """A time base (N,), joint names (n,), channels (N, n) in SI units, every value finite.

    gear_ratios (motor turns per link turn), when given, say how to read the motor channels
    (motor_pos_rad and motor_torque_nm are motor-shaft quantities, as in a Capture).
    """

    time_s: Array
    joints: tuple[str, ...]
    channels: Mapping[str, Array]
    meta: CaptureMeta = field(default_factory=CaptureMeta)
    gear_ratios: tuple[float, ...] | None = None
    source: str = "<memory>"

    def __post_init__(self) -> None:
        where = self.source
        try:
            t = np.array(self.time_s, dtype=np.float64)
        except (TypeError, ValueError):
            raise CaptureError(where, "time_s must be an array of numbers") from None
        if t.ndim != 1 or t.size < 2:
            raise CaptureError(where, "time_s must be a 1-D array of at least two samples")
        if not np.all(np.isfinite(t)):
            bad = int(np.argmin(np.isfinite(t)))
            raise CaptureError(where, f"time_s sample {bad} is not finite")
        steps = np.diff(t)
        if np.any(steps <= 0):
            bad = int(np.flatnonzero(steps <= 0)[0]) + 1
            raise CaptureError(where, f"time_s is not strictly increasing at sample {bad}")
        joints = tuple(str(j) for j in self.joints)
        if not joints or len(set(joints)) != len(joints) or not all(joints):
            raise CaptureError(where, f"joints must be distinct non-empty names, got {joints!r}")
        n = len(joints)
        if self.gear_ratios is not None:
            ratios = tuple(float(r) for r in self.gear_ratios)
            if len(ratios) != n or not all(math.isfinite(r) and r > 0 for r in ratios):
                raise CaptureError(where, f"gear_ratios must be {n} numbers > 0, got {ratios!r}")
            object.__setattr__(self, "gear_ratios", ratios)
        chans: dict[str, Array] = {}
        for name, values in self.channels.items():
            if name not in CHANNEL_UNITS:
                raise CaptureError(
                    where, f"unknown channel {name!r}; expected one of {', '.join(CHANNEL_UNITS)}"
                )
            v = np.array(values)
            if v.dtype.kind not in "iuf":
                raise CaptureError(where, f"channel {name} must hold numbers, not {v.dtype}")
            if v.shape != (t.size, n):
                raise CaptureError(
                    where,
                    f"channel {name} has shape {v.shape}, expected ({t.size}, {n}): "
                    "one column per joint, one row per sample",
                )
            finite = np.isfinite(v)
            if not finite.all():
                row, col = (int(x[0]) for x in np.nonzero(~finite))
                raise CaptureError(
                    where, f"channel {name} of joint {joints[col]} sample {row} is not finite"
                )
            v.setflags(write=False)
            chans[name] = v
        t.setflags(write=False)
        object.__setattr__(self, "time_s", t)
        object.__setattr__(self, "joints", joints)
        object.__setattr__(self, "channels", chans)

    def __len__(self) -> int:
        return int(self.time_s.size)

    @property
    def duration_s(self) -> float:
        return float(self.time_s[-1] - self.time_s[0])

    @property
    def sample_rate_hz(self) -> float:
        return (len(self) - 1) / self.duration_s

    def channel(self, name: str) -> Array:
        try:
            return self.channels[name]
        except KeyError:
            raise CaptureError(self.source, f"channel {name!r} is missing") from None

    def joint_captures(self) -> tuple[Capture, ...]:
        """One Capture per joint (metadata `joint` and `gear_ratio` set), in joint order."""
        return tuple(
            Capture(
                self.time_s,
                {name: values[:, j] for name, values in self.channels.items()},
                replace(
                    self.meta,
                    joint=joint,
                    gear_ratio=None if self.gear_ratios is None else self.gear_ratios[j],
                ),
                source=f"{self.source}[{joint}]",
            )
            for j, joint in enumerate(self.joints)
        )

    @classmethod
    def from_joint_captures(
        cls, captures: tuple[Capture, ...] | list[Capture], source: str = "<memory>"
    ) -> MultiCapture:
        """Join per-joint captures of one run (same time base, same channels)."""
        if not captures:
            raise CaptureError(source, "no captures to join")
        first = captures[0]
        names = set(first.channels)
        for c in captures[1:]:
            if len(c) != len(first) or not np.array_equal(c.time_s, first.time_s):
                raise CaptureError(c.source, f"time base differs from {first.source}'s")
            if set(c.channels) != names:
                raise CaptureError(c.source, f"channels differ from {first.source}'s")
        ratios = [c.meta.gear_ratio for c in captures]
        return cls(
            first.time_s,
            tuple(c.meta.joint or f"joint_{k + 1}" for k, c in enumerate(captures)),
            {n: np.stack([c.channels[n] for c in captures], axis=1) for n in first.channels},
            replace(first.meta, joint="all", gear_ratio=None),
            None if any(r is None for r in ratios) else tuple(float(r or 0.0) for r in ratios),
            source,
        )


def save_multi_capture(capture: MultiCapture, path: StrPath) -> None:
    """Write `capture` as .npz atomically: time_s, joints, one (N, n) array per channel, and
    a JSON header with the format, the metadata and the gear ratios."""
    header = json.dumps(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "meta": capture.meta.to_dict(),
            "gear_ratios": None if capture.gear_ratios is None else list(capture.gear_ratios),
        },
        allow_nan=False,
        ensure_ascii=False,
    )
    arrays: dict[str, np.ndarray] = {
        "time_s": np.asarray(capture.time_s, dtype=np.float64),
        "joints": np.array(capture.joints, dtype=np.str_),
        "header_json": np.array(header),
    }
    for name, values in capture.channels.items():
        arrays[_CHANNEL_PREFIX + name] = np.asarray(values)
    with atomic_writer(path, "wb") as f:
        np.savez_compressed(f, allow_pickle=False, **arrays)


def is_multi_capture(path: StrPath) -> bool:
    """True for an .npz written by save_multi_capture (cheap: reads the header only)."""
    try:
        with open(path, "rb") as f:
            check_npz_archive(f, os.fspath(path))
            with np.load(f, allow_pickle=False) as z:
                if "header_json" not in z.files:
                    return False
                header = bounded_json(str(z["header_json"]), os.fspath(path))
                return isinstance(header, dict) and header.get("format") == FORMAT
    except Exception:  # not an archive, or not ours: the caller's loader says what is wrong
        return False


def load_multi_capture(path: StrPath) -> MultiCapture:
    """Read an .npz written by save_multi_capture; any defect raises CaptureError naming it."""
    source = os.fspath(path)
    try:
        with open(path, "rb") as f:
            # The .npy headers first: an archive of a few MB may declare gigabytes.
            check_npz_archive(f, source)
            with np.load(f, allow_pickle=False) as z:
                entries = {name: z[name] for name in z.files}
    except CaptureError:
        raise
    except OSError as e:
        raise unreadable(source, e) from None
    except Exception as e:  # zipfile, zlib and numpy each raise their own on a damaged file
        problem = f"corrupt or truncated .npz archive ({type(e).__name__})"
        raise CaptureError(source, problem) from None
    for key in ("header_json", "time_s", "joints"):
        if key not in entries:
            raise CaptureError(source, f"no {key!r} entry: not a multi-joint capture")
    header = bounded_json(str(entries["header_json"]), f"{source} (header_json)")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CaptureError(source, f"header_json: expected format {FORMAT!r}")
    if header.get("format_version") != FORMAT_VERSION:
        raise CaptureError(
            source,
            f"header_json: format_version {header.get('format_version')!r}, "
            f"this agent reads {FORMAT_VERSION}",
        )
    try:
        meta = CaptureMeta.from_dict(header.get("meta") or {})
    except (TypeError, ValueError) as e:
        raise CaptureError(source, f"header_json.meta: {e}") from None
    ratios = header.get("gear_ratios")
    if ratios is not None and not (
        isinstance(ratios, list) and all(isinstance(r, int | float) for r in ratios)
    ):
        raise CaptureError(source, "header_json.gear_ratios: expected a list of numbers or null")
    joints = entries["joints"]
    if joints.dtype.kind != "U" or joints.ndim != 1:
        raise CaptureError(source, "joints: expected a 1-D array of names")
    channels = {
        k[len(_CHANNEL_PREFIX) :]: v for k, v in entries.items() if k.startswith(_CHANNEL_PREFIX)
    }
    return MultiCapture(
        entries["time_s"],
        tuple(str(j) for j in joints),
        channels,
        meta,
        None if ratios is None else tuple(float(r) for r in ratios),
        source=source,
    )


def multi_capture_dict(capture: MultiCapture) -> dict[str, Any]:
    """A short description (no samples), for logs and JSON output."""
    return {
        "source": capture.source,
        "joints": list(capture.joints),
        "channels": sorted(capture.channels),
        "samples": len(capture),
        "sample_rate_hz": capture.sample_rate_hz,
        "meta": capture.meta.to_dict(),
    }
