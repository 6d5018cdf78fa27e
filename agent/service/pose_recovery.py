"""After an abort the joint stands wherever the stop left it: bring it back to its test pose.

A cycle aborted mid-motion leaves its joint away from the pose every later cycle must start
from, and every later cycle would be refused until someone moved it by hand. So once the
machine is confirmed at rest (agent.service.standstill) and every interlock but the pose holds,
the agent moves each such joint back at the reduced return_speed_rad_s: a separate motion, logged,
watched by the same interlocks as a cycle (agent.service.interlocks.guarded_motion) and refused
when the move would leave the joint's travel limits. Where the driver cannot move a joint alone,
the controller is not healthy, or the config says so, the record says plainly that a person must
move it, from where to where.
"""

from __future__ import annotations

import asyncio
import logging
import math

from agent.config.model import ControllerSettings
from agent.errors import CycleAborted
from agent.logfmt import kv
from agent.service.interlocks import (
    CycleLimits,
    Motion,
    continuous_joints,
    guarded_motion,
    interlock_violations,
    pose_error_rad,
    wrapped_rad,
)
from drivers.base import Capability, Cycle, Driver, ExcitationCycle
from drivers.travel import TravelLimits

log = logging.getLogger(__name__)


async def return_to_start_pose(
    driver: Driver,
    ctrl: ControllerSettings,
    cycle: Cycle,
    limits: CycleLimits | None = None,
    *,
    speed_rad_s: float | None = None,
) -> str | None:
    """Move every joint of `cycle` that stands off its start pose back to it, or say why not.

    `speed_rad_s`: None after an abort (the reduced interlocks.return_speed_rad_s); the end of
    a completed cycle passes the driver's own move speed. Returns the sentence for the cycle's
    record; None when every joint already stands there.
    """
    rules = ctrl.interlocks
    limits = limits or CycleLimits()
    try:
        async with asyncio.timeout(limits.status_timeout_s):
            status = await driver.read_status()
    except Exception as exc:
        return f"not moved back: controller status unreadable ({str(exc) or 'timeout'})"
    continuous = continuous_joints(cycle)
    off = {
        name: (at, _nearest(at, target, name in continuous))
        for name, target in cycle.start_pose_rad.items()
        if (at := status.joint_positions_rad.get(name)) is not None
        and pose_error_rad(at, target, name in continuous) > rules.pose_tolerance_rad
    }
    if not off:
        return None
    person = "; ".join(f"{n} from {at:.4f} to {to:.4f} rad" for n, (at, to) in off.items())
    if isinstance(cycle, ExcitationCycle):
        return f"a person must move the robot back to the excitation's start pose ({person})"
    if not rules.return_after_abort:
        return f"a person must move {person} (return_after_abort is off)"
    if Capability.RETURN_MOVE not in driver.capabilities:
        return f"a person must move {person} (the {driver.name} driver cannot move a joint alone)"
    problems = interlock_violations(status, rules, None, start_pose_rad={})
    if problems:
        return (
            f"not moved back yet ({'; '.join(problems)}): the agent moves {person} once the "
            "interlocks hold, or a person does"
        )
    name, (at, to) = next(iter(off.items()))
    travel = cycle.travel_limits
    if isinstance(travel, TravelLimits):
        lo, hi = travel.min_rad, travel.max_rad
        if not (lo <= at <= hi and lo <= to <= hi):
            return f"a person must move {person}: it stands outside its limits [{lo:g}, {hi:g}]"
    requested = rules.return_speed_rad_s if speed_rad_s is None else speed_rad_s
    speed = min(requested, driver.move_speed_max_rad_s)
    where = f"{cycle.controller}/{name}"
    log.warning(kv("return_move", where=where, from_rad=f"{at:.4f}", to_rad=f"{to:.4f}",
                   speed_rad_s=speed))  # fmt: skip
    try:
        await guarded_motion(
            driver,
            driver.move_joint(name, to, speed),
            Motion(where, abs(to - at) / speed, (name,)),
            rules,
            None,
            limits,
        )
    except CycleAborted as exc:
        log.error(kv("return_move_aborted", where=where, reason=str(exc)))
        return f"the move back was aborted ({exc}): a person must move {name} to {to:.4f} rad"
    except Exception as exc:  # a driver error: nothing more to try
        log.error(kv("return_move_failed", where=where, error=str(exc)))
        return f"the move back failed ({exc}): a person must move {name} to {to:.4f} rad"
    log.info(kv("returned", where=where, pose_rad=f"{to:.4f}"))
    return f"moved {name} back from {at:.4f} to {to:.4f} rad at {speed:g} rad/s"


def _nearest(at_rad: float, target_rad: float, continuous: bool) -> float:
    """Where to move back to: the test pose, or for a joint that turns without end the
    nearest position a whole number of turns from it (at most half a turn away)."""
    if not continuous or abs(target_rad - at_rad) <= math.pi:
        return target_rad
    return at_rad + wrapped_rad(target_rad - at_rad)
