"""Sample faults on the UR RTDE stream: repeated-timestamp, backwards, flooding and bursting
packages, against the UR controller emulator and the real ur_rtde clients in the
driver's worker. Duplicated packages (byte for byte) are sent during
tests/drivers/ur_rtde/test_driver.py::test_full_cycle_matches_the_simulated_fake, which compares a
whole capture with the truth anyway: ur_rtde stores the same values again, nothing is lost or added.

An RTDE data package carries the controller's `timestamp`, one control period apart: a repeated
or backwards timestamp is the duplicate / out-of-order case. Each scenario spoils the stream 0.5 s
into the motion, then counts what the driver let through: a capture it returned is compared
sample for sample with the same cycle on the simulated fake (the emulator's physics, same seed),
and every sample that differs is a record lost. The driver must either abort (and the stop must
reach the controller) or return a capture equal to the truth; the count must be 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agent.capture.model import Capture
from agent.config.model import ControllerSettings, JointSettings
from agent.errors import CycleAborted, DriverError
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from drivers.sim.driver import SimDriver
from drivers.sim.settings import SimJointSettings, SimSettings
from drivers.ur_rtde.driver import UrRtdeDriver
from tests.peers.ur_controller import UrEmulator
from tests.peers.ur_controller.harness import (
    BACKLASH_RAD,
    DRIVER_LOSSES,
    FAST,
    MISSED,
    SEED,
    emulator_args,
    run,
    setup,
    wait_until,
)
from tests.support.summary import fault


async def _cycle(
    ctrl: ControllerSettings, joint: JointSettings, emu: UrEmulator, action: dict[str, Any]
) -> tuple[Capture | None, str]:
    """A guarded cycle with `action` armed 0.5 s into the motion: the capture, or None and the
    abort's message."""
    driver = UrRtdeDriver(ctrl.name, ctrl.settings, ctrl.joints)
    await driver.connect()
    emu.call("on_motion", delay_s=0.5, action=action)
    try:
        capture = await run_guarded_cycle(
            driver, backlash_cycle(ctrl, joint), ctrl.interlocks, joint
        )
        assert isinstance(capture, Capture)
        return capture, ""
    except (CycleAborted, DriverError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        await driver.close()


def _not_in_truth(capture: Capture, ctrl: ControllerSettings, joint: JointSettings) -> int:
    """Samples of `capture` that the emulator's first physics run did not produce (the simulated
    fake's first run: same model, same seed)."""
    sim = SimDriver(
        ctrl.name,
        SimSettings(seed=SEED, joints={joint.name: SimJointSettings(BACKLASH_RAD)}),
        ctrl.joints,
    )

    async def reference() -> Capture:
        await sim.connect()
        ref = await sim.run_cycle(backlash_cycle(ctrl, joint))
        assert isinstance(ref, Capture)
        return ref

    ref = run(reference())
    n = min(len(capture), len(ref))
    # The positions may differ by a constant (the start pose): compare the steps between samples.
    bad = (
        np.abs(
            np.diff(capture.channel("motor_pos_rad")[:n])
            - np.diff(ref.channel("motor_pos_rad")[:n])
        )
        > 1e-9
    )
    bad_t = np.abs(capture.time_s[:n] - ref.time_s[:n]) > 1e-9
    return int(np.count_nonzero(bad) + np.count_nonzero(bad_t[1:]) + abs(len(capture) - len(ref)))


def _scenario(
    tmp_path: Path, name: str, action: dict[str, Any], **settings: Any
) -> tuple[Capture | None, str, dict[str, Any], int]:
    """Run it, count the records lost, put the row in the summary: (capture, abort, state, N).

    A cycle the machine's load ended before the fault was played (a run of lost packages
    longer than the driver bridges, seen beside a loaded test series) is run again, at most
    twice: the fault, not the load, is what the test judges.
    """
    host, path, ctrl, joint = setup(tmp_path, **FAST, **settings)
    for attempt in range(3):
        with UrEmulator(host, *emulator_args(path)) as emu:
            capture, message = run(_cycle(ctrl, joint, emu, action), 120.0)
            state = wait_until(emu, lambda s: not s["moving"] and not s["script_running"])
        played = state["stream_faults"].get(action.get("kind", ""), 0) > 0
        if played or MISSED not in message or attempt == 2:
            break
        print(f"attempt {attempt + 1}: ended by the load before the fault: {message}")
    lost = 0 if capture is None else _not_in_truth(capture, ctrl, joint)
    fault(f"UR: {name}", records_lost=lost)
    assert lost == 0, f"{lost} samples of the capture are not the controller's ({message})"
    return capture, message, state, lost


def _stopped_by_the_driver(state: dict[str, Any]) -> None:
    after = state["commands"][len(state["commands"]) - state["commands"][::-1].index("speedj") :]
    assert after[:2] == ["speed_stop", "stopj"], state["events"]
    assert not state["moving"] and state["watchdog_trips"] == 0


def test_a_repeated_timestamp_with_new_data_aborts(tmp_path: Path) -> None:
    # The controller's clock stalls for 3 packages while the data moves on, then runs on 3
    # periods behind: without a check those packages vanish and the rest is mislabelled.
    capture, message, state, _ = _scenario(
        tmp_path,
        "repeated timestamps (clock stalls)",
        {"op": "stream_fault", "kind": "repeat_timestamp", "n": 3},
    )
    assert capture is None and "repeated" in message, message
    _stopped_by_the_driver(state)


def test_a_timestamp_going_back_aborts(tmp_path: Path) -> None:
    capture, message, state, _ = _scenario(
        tmp_path,
        "out-of-order samples (timestamp back 5 periods)",
        {"op": "stream_fault", "kind": "clock_back", "n": 5},
    )
    assert capture is None and "went back" in message, message
    _stopped_by_the_driver(state)


def test_a_flood_of_packages_between_the_ticks_aborts(tmp_path: Path) -> None:
    capture, message, state, _ = _scenario(
        tmp_path,
        "flood (5 packages a period for 20 periods)",
        {"op": "stream_fault", "kind": "flood", "n": 20, "factor": 5},
    )
    assert capture is None and "500 Hz" in message, message
    _stopped_by_the_driver(state)


def test_a_burst_of_packages_in_one_write_loses_them_and_aborts(tmp_path: Path) -> None:
    n = 4
    # ur_rtde's receive interface keeps only the newest of what one read brings: the packages
    # held back and sent together are lost to the capture, and the driver says so.
    capture, message, state, _ = _scenario(
        tmp_path,
        f"burst ({n} packages in one write)",
        {"op": "stream_fault", "kind": "burst", "n": n},
        **DRIVER_LOSSES,
    )
    assert capture is None and MISSED in message, message
    _stopped_by_the_driver(state)
