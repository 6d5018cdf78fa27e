"""The UR driver's excitation cycle: request and capture.

The identification of Zollo, Lopez et al. 2014 and Madsen et al. 2020. Driver side of
drivers.ur_rtde.worker.servo. The trajectory (drivers.base.ExcitationCycle) is sampled
here at the RTDE rate into one servoJ target per period: settle_s at q0, hold_s at q0, the
periods, hold_s at the end pose (= q0). The capture is every package from the first hold on:
  link_pos_rad    actual_q
  motor_pos_rad   actual_q times the gear ratio: RTDE has no motor-side encoder of its own (the
                  joint angle it reports comes from one encoder), so the elastic model (Zollo,
                  Lopez et al. 2014), which needs the gear's twist, cannot be identified from it
  motor_torque_nm actual_current times settings.torque_constants_nm_a (motor shaft); RTDE's
                  target_moment is the controller's model torque, not a measurement
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agent.capture.multi import MultiCapture
from agent.errors import ConfigError, DriverError
from drivers.base import ExcitationCycle
from drivers.ur_rtde.settings import UR_JOINT_VELOCITY_MAX_RAD_S, UrRtdeSettings
from drivers.ur_rtde.status import UR_JOINTS, bridged_inside

MOTOR_POSITION_NOTE = "motor position from the link encoder; elastic model not identifiable"


def ur_order(cycle: ExcitationCycle, joints: tuple[Any, ...], controller: str) -> list[int]:
    """For each UR joint 1..6 (0-based), the column of the cycle that drives it."""
    index = {j.name: j.index - 1 for j in joints}
    missing = [name for name in cycle.joints if name not in index]
    if missing or len(cycle.joints) != UR_JOINTS:
        raise DriverError(
            f"{controller}: the excitation drives joints {', '.join(cycle.joints)}; a UR arm "
            f"needs all {UR_JOINTS}, each a joint of the controller"
            + (f" (not configured: {', '.join(missing)})" if missing else "")
        )
    order = [0] * UR_JOINTS
    for col, name in enumerate(cycle.joints):
        order[index[name]] = col
    return order


def excitation_request(
    cycle: ExcitationCycle, settings: UrRtdeSettings, joints: tuple[Any, ...], controller: str
) -> dict[str, Any]:
    """The worker's `excite` arguments (without the common safety parameters)."""
    where = f"{controller}/identification"
    try:
        kt = settings.torque_constants()
    except ConfigError as exc:
        raise DriverError(f"{where}: {exc}") from None
    if kt is None:
        raise DriverError(
            f"{where}: settings.torque_constants_nm_a is not set (nor drive_gains_file): the "
            "motor torque of an excitation capture is actual_current times the torque constant "
            "of each joint, which Universal Robots does not publish: calibrate them from a "
            "payload pair (jha calibrate drive-gains; docs/drivers/ur_rtde.md)"
        )
    if not math.isclose(cycle.sample_rate_hz, settings.frequency_hz):
        raise DriverError(
            f"{where}: the cycle asks for {cycle.sample_rate_hz:g} Hz, RTDE streams at "
            f"{settings.frequency_hz:g} Hz (set identification.sample_rate_hz)"
        )
    order = ur_order(cycle, joints, controller)
    fs = settings.frequency_hz
    n_settle, n_hold = round(cycle.settle_s * fs), round(cycle.hold_s * fs)
    n_move = round(cycle.periods * cycle.period_s * fs)
    k = np.arange(n_settle + 2 * n_hold + n_move + 1)
    tau = np.clip((k - n_settle - n_hold) / fs, 0.0, n_move / fs)
    q, qd, _ = cycle.trajectory().evaluate(tau)
    speed = float(np.abs(qd).max())
    if speed > UR_JOINT_VELOCITY_MAX_RAD_S:
        raise DriverError(
            f"{where}: the trajectory needs {speed:.2f} rad/s, a UR joint moves at most "
            f"{UR_JOINT_VELOCITY_MAX_RAD_S} rad/s"
        )
    if settings.joint_limit_rad is not None and float(np.abs(q).max()) > settings.joint_limit_rad:
        raise DriverError(
            f"{where}: the trajectory reaches {float(np.abs(q).max()):.3f} rad, beyond the "
            f"joint limit +-{settings.joint_limit_rad:g} rad"
        )
    ur_q = q[:, order]
    return {
        "targets": ur_q.tolist(),
        "q0_rad": ur_q[0].tolist(),
        "n_settle": n_settle,
        "gain": settings.servo_gain,
        "lookahead_s": settings.servo_lookahead_s,
        "start_tolerance_rad": settings.start_tolerance_rad,
    }


def multi_capture_from_rows(
    rows: list[tuple[Any, ...]],
    cycle: ExcitationCycle,
    settings: UrRtdeSettings,
    joints: tuple[Any, ...],
    *,
    version: str,
    beat_gap_max_s: float,
    filled_at_s: list[float] | tuple[float, ...] = (),
    servo_late_max_s: float | None = None,
) -> MultiCapture:
    """The captured packages as a MultiCapture, columns in the cycle's joint order."""
    if len(rows) < 2:
        raise DriverError(f"{cycle.controller}/identification: {len(rows)} package(s) captured")
    order = ur_order(cycle, joints, cycle.controller)
    cols = np.argsort(order)  # UR index of each cycle column
    t = np.array([r[0] for r in rows], dtype=np.float64)
    q = np.array([r[1] for r in rows], dtype=np.float64)[:, cols]
    cur = np.array([r[3] for r in rows], dtype=np.float64)[:, cols]
    tq = np.array([r[4] for r in rows], dtype=np.float64)[:, cols]
    try:
        constants = settings.torque_constants()
    except ConfigError as exc:
        raise DriverError(f"{cycle.controller}/identification: {exc}") from None
    if constants is None:  # excitation_request refused the cycle then
        raise DriverError(f"{cycle.controller}/identification: no torque_constants_nm_a")
    kt = np.array(constants, dtype=np.float64)[cols]
    gear = np.array(cycle.gear_ratios, dtype=np.float64)
    extra = {
        "driver": "ur_rtde",
        "controller_version": version,
        "rtde_frequency_hz": settings.frequency_hz,
        "controller_time_s": float(t[0]),
        "motor_position_from": "link_encoder",
        "motor_position_note": MOTOR_POSITION_NOTE,
        "motor_torque_from": "actual_current * torque_constants_nm_a"
        + ("" if settings.drive_gains_file is None else f" ({settings.drive_gains_file})"),
        "torque_constants_nm_a": kt.tolist(),
        "servo_gain": settings.servo_gain,
        "servo_lookahead_s": settings.servo_lookahead_s,
        "tracking_error_max_rad": float(np.abs(q - tq).max()),
        "agent_beat_gap_max_s": beat_gap_max_s,
        "missed_packets": len(bridged := bridged_inside(filled_at_s, t)),
        "interpolated_times_s": bridged,
        # How late the worker sent its latest servoJ target against the schedule (0 when the
        # edge PC kept up): a figure for commissioning, and the bound of a late target's effect.
        "servo_late_max_s": servo_late_max_s,
    }
    return MultiCapture(
        t - t[0],
        cycle.joints,
        {
            "link_pos_rad": q,
            "motor_pos_rad": q * gear,
            "motor_torque_nm": cur * kt,
            "current_a": cur,
        },
        cycle.capture_meta(cycle.controller, extra),
        gear_ratios=cycle.gear_ratios,
        source=f"ur_rtde:{settings.host}/identification",
    )
