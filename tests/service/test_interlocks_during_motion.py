"""Safety during every motion: the watcher stops the machine on any surprise, a cycle that
overruns or fails is aborted and stopped, cancelling stops it, and a stop that itself fails is
bounded (G5 in docs/safety.md).

The drivers are the simulated fake controller (drivers/sim/driver.py), subclassed only to
record what the guard asked of them or to play a failing link. Timing bounds are generous: the
machine running the suite has two shared cores."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import pytest

from agent.capture.model import Capture
from agent.config.model import JointSettings
from agent.errors import CycleAborted, DriverError
from agent.service.interlocks import CycleLimits, run_guarded_cycle
from drivers.base import BacklashCycle, ControllerMode
from drivers.travel import CONTINUOUS
from tests.support.service.interlocks import (
    RULES,
    RecordingSim,
    cycle_of,
    inject_production,
    others,
    run,
    sim,
)

# An abort must come within a few control periods (10 ms each; typically it takes under 10 ms).
# The bound leaves room for a loaded two-core machine and stays far below the paced cycle's
# length (SLOW_SCALE below), so a cycle that ran to its end cannot pass for an abort.
ABORT_BOUND_S = 0.25
# The cycle's 1.3 s of motion (0.5 s settle + 2 load turns) paced to 5.2 s of wall time.
SLOW_SCALE = 4.0


class StuckSim(RecordingSim):
    """A controller whose cycle never ends by itself and ignores stop requests (only cancel)."""

    async def run_cycle(self, cycle: BacklashCycle) -> Capture:
        self.run_cycle_calls += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cycle_ending = "cancelled"
            raise
        raise AssertionError("unreachable")


class FailingSim(RecordingSim):
    """A controller whose cycle fails half-way with a driver error."""

    async def run_cycle(self, cycle: BacklashCycle) -> Capture:
        self.run_cycle_calls += 1
        await asyncio.sleep(0.1)
        raise DriverError("servo drive reported overcurrent")


# --- during motion: the watcher stops the machine on any surprise --------------------------------


async def _wait_until_moving(driver: RecordingSim) -> None:
    """Until the controller reports our cycle under way (and the simulation behind it is done)."""
    while driver.run_cycle_calls == 0 or (await driver.read_status()).mode is not (
        ControllerMode.TEST_CYCLE
    ):
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.1)


def _assert_aborted_cleanly(
    driver: RecordingSim, elapsed_s: float, bound_s: float = ABORT_BOUND_S
) -> None:
    assert driver.stop_motion_calls >= 1
    assert driver.cycle_ending in ("cancelled", "stopped")
    assert elapsed_s < bound_s, f"abort took {elapsed_s:.3f} s"


SURPRISES: dict[str, tuple[Callable[[RecordingSim], None], str]] = {
    "permission": (lambda d: d.inject_permission(False), "permission signal is off"),
    "alarm": (lambda d: d.inject_alarm("E-STOP"), "active alarm: E-STOP"),
    "override": (lambda d: d.inject_override(0.7), "speed override is 70 %"),
    "manual": (lambda d: d.inject_mode(ControllerMode.MANUAL), "controller is in manual mode"),
    "fault": (lambda d: d.inject_mode(ControllerMode.FAULT), "controller is in fault mode"),
    "production": (inject_production, "production mode, not stopped for production"),
    "operator": (lambda d: d.inject_operator(True), "an operator is present"),
    "stop_over": (lambda d: d.inject_stop_expected(0.0), "the production stop is over"),
    "status_error": (
        lambda d: setattr(d, "status_failure", "raise"),
        "controller status lost during motion: link lost",
    ),
    "status_hang": (
        lambda d: setattr(d, "status_failure", "hang"),
        "controller status lost during motion: timeout",
    ),
    "status_bug": (
        lambda d: setattr(d, "status_failure", "oserror"),
        "controller status lost during motion: connection reset by peer",
    ),
}


@pytest.mark.parametrize("case", sorted(SURPRISES))
def test_a_surprise_during_motion_stops_it_within_a_few_control_periods(
    case: str, make_joint: Callable[..., JointSettings]
) -> None:
    joint = make_joint()
    driver = sim(joint, time_scale=SLOW_SCALE)
    inject, reason = SURPRISES[case]
    limits = CycleLimits(status_timeout_s=0.1)
    elapsed: list[float] = []

    async def scenario() -> None:
        await driver.connect()
        guarded = asyncio.create_task(
            run_guarded_cycle(driver, cycle_of(joint), RULES, joint, limits)
        )
        await _wait_until_moving(driver)
        inject(driver)
        injected = time.monotonic()
        with pytest.raises(CycleAborted) as err:
            await guarded
        # Up to the stop request; the abort is raised once the machine is confirmed at rest
        # (or, with the status unreadable, once the stop was escalated).
        elapsed.append(driver.stop_motion_times[0] - injected)
        assert reason in str(err.value)
        assert str(err.value).startswith("robot/j1: ")
        assert not others()
        driver.status_failure = None
        # The machine is left standing: no test cycle in progress any more.
        assert (await driver.read_status()).mode is not ControllerMode.TEST_CYCLE

    run(scenario())
    if case == "status_hang":  # the read is given up after status_timeout_s, then stopped
        assert elapsed[0] >= limits.status_timeout_s
        _assert_aborted_cleanly(driver, elapsed[0], limits.status_timeout_s + ABORT_BOUND_S)
    else:
        _assert_aborted_cleanly(driver, elapsed[0])


def test_production_resuming_on_its_own_timeline_aborts_the_cycle(
    make_joint: Callable[..., JointSettings],
) -> None:
    """The plant ends its stop 0.4 s after connect, while the paced cycle needs 5.2 s."""
    joint = make_joint()
    driver = sim(joint, time_scale=SLOW_SCALE, production_runs_s=0.0, stop_length_s=0.4)
    result: dict[str, Any] = {}

    async def scenario() -> None:
        before_connect = time.monotonic()
        await driver.connect()
        with pytest.raises(CycleAborted) as err:
            await run_guarded_cycle(driver, cycle_of(joint), RULES, joint)
        # Production resumed no later than 0.4 s after `before_connect`.
        result["elapsed"] = driver.stop_motion_times[0] - (before_connect + 0.4)
        result["message"] = str(err.value)
        result["mode"] = (await driver.read_status()).mode
        assert not others()

    run(scenario())
    assert "controller is in production mode, not stopped for production" in result["message"]
    assert result["mode"] is ControllerMode.PRODUCTION
    _assert_aborted_cleanly(driver, result["elapsed"])


def test_a_cycle_that_never_ends_is_aborted_at_its_deadline(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = sim(joint, StuckSim)
    short = BacklashCycle(
        controller="robot",
        joint="j1",
        joint_index=1,
        motor_speed_rad_s=2 * math.pi * 100,
        gear_ratio=40.0,
        duration_s=0.15,
        settle_s=0.05,
        sample_rate_hz=500.0,
        encoder_bits=19,
        test_pose_rad=0.0,
        travel_limits=CONTINUOUS,
    )
    limits = CycleLimits(overrun_factor=1.0, overrun_margin_s=0.1)
    deadline_s = (0.15 + 0.05) * 1.0 + 0.1  # nominal length * overrun_factor + margin
    took: list[float] = []

    async def scenario() -> None:
        await driver.connect()
        started = time.monotonic()
        with pytest.raises(CycleAborted, match=r"robot/j1: cycle overran 0\.2 s"):
            await run_guarded_cycle(driver, short, RULES, joint, limits)
        took.append(time.monotonic() - started)
        assert not others()

    run(scenario())
    assert driver.run_cycle_calls == 1
    assert driver.stop_motion_calls >= 1
    assert driver.cycle_ending == "cancelled"  # the stuck cycle was cancelled, not left running
    assert deadline_s <= took[0] < deadline_s + ABORT_BOUND_S


def test_a_cycle_failing_in_the_driver_is_aborted_and_stopped(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = sim(joint, FailingSim)

    async def scenario() -> None:
        await driver.connect()
        with pytest.raises(CycleAborted, match="robot/j1: servo drive reported overcurrent"):
            await run_guarded_cycle(driver, cycle_of(joint), RULES, joint)
        assert not others()

    run(scenario())
    assert driver.stop_motion_calls >= 1


def test_cancelling_the_guarded_cycle_stops_the_motion(
    make_joint: Callable[..., JointSettings],
) -> None:
    """The agent shutting down cancels its cycle: the machine is stopped before it goes."""
    joint = make_joint()
    driver = sim(joint, time_scale=SLOW_SCALE)
    took: list[float] = []

    async def scenario() -> None:
        await driver.connect()
        guarded = asyncio.create_task(run_guarded_cycle(driver, cycle_of(joint), RULES, joint))
        await _wait_until_moving(driver)
        cancelled = time.monotonic()
        guarded.cancel()
        with pytest.raises(asyncio.CancelledError):
            await guarded
        took.append(time.monotonic() - cancelled)
        assert not others()
        assert (await driver.read_status()).mode is ControllerMode.STOPPED

    run(scenario())
    _assert_aborted_cleanly(driver, took[0])


def test_a_quiet_cycle_runs_to_its_end_without_a_stop(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = sim(joint, time_scale=0.2)  # 0.18 s of wall time: the watcher polls throughout

    async def scenario() -> tuple[Capture, ControllerMode]:
        await driver.connect()
        capture = await run_guarded_cycle(driver, cycle_of(joint), RULES, joint)
        assert not others()
        return capture, (await driver.read_status()).mode

    capture, mode = run(scenario())
    assert mode is ControllerMode.STOPPED
    assert driver.stop_motion_calls == 0
    assert driver.cycle_ending == "finished"
    assert capture.meta.joint == "j1"


def test_production_resuming_aborts_within_one_control_period(
    make_joint: Callable[..., JointSettings],
) -> None:
    """The watcher reads the status once per control period of the driver (here 0.1 s, long
    against the machine's scheduling noise): production resuming anywhere in a period is seen at
    the next read, and stop_motion goes out then."""
    joint = make_joint()
    driver = sim(joint, time_scale=SLOW_SCALE, control_period_s=0.1)
    period_s = driver.control_period_s
    delays: list[float] = []

    async def scenario() -> None:
        await driver.connect()
        for offset_s in (0.0, 0.03, 0.07):  # injections at several phases of the period
            driver.inject_mode(None)
            # The abort left the joint where the stop caught it: a person puts it back.
            driver.inject_pose(joint.name, joint.test_pose_rad)
            guarded = asyncio.create_task(run_guarded_cycle(driver, cycle_of(joint), RULES, joint))
            await _wait_until_moving(driver)
            await asyncio.sleep(offset_s)
            driver.inject_mode(ControllerMode.PRODUCTION)
            injected = time.monotonic()
            with pytest.raises(CycleAborted, match="production mode"):
                await guarded
            delays.append(driver.stop_motion_times[-1] - injected)

    run(scenario())
    assert max(delays) <= period_s + 0.04, delays


# --- G5 (docs/safety.md): the stop itself fails -------------------------------------------------


class BrokenStopSim(RecordingSim):
    """A controller whose stop request fails: it raises, or it never answers."""

    stop_failure = "raise"

    async def stop_motion(self) -> None:
        self.stop_motion_times.append(time.monotonic())
        if self.stop_failure == "raise":
            raise DriverError("stop refused: servo bus dead")
        await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("failure", "ending"),
    [("raise", "surprise"), ("hang", "surprise"), ("hang", "shutdown")],
    ids=["stop_raises", "stop_hangs", "stop_hangs_on_shutdown"],
)
def test_a_failing_stop_still_cancels_the_cycle_within_its_bound(
    failure: str,
    ending: str,
    make_joint: Callable[..., JointSettings],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stop is attempted, bounded to STOP_TIMEOUT_S, logged when it fails, and the cycle
    task is cancelled anyway: the watcher is never left stuck behind a dead stop."""
    from agent.service.interlocks import STOP_TIMEOUT_S

    joint = make_joint()
    driver = sim(joint, BrokenStopSim, time_scale=SLOW_SCALE)
    driver.stop_failure = failure
    took: list[float] = []

    async def scenario() -> None:
        await driver.connect()
        guarded = asyncio.create_task(run_guarded_cycle(driver, cycle_of(joint), RULES, joint))
        await _wait_until_moving(driver)
        began = time.monotonic()
        if ending == "surprise":
            driver.inject_permission(False)
            with pytest.raises(CycleAborted, match="permission signal is off"):
                await guarded
        else:
            guarded.cancel()
            with pytest.raises(asyncio.CancelledError):
                await guarded
        took.append(time.monotonic() - began)
        assert not others()

    with caplog.at_level("ERROR", logger="agent.service.interlocks"):
        run(scenario())
    assert len(driver.stop_motion_times) == 1
    assert driver.cycle_ending == "cancelled"  # the cancel ended it, the stop could not
    (line,) = [r.getMessage() for r in caplog.records if "stop_motion_failed" in r.getMessage()]
    if failure == "raise":
        assert "stop refused: servo bus dead" in line
        assert took[0] < ABORT_BOUND_S
    else:
        assert f"no answer within {STOP_TIMEOUT_S:g} s" in line
        assert STOP_TIMEOUT_S <= took[0] < STOP_TIMEOUT_S + ABORT_BOUND_S
    assert "action=cancel_cycle" in line
