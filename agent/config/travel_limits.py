"""Each configured joint's travel limits, from the first source that gives them.

In order: the joint's own position_min_rad/position_max_rad, its continuous_rotation, the
controller's robot description (or the identification's), what the driver knows of its
controller (drivers.base.Driver.joint_travel). A joint of a driver that moves joints with none
of these is a config error (`travel_issues`), and its cycles are refused (drivers.travel).
"""

from __future__ import annotations

import functools
from pathlib import Path

from agent.config.model import ControllerSettings, JointSettings
from drivers.travel import CONTINUOUS, JointTravel, TravelLimits


def joint_travel(controller: ControllerSettings, joint: JointSettings) -> JointTravel:
    """The joint's limits (TravelLimits), CONTINUOUS, or None when nothing says."""
    travel, _ = _resolve(controller, joint)
    return travel


def travel_issues(controller: ControllerSettings) -> list[tuple[int, str, str]]:
    """(joint position in the list, key, message) for each joint whose limits are missing or
    contradictory."""
    found = []
    for i, joint in enumerate(controller.joints):
        _, problem = _resolve(controller, joint)
        if problem is not None:
            found.append((i, problem[0], problem[1]))
    return found


def _resolve(
    controller: ControllerSettings, joint: JointSettings
) -> tuple[JointTravel, tuple[str, str] | None]:
    lo, hi, margin = joint.position_min_rad, joint.position_max_rad, joint.limit_margin_rad
    if (lo is None) != (hi is None):
        missing = "position_max_rad" if hi is None else "position_min_rad"
        return None, (missing, "expected both position_min_rad and position_max_rad, or neither")
    if lo is not None and hi is not None:
        if joint.continuous_rotation:
            return None, ("continuous_rotation", "expected either limits or continuous_rotation")
        if lo >= hi:
            return None, ("position_max_rad", f"expected more than position_min_rad ({lo:g})")
        if hi - lo <= 2.0 * margin:
            return None, ("limit_margin_rad", f"the margins leave no travel in [{lo:g}, {hi:g}]")
        return TravelLimits(lo, hi, margin, "configured"), None
    if joint.continuous_rotation:
        return CONTINUOUS, None
    robot = controller.robot or (
        controller.identification.robot if controller.identification is not None else None
    )
    if robot is not None:
        limits = _robot_limits(robot, joint.index)
        if limits is None:
            return None, ("index", f"the robot description {robot} has no joint {joint.index}")
        return TravelLimits(limits[0], limits[1], margin, f"robot description {robot}"), None
    from agent.errors import DriverError
    from drivers.base import load_driver_class

    try:
        travel = load_driver_class(controller.driver).joint_travel(controller.settings, joint.index)
    except DriverError:  # an unknown driver is reported where the driver is checked
        travel = None
    except OSError as exc:
        # Importing the driver needs files: out of descriptors (EMFILE) it fails, and saying
        # "no travel limits" then would send a person to fix a config that is right.
        return None, (
            "position_min_rad",
            f"the driver {controller.driver}'s joint limits could not be read: "
            f"{exc.strerror or exc}",
        )
    if isinstance(travel, TravelLimits):
        travel = TravelLimits(travel.min_rad, travel.max_rad, margin, travel.source)
    if travel is None:
        return None, (
            "position_min_rad",
            "the joint has no travel limits: set position_min_rad and position_max_rad, a "
            "robot description (controllers[].robot), or continuous_rotation: true for an axis "
            "that turns without end",
        )
    return travel, None


def _robot_limits(path: str, index: int) -> tuple[float, float] | None:
    p = Path(path)
    try:
        mtime = p.stat().st_mtime_ns
    except OSError:
        return None
    return _robot_limits_cached(str(p), mtime, index)


@functools.lru_cache(maxsize=32)
def _robot_limits_cached(path: str, mtime_ns: int, index: int) -> tuple[float, float] | None:
    from agent.errors import ConfigError
    from agent.models.robot.description import load_robot

    try:
        joints = load_robot(path).joints
    except (ConfigError, OSError):
        return None
    if not 1 <= index <= len(joints):
        return None
    j = joints[index - 1]
    return (j.position_min_rad, j.position_max_rad)
