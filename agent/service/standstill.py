"""After a stop: is the machine at rest? A cycle is not over until that is confirmed.

A stop request that the controller acknowledged is not yet a machine at rest: a drive can be
ramping down, a brake can slip, a request can have been lost with the link. So after every abort
the joints the cycle moved are watched until each one's speed (as the controller reports it, or
from successive positions) stays below a threshold for two reads running, within a bounded time.
When that does not happen, the stop is escalated: the stop is requested again, then the
protocol's protective stop where it has one (UR: triggerProtectiveStop), and the failure is
logged as an error a person must act on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agent.logfmt import kv
from drivers.base import ControllerStatus, Driver

log = logging.getLogger(__name__)

AT_REST_RAD_S = 0.005  # below this every watched joint counts as standing still
CONFIRM_TIMEOUT_S = 2.0  # per attempt: a joint at 2 rad/s stopping at 1 rad/s^2 is at rest by then
_POLL_S = 0.05
_STATUS_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Standstill:
    """What the check after a stop found."""

    confirmed: bool
    positions_rad: Mapping[str, float] = field(default_factory=dict)
    waited_s: float = 0.0
    escalations: tuple[str, ...] = ()  # what was done beyond the first stop
    problem: str = ""  # why it is not confirmed

    def describe(self) -> str:
        where = ", ".join(f"{k} at {v:.4f} rad" for k, v in self.positions_rad.items())
        if self.confirmed:
            tail = f" after {'; '.join(self.escalations)}" if self.escalations else ""
            return f"at rest ({where}){tail}"
        done = "; ".join(self.escalations) or "nothing more"
        return (
            f"NOT confirmed at rest within {self.waited_s:.1f} s ({self.problem}; then: "
            f"{done}): a person must check the machine"
        )


async def confirm_standstill(
    driver: Driver,
    joints: Iterable[str],
    *,
    at_rest_rad_s: float = AT_REST_RAD_S,
    timeout_s: float = CONFIRM_TIMEOUT_S,
) -> Standstill:
    """Watch `joints` until they stand still (two reads running), or until timeout_s."""
    names = list(joints)
    began = time.monotonic()
    previous: tuple[float, ControllerStatus] | None = None
    still_reads = 0
    problem = "no status read"
    last: ControllerStatus | None = None
    while True:
        try:
            async with asyncio.timeout(_STATUS_TIMEOUT_S):
                status = await driver.read_status()
        except Exception as exc:  # an unreadable controller is not a confirmed one
            problem = f"status unreadable: {str(exc) or type(exc).__name__}"
            status = None
        now = time.monotonic()
        if status is not None:
            last = status
            speeds = _speeds(names, status, previous, now)
            if speeds is None:
                problem = "joint position unknown"
                still_reads = 0
            else:
                fastest = max(speeds.values(), default=0.0)
                if fastest < at_rest_rad_s:
                    still_reads += 1
                else:
                    still_reads = 0
                    problem = f"still moving at {fastest:.4f} rad/s"
            previous = (now, status)
            if still_reads >= 2:
                return Standstill(True, _positions(names, status), now - began)
        if now - began > timeout_s:
            positions = _positions(names, last) if last is not None else {}
            return Standstill(False, positions, now - began, problem=problem)
        await asyncio.sleep(_POLL_S)


def _speeds(
    names: list[str],
    status: ControllerStatus,
    previous: tuple[float, ControllerStatus] | None,
    now: float,
) -> dict[str, float] | None:
    reported = status.joint_speeds_rad_s
    if reported is not None and all(n in reported for n in names):
        return {n: abs(reported[n]) for n in names}
    if previous is None:
        # The first read only gives positions: the next one gives a speed.
        return {n: float("inf") for n in names} if names else {}
    then, before = previous
    dt = max(now - then, 1e-6)
    out = {}
    for n in names:
        a, b = before.joint_positions_rad.get(n), status.joint_positions_rad.get(n)
        if a is None or b is None:
            return None
        out[n] = abs(b - a) / dt
    return out


def _positions(names: list[str], status: ControllerStatus) -> dict[str, float]:
    return {n: status.joint_positions_rad[n] for n in names if n in status.joint_positions_rad}


async def stop_until_at_rest(
    driver: Driver, joints: Iterable[str], where: str, *, timeout_s: float = CONFIRM_TIMEOUT_S
) -> Standstill:
    """After the first stop: confirm rest, else stop again, protective stop, confirm again."""
    names = list(joints)
    first = await confirm_standstill(driver, names, timeout_s=timeout_s)
    if first.confirmed:
        return first
    log.error(kv("standstill_not_confirmed", where=where, problem=first.problem,
                 action="stop_again"))  # fmt: skip
    done = []
    with contextlib.suppress(Exception):
        async with asyncio.timeout(_STATUS_TIMEOUT_S * 2):
            await driver.stop_motion()
            done.append("stop requested again")
    try:
        async with asyncio.timeout(_STATUS_TIMEOUT_S * 2):
            escalated = await driver.protective_stop()
    except Exception as exc:
        escalated = f"protective stop request failed: {str(exc) or type(exc).__name__}"
    done.append(escalated or "no protective-stop request in this protocol")
    second = await confirm_standstill(driver, names, timeout_s=timeout_s)
    result = Standstill(
        second.confirmed,
        second.positions_rad,
        first.waited_s + second.waited_s,
        tuple(done),
        second.problem,
    )
    if not result.confirmed:
        log.error(kv("standstill_failed", where=where, detail=result.describe()))
    return result
