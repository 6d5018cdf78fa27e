"""The safety interlocks around every motion, and the guarded path every cycle runs through.

Nothing moves unless every interlock of the controller's config holds right before motion; while
the cycle runs they are watched every control period, and any surprise (a violated interlock, a
status read that fails or hangs, the cycle overrunning its time) stops the motion through the
driver and aborts the cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agent.capture.model import Capture
from agent.config.model import InterlockSettings, JointSettings
from agent.errors import CycleAborted, InterlockError, TravelRefused
from agent.service.standstill import Standstill, stop_until_at_rest
from drivers.base import ControllerMode, ControllerStatus, Cycle, Driver, ExcitationCycle
from drivers.travel import CONTINUOUS, check_backlash_travel, check_excitation_travel

if TYPE_CHECKING:
    from agent.capture.multi import MultiCapture

log = logging.getLogger(__name__)
T = TypeVar("T")

# Modes in which motion may start / may continue.
_START_MODES = {ControllerMode.STOPPED}
_RUN_MODES = {ControllerMode.STOPPED, ControllerMode.TEST_CYCLE}


def interlock_violations(
    status: ControllerStatus,
    rules: InterlockSettings,
    joint: JointSettings | None,
    *,
    running: bool = False,
    start_pose_rad: Mapping[str, float] | None = None,
    continuous: frozenset[str] = frozenset(),
) -> list[str]:
    """Every interlock that does not hold, as a sentence; empty means motion may go on.

    Before motion (running=False) every joint the cycle moves must stand at its start pose
    (`start_pose_rad`, by default the joint's test pose); during motion the pose changes by
    design and is not checked, but the end of the announced stop is.
    """
    problems: list[str] = []
    allowed = _RUN_MODES if running else _START_MODES
    if status.mode in (ControllerMode.MANUAL, ControllerMode.FAULT, ControllerMode.DISCONNECTED):
        problems.append(f"controller is in {status.mode.value} mode")
    elif rules.require_production_stop and status.mode not in allowed:
        problems.append(f"controller is in {status.mode.value} mode, not stopped for production")
    elif (
        rules.require_production_stop
        and status.stop_expected_s is not None
        and status.stop_expected_s <= 0
    ):
        problems.append("the production stop is over (stop_expected_s ran out)")
    if rules.require_permission and not status.permission:
        problems.append("permission signal is off")
    if rules.require_no_alarm and status.alarms:
        problems.append("active alarm: " + ", ".join(status.alarms))
    if rules.require_full_override and not math.isclose(status.speed_override, 1.0, abs_tol=1e-3):
        problems.append(f"speed override is {100 * status.speed_override:.0f} %, not 100 %")
    if rules.require_operator_absent and status.operator_present is not False:
        problems.append(
            "operator presence is unknown"
            if status.operator_present is None
            else "an operator is present"
        )
    if not running:
        if start_pose_rad is None:
            start_pose_rad = {} if joint is None else {joint.name: joint.test_pose_rad}
        for name, target in start_pose_rad.items():
            pos = status.joint_positions_rad.get(name)
            if pos is None:
                problems.append(f"position of joint {name} is unknown")
            elif pose_error_rad(pos, target, name in continuous) > rules.pose_tolerance_rad:
                problems.append(
                    f"joint {name} stands at {pos:.4f} rad, test pose is "
                    f"{target:.4f} +- {rules.pose_tolerance_rad:g} rad"
                )
    return problems


def pose_error_rad(at_rad: float, target_rad: float, continuous: bool) -> float:
    """How far a joint stands from a pose; a joint that turns without end is there at any
    whole number of turns from it."""
    if not continuous:
        return abs(at_rad - target_rad)
    return abs(wrapped_rad(target_rad - at_rad))


def wrapped_rad(angle_rad: float) -> float:
    """The angle in (-pi, pi]."""
    return math.pi - (math.pi - angle_rad) % (2.0 * math.pi)


def continuous_joints(cycle: Cycle) -> frozenset[str]:
    """The cycle's joints that turn without end (drivers.travel.CONTINUOUS)."""
    if isinstance(cycle, ExcitationCycle):
        pairs = zip(cycle.joints, cycle.travel_limits, strict=False)
        return frozenset(name for name, travel in pairs if travel == CONTINUOUS)
    return frozenset({cycle.joint}) if cycle.travel_limits == CONTINUOUS else frozenset()


@dataclass(frozen=True)
class CycleLimits:
    status_timeout_s: float = 2.0  # a status read slower than this is a surprise
    overrun_factor: float = 3.0  # the cycle may take this many times its nominal length
    overrun_margin_s: float = 10.0
    standstill_timeout_s: float = 2.0  # after a stop, per attempt (agent.service.standstill)


async def check_interlocks(
    driver: Driver,
    cycle: Cycle,
    rules: InterlockSettings,
    joint: JointSettings | None,
    limits: CycleLimits | None = None,
) -> ControllerStatus:
    """The check right before motion (and all of a dry run): the status, or InterlockError
    (TravelRefused when the cycle's travel does not fit the joint's limits)."""
    limits = limits or CycleLimits()
    why = travel_refusal(driver, cycle)
    if why is not None:
        raise TravelRefused(why)
    try:
        status = await _read_status(driver, limits.status_timeout_s)
    except Exception as exc:  # any failure to read the controller means: do not move
        raise InterlockError(f"cannot read controller status: {str(exc) or 'timeout'}") from exc
    problems = interlock_violations(
        status,
        rules,
        joint,
        start_pose_rad=cycle.start_pose_rad,
        continuous=continuous_joints(cycle),
    )
    if problems:
        raise InterlockError("; ".join(problems))
    return status


def travel_refusal(driver: Driver, cycle: Cycle) -> str | None:
    """Why the cycle's whole travel may not be commanded, or None (drivers.travel)."""
    ramps = driver.ramps(cycle)
    if isinstance(cycle, ExcitationCycle):
        return check_excitation_travel(cycle, ramps)
    return check_backlash_travel(cycle, ramps)


async def run_guarded_cycle(
    driver: Driver,
    cycle: Cycle,
    rules: InterlockSettings,
    joint: JointSettings | None,
    limits: CycleLimits | None = None,
) -> Capture | MultiCapture:
    """Check, run and watch one cycle. Raises InterlockError (nothing moved) or CycleAborted."""
    limits = limits or CycleLimits()
    await check_interlocks(driver, cycle, rules, joint, limits)
    return await guarded_motion(
        driver,
        driver.run_cycle(cycle),
        Motion(
            f"{cycle.controller}/{cycle.joint}",
            cycle.settle_s + cycle.duration_s,
            tuple(cycle.start_pose_rad),
        ),
        rules,
        joint,
        limits,
    )


@dataclass(frozen=True)
class Motion:
    """What the watcher needs of a motion: a name, how long it should take, what it moves."""

    where: str  # controller/joint, in messages
    nominal_s: float
    joints: tuple[str, ...]


async def guarded_motion(
    driver: Driver,
    motion: Coroutine[Any, Any, T],
    what: Motion,
    rules: InterlockSettings,
    joint: JointSettings | None,
    limits: CycleLimits,
) -> T:
    """Run `motion` (already checked) while watching the interlocks every control period; any
    surprise stops it through the driver, waits for the machine to be at rest (or escalates)
    and raises CycleAborted."""
    deadline = asyncio.get_running_loop().time() + (
        what.nominal_s * limits.overrun_factor + limits.overrun_margin_s
    )
    task = asyncio.create_task(motion, name=f"motion {what.where}")
    reason: str | None = None
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=driver.control_period_s)
            if task.done():
                break
            if asyncio.get_running_loop().time() > deadline:
                reason = f"cycle overran {what.nominal_s * limits.overrun_factor:.1f} s"
                break
            try:
                status = await _read_status(driver, limits.status_timeout_s)
            except Exception as exc:  # whatever the driver raises, the motion must stop
                reason = f"controller status lost during motion: {str(exc) or 'timeout'}"
                break
            problems = interlock_violations(status, rules, joint, running=True)
            if problems:
                reason = "; ".join(problems)
                break
    except asyncio.CancelledError:
        reason = "agent shutting down"
        await _stop_and_cancel(driver, task, reason)
        await _at_rest(driver, what, limits)
        raise
    if reason is not None:
        took = await _stop_and_cancel(driver, task, reason)
        if took is not None:  # the driver had to do more than stop (a protective stop)
            reason = f"{reason}; {took}"
        raise await _aborted(driver, what, reason, limits)
    try:
        return task.result()
    except CycleAborted as exc:
        # The driver aborted on its own (and stopped): it still must be seen at rest.
        raise await _aborted(driver, what, _without_prefix(str(exc), what), limits) from exc
    except Exception as exc:
        await _stop_and_cancel(driver, task, str(exc))
        raise await _aborted(driver, what, str(exc), limits) from exc


async def _at_rest(driver: Driver, what: Motion, limits: CycleLimits) -> Standstill:
    return await stop_until_at_rest(
        driver, what.joints, what.where, timeout_s=limits.standstill_timeout_s
    )


async def _aborted(driver: Driver, what: Motion, reason: str, limits: CycleLimits) -> CycleAborted:
    """The abort, once the machine is confirmed at rest (or the escalation is done)."""
    standstill = await _at_rest(driver, what, limits)
    exc = CycleAborted(f"{what.where}: {reason}; {standstill.describe()}")
    exc.standstill = standstill
    return exc


def _without_prefix(message: str, what: Motion) -> str:
    prefix = f"{what.where}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


async def _read_status(driver: Driver, timeout_s: float) -> ControllerStatus:
    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
    # arrives as the read completes, and a cancelled cycle must never keep running.
    async with asyncio.timeout(timeout_s):
        return await driver.read_status()


# How long a stop request may take before the cycle task is cancelled anyway: a driver whose
# stop hangs must not keep the watcher (and the daemon's shutdown) waiting.
STOP_TIMEOUT_S = 2.0


async def _stop_and_cancel(driver: Driver, task: asyncio.Task[Any], reason: str) -> str | None:
    """Stop, then cancel the motion; what the stop took beyond a plain stop (stop_motion)."""
    log.warning("event=cycle_abort reason=%r", reason)
    took: str | None = None
    try:
        async with asyncio.timeout(STOP_TIMEOUT_S):
            took = await driver.stop_motion()
    except Exception as exc:  # the stop must be attempted; a failure is logged loudly
        error = str(exc) or f"{type(exc).__name__}: no answer within {STOP_TIMEOUT_S:g} s"
        log.error("event=stop_motion_failed error=%r action=cancel_cycle", error)
    task.cancel()
    # The cycle's own outcome (cancelled, or the error that made us stop) no longer matters.
    with contextlib.suppress(BaseException):
        await task
    return took
