"""Settings of the Universal Robots driver (`driver: ur_rtde`), validated by
agent.schema.validate."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.errors import ConfigError
from drivers.machine import canonical_host

# ur_rtde's own limits (rtde_control_interface.h): it refuses a moveJ/speedJ outside them.
UR_JOINT_VELOCITY_MAX_RAD_S = 3.14
UR_JOINT_ACCELERATION_MAX_RAD_S2 = 40.0


@dataclass(frozen=True)
class UrRtdeSettings:
    host: str = field(
        metadata={"min_len": 1, "doc": "controller address (ports 29999, 30003, 30004 are fixed)"}
    )
    frequency_hz: float = field(
        default=500.0,
        metadata={"gt": 0.0, "le": 500.0, "doc": "RTDE rate: 500 on e-Series, at most 125 on CB3"},
    )
    dashboard_port: int = field(default=29999, metadata={"ge": 1, "le": 65535})
    # Which standard (0-7), configurable (8-15) or tool (16-17) digital input carries the plant's
    # "agent may move the robot" signal; null: no such wiring, permission is always given.
    permission_input: int | None = field(default=None, metadata={"ge": 0, "le": 17})
    # The motor speed the estimator sees: central differences of actual_q (as the simulation
    # calibration does) or the controller's own actual_qd.
    motor_speed_from: Literal["actual_q", "actual_qd"] = "actual_q"
    move_speed_rad_s: float = field(
        default=1.05, metadata={"gt": 0.0, "le": UR_JOINT_VELOCITY_MAX_RAD_S, "doc": "moveJ"}
    )
    move_acceleration_rad_s2: float = field(
        default=1.4, metadata={"gt": 0.0, "le": UR_JOINT_ACCELERATION_MAX_RAD_S2, "doc": "moveJ"}
    )
    speedj_acceleration_rad_s2: float = field(
        default=40.0,
        metadata={"gt": 0.0, "le": UR_JOINT_ACCELERATION_MAX_RAD_S2, "doc": "speedJ run-up"},
    )
    stop_deceleration_rad_s2: float = field(
        default=10.0,
        metadata={"gt": 0.0, "le": UR_JOINT_ACCELERATION_MAX_RAD_S2, "doc": "speedStop/stopJ"},
    )
    return_to_start: bool = field(
        default=True, metadata={"doc": "moveJ back to the pose the cycle started from"}
    )
    # Refuse a cycle whose travel would leave +-limit (UR joints: 2 pi); null: no check.
    joint_limit_rad: float | None = field(default=None, metadata={"gt": 0.0})
    # Controller-side RTDE watchdog: the control script stops when the driver falls silent.
    watchdog_min_hz: float = field(default=10.0, metadata={"gt": 0.0, "le": 100.0})
    stale_after_s: float = field(
        default=0.1, metadata={"gt": 0.0, "doc": "RTDE timestamp frozen this long: data is stale"}
    )
    status_period_s: float = field(
        default=0.05, metadata={"gt": 0.0, "le": 1.0, "doc": "interlock poll during motion"}
    )
    # SCHED_FIFO priority of the capture loop and of ur_rtde's receive threads (0: normal); on
    # a busy edge PC this is what keeps 500 Hz without a missed package. Without the right to
    # it (CAP_SYS_NICE) the worker logs that and runs at normal priority.
    rt_priority: int = field(default=20, metadata={"ge": 0, "le": 99})
    # Receive interfaces reading the same recipe, each on its own CPU; a package is lost only
    # when all of them miss it (see drivers/ur_rtde/worker/stream.py).
    rtde_paths: int = field(default=2, metadata={"ge": 1, "le": 4})
    # Packages every path lost during motion: a run of at most gap_fill_max_run is bridged by
    # linear interpolation and counted in the capture (missed_packets, interpolated_times_s);
    # a longer run, or more than gap_fill_max_per_cycle in one cycle, aborts it. 0: any loss
    # aborts.
    gap_fill_max_run: int = field(default=2, metadata={"ge": 0, "le": 5})
    gap_fill_max_per_cycle: int = field(default=10, metadata={"ge": 0, "le": 100})
    connect_timeout_s: float = field(default=10.0, metadata={"gt": 0.0})
    request_timeout_s: float = field(
        default=3.0, metadata={"gt": 0.0, "doc": "a status read (dashboard times out at 2.5 s)"}
    )
    stop_timeout_s: float = field(
        default=1.5, metadata={"gt": 0.0, "doc": "stop not confirmed: the worker is killed"}
    )
    reconnect_backoff_s: float = field(default=2.0, metadata={"ge": 0.0})
    # Liveness of the agent's event loop while a cycle runs: the driver sends the worker a beat
    # from the loop every heartbeat_interval_s, and the worker stops the arm after agent_timeout_s
    # without one (the interlock watcher runs on that loop: a hung loop cannot watch).
    heartbeat_interval_s: float = field(
        default=0.1,
        metadata={"gt": 0.0, "le": 5.0, "doc": "beat from the event loop while a cycle runs"},
    )
    agent_timeout_s: float = field(
        default=0.5,
        metadata={
            "ge": 0.05,
            "le": 60.0,
            "doc": "the worker stops the arm after this long without a beat",
        },
    )

    # The excitation cycle (identification, drivers.ur_rtde.excitation): servoJ at the RTDE rate.
    servo_gain: float = field(
        default=1000.0, metadata={"ge": 100.0, "le": 2000.0, "doc": "servoJ proportional gain"}
    )
    servo_lookahead_s: float = field(
        default=0.1, metadata={"ge": 0.03, "le": 0.2, "doc": "servoJ lookahead_time"}
    )
    # Motor-shaft torque per ampere of actual_current, one per joint (base to wrist 3): RTDE has
    # no measured joint torque (target_moment is the controller's model, not a measurement).
    # Universal Robots publishes no UR5e values we could find: null refuses the excitation cycle.
    torque_constants_nm_a: tuple[float, ...] | None = field(
        default=None, metadata={"doc": "motor torque per A of actual_current, per joint"}
    )
    # Or the calibration `jha calibrate drive-gains` wrote from a payload pair (absolute path;
    # read at each excitation cycle, so a new calibration needs no restart). A joint it could
    # not judge refuses the cycle: the gains are never guessed.
    drive_gains_file: str | None = field(
        default=None, metadata={"min_len": 1, "doc": "drive-gain calibration (absolute path)"}
    )
    start_tolerance_rad: float = field(
        default=0.01,
        metadata={"gt": 0.0, "le": 0.1, "doc": "excitation refused unless every joint is at q0"},
    )

    def machine_address(self) -> str:
        """The robot: RTDE, dashboard and script ports are fixed, so its host names it."""
        return f"UR controller {canonical_host(self.host)}"

    def torque_constants(self) -> tuple[float, ...] | None:
        """Motor-shaft torque per A of actual_current, per joint: the setting's, or the drive-gain
        calibration file's (ConfigError when that file cannot give all six); None: neither."""
        if self.drive_gains_file is not None:
            from agent.estimation.identification.drive_gains_file import read_torque_constants

            return read_torque_constants(self.drive_gains_file, 6)
        return self.torque_constants_nm_a

    def check_files(self, base_dir: str | Path) -> list[tuple[str, str]]:
        """(field, message) of a drive-gain file that cannot give the six gains."""
        if self.drive_gains_file is None:
            return []
        try:
            self.torque_constants()
        except ConfigError as exc:
            return [("drive_gains_file", f"expected a complete calibration: {exc}")]
        return []

    def check(self) -> list[tuple[str, str]]:
        kt = self.torque_constants_nm_a
        if kt is not None and (len(kt) != 6 or not all(k > 0 for k in kt)):
            return [("torque_constants_nm_a", f"expected 6 values > 0, found {list(kt)}")]
        if self.drive_gains_file is not None:
            if kt is not None:
                return [("drive_gains_file", "give torque_constants_nm_a or drive_gains_file")]
            if not Path(self.drive_gains_file).is_absolute():
                return [
                    (
                        "drive_gains_file",
                        f"expected an absolute path, found {self.drive_gains_file!r}",
                    )
                ]
        # Three beats per timeout: one late or lost beat must not stop a healthy cycle.
        if self.agent_timeout_s < 3.0 * self.heartbeat_interval_s:
            return [
                (
                    "agent_timeout_s",
                    f"expected at least 3 x heartbeat_interval_s "
                    f"({3.0 * self.heartbeat_interval_s:g} s), found {self.agent_timeout_s:g}",
                )
            ]
        return []
