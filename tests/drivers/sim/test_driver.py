"""The simulated fake controller: its plant timeline, its captures, and the physics behind them."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from agent.capture.encoder import unwrap_counts
from agent.capture.model import Capture, motor_speed_rad_s
from agent.config.model import ControllerSettings, JointSettings
from agent.errors import CycleAborted, DriverError
from agent.estimation.backlash.fit import fit_backlash
from agent.kinds.backlash.kind import backlash_cycle
from drivers.base import (
    BacklashCycle,
    Capability,
    ControllerMode,
    Driver,
    available_drivers,
    load_driver_class,
)
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointSettings, SimSettings

LOAD_TURN_S = 0.4  # T_f at 100 motor rev/s through 40:1 (tests/conftest.py)


def cycle_of(joint: JointSettings) -> BacklashCycle:
    return backlash_cycle(ControllerSettings(name="robot", driver="sim", joints=(joint,)), joint)


def driver_for(
    joints: tuple[JointSettings, ...], backlash_rad: dict[str, float] | None = None, **kw: Any
) -> SimDriver:
    truth = {name: SimJointSettings(backlash_rad=b) for name, b in (backlash_rad or {}).items()}
    return SimDriver("robot", SimSettings(joints=truth, **kw), joints)


def run_cycles(driver: SimDriver, joints: tuple[JointSettings, ...]) -> list[Capture]:
    async def scenario() -> list[Capture]:
        await driver.connect()
        try:
            return [await driver.run_cycle(cycle_of(j)) for j in joints]
        finally:
            await driver.close()

    return asyncio.run(scenario())


# --- what the controller says -----------------------------------------------------------------


def test_status_follows_the_production_timeline(make_joint: Callable[..., JointSettings]) -> None:
    """Production for production_runs_s after connect, then stopped, then production again."""
    driver = driver_for((make_joint(),), production_runs_s=0.3, stop_length_s=0.5)
    seen: list[tuple[float, ControllerMode, float | None]] = []

    async def scenario() -> None:
        assert (await driver.read_status()).mode is ControllerMode.DISCONNECTED
        await driver.connect()
        start = time.monotonic()
        for at_s in (0.0, 0.55, 1.05):
            await asyncio.sleep(max(0.0, start + at_s - time.monotonic()))
            status = await driver.read_status()
            seen.append((time.monotonic() - start, status.mode, status.stop_expected_s))
        await driver.close()
        assert (await driver.read_status()).mode is ControllerMode.DISCONNECTED

    asyncio.run(scenario())
    (t0, m0, s0), (t1, m1, s1), (t2, m2, s2) = seen
    # The windows leave 0.25 s either side for a loaded machine.
    assert t0 < 0.3 and m0 is ControllerMode.PRODUCTION and s0 is None
    assert 0.3 < t1 < 0.8 and m1 is ControllerMode.STOPPED
    assert s1 is not None and 0.0 < s1 <= 0.5  # how much of the stop is left
    assert t2 > 0.8 and m2 is ControllerMode.PRODUCTION and s2 is None


def test_the_plant_side_can_be_injected(make_joint: Callable[..., JointSettings]) -> None:
    joint = make_joint(test_pose_rad=0.2)
    settings = SimSettings(joints={"j1": SimJointSettings(pose_rad=0.2)})
    driver = SimDriver("robot", settings, (joint,))

    async def scenario() -> None:
        await driver.connect()
        status = await driver.read_status()
        assert status.mode is ControllerMode.STOPPED  # default: production already stopped
        assert status.permission and status.alarms == () and status.speed_override == 1.0
        assert dict(status.joint_positions_rad) == {"j1": 0.2}
        driver.inject_permission(False)
        driver.inject_alarm("E-STOP", "door open")
        driver.inject_override(0.4)
        driver.inject_pose("j1", -1.0)
        driver.inject_mode(ControllerMode.MANUAL)
        status = await driver.read_status()
        assert status.mode is ControllerMode.MANUAL
        assert not status.permission
        assert status.alarms == ("E-STOP", "door open")
        assert status.speed_override == 0.4
        assert dict(status.joint_positions_rad) == {"j1": -1.0}
        driver.inject_mode(None)  # back to the production timeline
        assert (await driver.read_status()).mode is ControllerMode.STOPPED

    asyncio.run(scenario())


def test_a_cycle_shows_as_test_cycle_and_stops_on_request(
    make_joint: Callable[..., JointSettings],
) -> None:
    joint = make_joint()
    driver = driver_for((joint,), time_scale=4.0)  # 1.3 s of motion paced to 5.2 s

    async def scenario() -> float:
        await driver.connect()
        cycle = asyncio.create_task(driver.run_cycle(cycle_of(joint)))
        while (await driver.read_status()).mode is not ControllerMode.TEST_CYCLE:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)
        asked = time.monotonic()
        await driver.stop_motion()
        with pytest.raises(CycleAborted, match="robot/j1: motion stopped on request"):
            await cycle
        took = time.monotonic() - asked
        assert (await driver.read_status()).mode is ControllerMode.STOPPED
        return took

    took = asyncio.run(scenario())
    assert took < 0.5  # the pacing loop wakes on the request, not at the end of the cycle
    assert driver.stop_motion_calls == 1


def test_stop_motion_is_safe_at_any_time_and_close_stops(
    make_joint: Callable[..., JointSettings],
) -> None:
    driver = driver_for((make_joint(),))

    async def scenario() -> None:
        await driver.stop_motion()  # before connect, idle: harmless
        await driver.connect()
        await driver.stop_motion()
        await driver.stop_motion()
        await driver.close()

    asyncio.run(scenario())
    assert driver.stop_motion_calls == 4  # close() stops motion too


def test_a_cycle_needs_a_connection_and_a_known_joint(
    make_joint: Callable[..., JointSettings],
) -> None:
    known, unknown = make_joint("j1"), make_joint("j9", 9)
    driver = driver_for((known,))

    async def scenario() -> None:
        with pytest.raises(DriverError, match="robot: not connected"):
            await driver.run_cycle(cycle_of(known))
        await driver.connect()
        with pytest.raises(DriverError, match="robot: no joint named 'j9'"):
            await driver.run_cycle(cycle_of(unknown))

    asyncio.run(scenario())


def test_the_sim_driver_is_installed_with_every_capability() -> None:
    assert "sim" in available_drivers()
    cls = load_driver_class("sim")
    assert cls is SimDriver and issubclass(cls, Driver)
    for cap in (
        Capability.CYCLES,
        Capability.MOTOR_ENCODER,
        Capability.LINK_ENCODER,
        Capability.CURRENT,
        Capability.TOOLPATH_STREAMING,
    ):
        assert cap in cls.capabilities
    assert cls.settings_type is SimSettings
    assert isinstance(SimDriver("robot", None, ()).settings, SimSettings)


# --- captures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("load_turns", "sample_rate_hz", "bits"),
    [(2.0, 500.0, 19), (3.0, 1000.0, 16), (2.5, 2000.0, 23)],
)
def test_a_capture_carries_the_cycle_and_exact_encoder_counts(
    load_turns: float, sample_rate_hz: float, bits: int, make_joint: Callable[..., JointSettings]
) -> None:
    joint = make_joint(load_turns=load_turns, sample_rate_hz=sample_rate_hz, encoder_bits=bits)
    (capture,) = run_cycles(driver_for((joint,), {"j1": 1e-3}), (joint,))

    assert set(capture.channels) == {"motor_counts", "motor_pos_rad", "link_pos_rad", "current_a"}
    meta = capture.meta
    assert (meta.machine, meta.joint, meta.cycle) == ("robot", "j1", "backlash")
    assert meta.commanded_speed_rad_s == pytest.approx(2 * math.pi * 100.0)
    assert meta.gear_ratio == 40.0
    assert meta.encoder_bits == bits
    assert meta.sample_rate_hz == sample_rate_hz
    assert meta.load_turn_period_s == pytest.approx(LOAD_TURN_S)
    # Both ends of the captured turns are samples.
    assert len(capture) == round(load_turns * LOAD_TURN_S * sample_rate_hz) + 1
    assert np.allclose(np.diff(capture.time_s), 1.0 / sample_rate_hz)

    counts = capture.channels["motor_counts"]
    assert np.all(counts == np.round(counts))
    assert counts.min() >= 0 and counts.max() <= 2**bits - 1
    assert counts.max() > 0.9 * 2**bits  # the single-turn value wraps, many times
    assert np.array_equal(unwrap_counts(counts, bits), capture.channels["motor_pos_rad"])
    # The unwrapped angle runs at the commanded speed; the load at 1/40 of it.
    span_s = capture.time_s[-1] - capture.time_s[0]
    motor = capture.channels["motor_pos_rad"]
    link = capture.channels["link_pos_rad"]
    assert (motor[-1] - motor[0]) / span_s == pytest.approx(2 * math.pi * 100.0, rel=0.01)
    assert (link[-1] - link[0]) / span_s == pytest.approx(2 * math.pi * 100.0 / 40.0, rel=0.01)


def test_captures_are_deterministic_for_a_seed(make_joint: Callable[..., JointSettings]) -> None:
    joint = make_joint()
    first = run_cycles(driver_for((joint,), {"j1": 1e-3}, seed=5), (joint, joint))
    again = run_cycles(driver_for((joint,), {"j1": 1e-3}, seed=5), (joint, joint))
    other = run_cycles(driver_for((joint,), {"j1": 1e-3}, seed=6), (joint,))
    for a, b in zip(first, again, strict=True):
        for name in a.channels:
            assert np.array_equal(a.channels[name], b.channels[name]), name
        assert a.meta.extra == b.meta.extra
    # Each cycle draws fresh encoder noise; another seed gives another capture.
    assert first[0].meta.extra["seed"] != first[1].meta.extra["seed"]
    assert not np.array_equal(first[0].channels["motor_counts"], first[1].channels["motor_counts"])
    assert not np.array_equal(first[0].channels["motor_counts"], other[0].channels["motor_counts"])


# --- the physics: the signature of Giovannitti et al. 2022 -------------------------------------


def _ripple_free_residual(capture: Capture) -> np.ndarray:
    """Motor-speed residual r = v - v_t (eq. 11) without offset and load-turn harmonics 1-3.

    Gravity leaves a once-per-turn ripple on the speed that is itself anti-periodic over half a
    turn (cos(theta + pi) = -cos(theta)); it must go or it would pass for an alternating signature.
    """
    assert capture.meta.commanded_speed_rad_s is not None
    t = capture.time_s
    r = motor_speed_rad_s(capture) - capture.meta.commanded_speed_rad_s
    w = 2 * math.pi / LOAD_TURN_S
    columns = [np.ones_like(t)]
    for k in (1, 2, 3):
        columns += [np.sin(k * w * t), np.cos(k * w * t)]
    basis = np.column_stack(columns)
    coef, *_ = np.linalg.lstsq(basis, r, rcond=None)
    return np.asarray(r - basis @ coef)


def test_the_signature_grows_strictly_with_backlash(
    make_joint: Callable[..., JointSettings],
) -> None:
    """Fitted |A| over Giovannitti et al. 2022's range: a larger gap, a longer fall, a harder
    strike."""
    backlash_rad = (0.0, 3e-4, 6e-4, 1.2e-3, 2.1e-3)
    joints = tuple(make_joint(f"j{i}", i, load_turns=6.0) for i in range(1, len(backlash_rad) + 1))
    driver = driver_for(joints, {j.name: b for j, b in zip(joints, backlash_rad, strict=True)})
    amplitudes = [fit_backlash(c).amplitude_rad_s for c in run_cycles(driver, joints)]
    assert all(a < b for a, b in itertools.pairwise(amplitudes)), amplitudes
    assert amplitudes[0] < 0.01  # a healthy joint: noise only
    assert amplitudes[1] > 0.5  # the smallest backlash stands far above it


def test_two_oscillations_per_load_turn_with_alternating_sign(
    make_joint: Callable[..., JointSettings],
) -> None:
    """Giovannitti et al. 2022's signature, checked on the physics rather than on a fitted model.

    Gravity's torque on the horizontal load, m g r cos(theta_l), changes sign twice per load turn
    (theta_l = pi/2 and 3 pi/2). Each time the load falls across the gap and strikes the other
    tooth flank: the impact rings the joint's resonance, a damped oscillation on motor speed.
    So (1) the oscillation energy sits right after each gravity reversal, in both halves of the
    turn, and (2) the two strikes hit opposite flanks, so the ringing half a turn later is the
    same oscillation with the opposite sign: r(t + T_f/2) = -r(t), a correlation near -1.
    A healthy joint has no gap, no strike, and no such correlation.
    """
    joint = make_joint(load_turns=6.0)
    (worn,) = run_cycles(driver_for((joint,), {"j1": 1.2e-3}), (joint,))
    (healthy,) = run_cycles(driver_for((joint,), {"j1": 0.0}), (joint,))
    half = round(LOAD_TURN_S / 2 * 500.0)  # samples in half a load turn

    r = _ripple_free_residual(worn)
    assert np.corrcoef(r[:-half], r[half:])[0, 1] < -0.9
    r0 = _ripple_free_residual(healthy)
    assert abs(np.corrcoef(r0[:-half], r0[half:])[0, 1]) < 0.3
    assert np.std(r) > 50 * np.std(r0)

    # Where the energy is: load angle since the last gravity reversal, and which reversal.
    link = worn.channels["link_pos_rad"]
    since_reversal = np.mod(link - math.pi / 2, math.pi)
    after_first = np.mod(link - math.pi / 2, 2 * math.pi) < math.pi  # after pi/2, else 3 pi/2
    energy = r**2
    # The ringing follows each reversal (the later, the larger the gap) and dies out within a
    # quarter turn; noise alone would spread evenly (half the energy in that quarter turn).
    early = since_reversal < math.pi / 2
    assert energy[early].sum() > 0.95 * energy.sum()
    share_first = energy[after_first].sum() / energy.sum()
    assert 0.35 < share_first < 0.65  # one oscillation after each reversal, both alike
