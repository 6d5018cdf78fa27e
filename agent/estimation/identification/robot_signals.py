"""The input of the identification: one capture per joint of a dual-encoder robot, turned into
link-side arrays on a common time base.

A robot capture is one agent.capture.model.Capture per joint on a common time base (channels
link_pos_rad or link_counts, motor_pos_rad or motor_counts, motor_torque_nm; motor side means
the motor shaft). `robot_signals` turns it into link-side arrays and refuses, with the reason, a
capture that misses an encoder channel or whose drive saturated; for a rigid fit the motor
encoder may be missing (the rotor is then taken to follow the link).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from agent.capture.checks import capture_with_positions
from agent.capture.model import Capture
from agent.capture.resample import (
    DEFAULT_MAX_GAP_TICKS,
    ResampleReport,
    is_uniform,
    resample_together,
)
from agent.errors import CaptureError
from agent.models.robot.description import RobotDescription

Array = npt.NDArray[np.float64]
CLIP_RUN_S = 0.1  # torque exactly at its extreme this long: a clipping drive


@dataclass(frozen=True)
class RobotSignals:
    """Link-side arrays of a dual-encoder capture, (N, n) each.

    motor_pos_rad is the rotor angle seen from the link, theta = motor shaft angle / gear ratio;
    motor_torque_nm is the drive torque seen from the link, motor shaft torque * gear ratio.
    """

    time_s: Array
    link_pos_rad: Array
    motor_pos_rad: Array
    motor_torque_nm: Array
    sample_rate_hz: float
    sources: tuple[str, ...]
    # Per joint: False where the capture has no motor encoder and motor_pos_rad is the link's
    # (a rigid fit needs only link position and torque; stiffness then cannot be measured).
    motor_measured: tuple[bool, ...] = ()
    resampled: ResampleReport | None = None  # what putting a jittery log on its tick did


def _joint_captures(
    captures: Sequence[Capture], robot: RobotDescription, where: str
) -> list[Capture]:
    names = robot.joint_names
    if not captures:
        raise CaptureError(where, "no capture given")
    tagged: dict[str, Capture] = {}
    for c in captures:
        if c.meta.joint and c.meta.joint in tagged:
            # Never keep one of them silently: the fit would use one run and drop the other.
            raise CaptureError(
                where,
                f"two captures of joint {c.meta.joint!r} ({tagged[c.meta.joint].source} and "
                f"{c.source}): one run of the robot here (fit.split_runs stacks several as "
                "segments)",
            )
        if c.meta.joint:
            tagged[c.meta.joint] = c
    if tagged:
        unknown = sorted(set(tagged) - set(names))
        if unknown:
            raise CaptureError(
                where,
                f"capture of joint {unknown[0]!r}, which {robot.name} does not have "
                f"(joints: {', '.join(names)})",
            )
        missing = [n for n in names if n not in tagged]
        if missing:
            raise CaptureError(
                where,
                f"no capture for joint {missing[0]!r}: all {len(names)} joints of "
                f"{robot.name} must be captured together (have {', '.join(sorted(tagged))})",
            )
        return [tagged[n] for n in names]
    if len(captures) != len(names):
        raise CaptureError(
            where,
            f"{len(captures)} captures without joint names for {len(names)} joints of "
            f"{robot.name}: name them (metadata field joint) or give one per joint in order",
        )
    return list(captures)


def _has_position(cap: Capture, side: str) -> bool:
    return f"{side}_pos_rad" in cap.channels or f"{side}_counts" in cap.channels


def _position(cap: Capture, side: str, joint: str) -> Array:
    name = f"{side}_pos_rad"
    if name not in cap.channels:
        counts = f"{side}_counts"
        if counts not in cap.channels:
            which = "link-side" if side == "link" else "motor-side"
            raise CaptureError(
                cap.source,
                f"joint {joint}: no {which} encoder channel ({name} or {counts}); the elastic "
                "model needs both encoders of every joint (Zollo, Lopez et al. 2014: the "
                "transmission deflection); --model rigid takes link position and torque alone",
            )
        cap = capture_with_positions(cap)
    return np.asarray(cap.channels[name], dtype=np.float64)


def robot_signals(
    captures: Sequence[Capture],
    robot: RobotDescription,
    *,
    saturation_fraction: float = 0.999,
    where: str = "<captures>",
    require_motor: bool = True,
    max_gap_ticks: int = DEFAULT_MAX_GAP_TICKS,
) -> RobotSignals:
    """Link-side arrays from one capture per joint; refuses missing channels and saturation.
    Without `require_motor` a joint with no motor encoder is taken as rigid: its rotor angle
    is its link angle (for a rigid fit from link position and torque, e.g. a torque-sensing
    arm that reports nothing on the motor side)."""
    caps = _joint_captures(captures, robot, where)
    t = np.asarray(caps[0].time_s, dtype=np.float64)
    n_s = t.size
    if n_s < 3:
        raise CaptureError(caps[0].source, "needs more than two samples")
    resampled: ResampleReport | None = None
    if not is_uniform(t):
        # The filters need a fixed rate: every joint onto the first one's tick, as logged
        # together (a differing time base is still refused below).
        for cap, spec in zip(caps[1:], robot.joints[1:], strict=True):
            _same_time_base(cap, caps[0], spec.name)
        caps, resampled = resample_together(caps, max_gap_ticks=max_gap_ticks)
        t = np.asarray(caps[0].time_s, dtype=np.float64)
        n_s = t.size
    link = np.empty((n_s, robot.n_joints))
    measured: list[bool] = []
    motor = np.empty((n_s, robot.n_joints))
    torque = np.empty((n_s, robot.n_joints))
    for j, (cap, spec) in enumerate(zip(caps, robot.joints, strict=True)):
        _same_time_base(cap, caps[0], spec.name)
        ratio = spec.gear_ratio
        if cap.meta.gear_ratio is not None and not math.isclose(
            cap.meta.gear_ratio, ratio, rel_tol=1e-9
        ):
            raise CaptureError(
                cap.source,
                f"joint {spec.name}: gear_ratio {cap.meta.gear_ratio:g} in the "
                f"capture, {ratio:g} in {robot.source}",
            )
        link[:, j] = _position(cap, "link", spec.name)
        if require_motor or _has_position(cap, "motor"):
            motor[:, j] = _position(cap, "motor", spec.name) / ratio
            measured.append(True)
        else:
            motor[:, j] = link[:, j]
            measured.append(False)
        if "motor_torque_nm" not in cap.channels:
            raise CaptureError(
                cap.source,
                f"joint {spec.name}: no motor_torque_nm channel (the drive torque "
                "is the measurement the dynamic model is fitted to)",
            )
        torque[:, j] = np.asarray(cap.channels["motor_torque_nm"], dtype=np.float64) * ratio
        _check_saturation(
            cap.source, spec.name, t, torque[:, j], spec.torque_max_nm, saturation_fraction
        )
    return RobotSignals(
        t,
        link,
        motor,
        torque,
        float((n_s - 1) / (t[-1] - t[0])),
        tuple(c.source for c in caps),
        tuple(measured),
        resampled,
    )


def _same_time_base(cap: Capture, first: Capture, joint: str) -> None:
    if len(cap) != len(first) or not np.allclose(cap.time_s, first.time_s, rtol=0.0, atol=1e-9):
        raise CaptureError(
            cap.source,
            f"joint {joint}: time base differs from {first.source}'s; "
            "all joints must be sampled together",
        )


def _check_saturation(
    source: str, joint: str, t: Array, tau: Array, limit_nm: float, fraction: float
) -> None:
    """A drive at its torque limit no longer obeys the model: refuse, naming when it happened.

    Two signs: the torque reaches the joint's limit, or it sits exactly on its extreme value
    for several samples in a row (a drive clipping at a lower current limit of its own).
    """
    mag = np.abs(tau)
    hits = np.flatnonzero(mag >= fraction * limit_nm)
    if hits.size:
        raise CaptureError(
            source,
            f"joint {joint} saturated: |torque| reached {mag[hits[0]]:.4g} N·m (limit "
            f"{limit_nm:g} N·m) on {hits.size} samples from t = {t[hits[0]]:.3f} s; the "
            "drive was at its limit, so the torque does not follow the dynamic model",
        )
    peak = float(mag.max())
    if peak <= 0.0:
        return
    at_peak = mag == peak
    run = _longest_run(at_peak)
    # A smooth peak read through a coarse torque quantisation also sits on one value for a
    # while (a few tens of ms at 0.1 N·m steps); a drive clipping for 0.1 s is no such peak.
    rate = (t.size - 1) / (t[-1] - t[0])
    if run >= max(10, CLIP_RUN_S * rate):
        first = int(np.flatnonzero(at_peak)[0])
        raise CaptureError(
            source,
            f"joint {joint} saturated: the torque stays at exactly {peak:.6g} N·m for "
            f"{run} samples in a row (from t = {t[first]:.3f} s), the mark of a clipping drive",
        )


def _longest_run(mask: npt.NDArray[np.bool_]) -> int:
    if not mask.any():
        return 0
    padded = np.concatenate(([0], mask.astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(padded))
    return int(np.max(edges[1::2] - edges[0::2]))
