"""The UR driver's data mapping: a status read as ControllerStatus, the capture rows as Capture.

Split from drivers.ur_rtde.driver (its cycle control). Pure functions of what the worker sent: the
dashboard strings and RTDE words of one status read, and the packages of one capture window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from agent.capture.model import Capture, CaptureMeta
from drivers.base import BacklashCycle, ControllerMode, ControllerStatus
from drivers.ur_rtde.safety_bits import STOP_BITS, stop_names
from drivers.ur_rtde.settings import UrRtdeSettings

_SAFETY_OK = ("NORMAL", "REDUCED")
UR_JOINTS = 6


@dataclass(frozen=True)
class StreamStats:
    """What the RTDE stream delivered over a while (the benchmark's figure)."""

    samples: int
    missed: int  # by every path
    seconds: float
    missed_by_path: tuple[int, ...] = ()  # what each receive interface alone would have missed

    @property
    def rate_hz(self) -> float:
        return self.samples / self.seconds

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rate_hz": self.rate_hz}


def controller_status(
    raw: dict[str, Any], joints: tuple[Any, ...], settings: UrRtdeSettings, cycle_active: bool
) -> ControllerStatus:
    """The interlocks' view of one status read (dashboard strings plus RTDE words)."""
    alarms: list[str] = []
    safety_bits = int(raw["safety_bits"])
    if raw["safety"] not in _SAFETY_OK or safety_bits & STOP_BITS:
        mode = ControllerMode.FAULT
        alarms.append(f"safety status {raw['safety']}, RTDE: {stop_names(safety_bits)}")
    elif raw["robot_mode"] != "RUNNING":
        mode = ControllerMode.MANUAL if raw["robot_mode"] == "BACKDRIVE" else ControllerMode.FAULT
        alarms.append(f"robot mode {raw['robot_mode']}")
    elif raw["remote"] is False:
        mode = ControllerMode.MANUAL  # pendant in local mode: someone is at the robot
    elif raw["program_state"] == "STOPPED":
        mode = ControllerMode.TEST_CYCLE if cycle_active else ControllerMode.STOPPED
    else:
        # A playing (or paused, resumable) program that is not our cycle is production.
        mode = ControllerMode.TEST_CYCLE if cycle_active else ControllerMode.PRODUCTION
    bit = settings.permission_input
    q = raw["q"]
    return ControllerStatus(
        mode=mode,
        permission=True if bit is None else bool((int(raw["digital_inputs"]) >> bit) & 1),
        joint_positions_rad={
            j.name: float(q[j.index - 1]) for j in joints if 1 <= j.index <= UR_JOINTS
        },
        alarms=tuple(alarms),
        speed_override=float(raw["speed_fraction"]),
        operator_present=None if raw["remote"] is None else not raw["remote"],
        time_s=float(raw["timestamp"]),
    )


def capture_from_rows(
    rows: list[tuple[Any, ...]],
    cycle: BacklashCycle,
    settings: UrRtdeSettings,
    *,
    version: str,
    started_at: str,
    beat_gap_max_s: float | None = None,
    filled_at_s: list[float] | tuple[float, ...] = (),
) -> Capture:
    """The capture window's packages as a Capture (link-side RTDE values times the gear)."""
    j, n = cycle.joint_index - 1, cycle.gear_ratio
    t = np.array([r[0] for r in rows], dtype=np.float64)
    col = {
        name: np.array([r[k][j] for r in rows], dtype=np.float64)
        for k, name in enumerate(("q", "qd", "cur", "tq", "tqd", "tcur", "temp"), start=1)
    }
    channels = {"motor_pos_rad": col["q"] * n, "current_a": col["cur"]}
    if settings.motor_speed_from == "actual_qd":
        channels["motor_speed_rad_s"] = col["qd"] * n
    extra = {
        "driver": "ur_rtde",
        "controller_version": version,
        "rtde_frequency_hz": settings.frequency_hz,
        # Lost packages bridged by interpolation (drivers.ur_rtde.worker.stream.GapFiller),
        # in controller time: the capture's own times are these minus controller_time_s.
        "missed_packets": len(bridged := bridged_inside(filled_at_s, t)),
        "interpolated_times_s": bridged,
        "motor_speed_from": settings.motor_speed_from,
        "controller_time_s": float(t[0]),
        "tracking_error_rms_rad": float(np.sqrt(np.mean((col["q"] - col["tq"]) ** 2))),
        "speed_error_rms_rad_s": float(np.sqrt(np.mean((col["qd"] - col["tqd"]) ** 2))),
        "target_current_rms_a": float(np.sqrt(np.mean(col["tcur"] ** 2))),
        "joint_temperature_c": [float(col["temp"][0]), float(col["temp"][-1])],
    }
    if beat_gap_max_s is not None:
        # How close the agent's event loop came to agent_timeout_s (the longest silence between
        # two heartbeats the worker heard): a figure for commissioning on a busy edge PC.
        extra["agent_beat_gap_max_s"] = beat_gap_max_s
    return Capture(
        time_s=t - t[0],
        channels=channels,
        meta=CaptureMeta(
            machine=cycle.controller,
            joint=cycle.joint,
            cycle=cycle.kind,
            commanded_speed_rad_s=cycle.motor_speed_rad_s,
            gear_ratio=cycle.gear_ratio,
            encoder_bits=cycle.encoder_bits,
            sample_rate_hz=settings.frequency_hz,
            started_at=started_at,
            extra=extra,
        ),
        source=f"ur_rtde:{settings.host}/{cycle.joint}",
    )


def bridged_inside(times_s: list[float] | tuple[float, ...], t: np.ndarray) -> list[float]:
    """The bridged packages' times inside the capture window (the run-up ones were dropped)."""
    return [float(x) for x in times_s if t[0] - 1e-9 <= x <= t[-1] + 1e-9]
