"""Sample faults on the CAN encoder stream, through the socketcand peer.

The peer's controller (tests/peers/can_controller.py) streams the cycle's physics as encoder
frames and spoils them at a given sample: frames that stop while the status goes on (a stall),
frames at ten times the cycle's rate (a flood), a burst the bus carries back to back, a frame
sent twice, two frames swapped. Each scenario counts what the driver let through: a capture it
returned is compared sample for sample with the same cycle on the simulated fake (the peer's
physics and seeds), and every sample that differs is a record lost. The driver must abort with
a message naming the fault (and STOP must reach the controller), or repair the stream where
that is exact (a byte-for-byte duplicate, a burst); the count must be 0 either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.capture.model import Capture
from agent.config.load import load_config
from agent.config.model import ControllerSettings
from agent.errors import CycleAborted
from agent.kinds.backlash.kind import backlash_cycle
from agent.service.interlocks import run_guarded_cycle
from drivers.can.driver import CanDriver
from tests.peers.can_harness import Peer, config_text, peer_args, run, sim_captures
from tests.support.summary import fault

Start = Callable[..., tuple[Peer, ControllerSettings]]


@pytest.fixture
def socketcand(tmp_path: Path) -> Iterator[Start]:
    """Start a socketcand peer with peer options; gives it and the controller config for it."""
    config = tmp_path / "agent.yaml"
    config.write_text(config_text("socketcand", "can0", 29536))
    peers: list[Peer] = []

    def start(*extra: str) -> tuple[Peer, ControllerSettings]:
        peer = Peer("tests.peers.socketcand_peer", peer_args(config, *extra))
        peers.append(peer)
        port = peer.wait("listening")["port"]
        ctrl = load_config(config).controllers[0]
        return peer, dataclasses.replace(
            ctrl, settings=dataclasses.replace(ctrl.settings, port=port)
        )

    yield start
    for peer in peers:
        peer.stop()


def _not_in_truth(capture: Capture, truth: Capture) -> int:
    """Samples of `capture` the controller did not produce (a count apart at most: the
    MotorSpeed signal's 1e-5 rad/s resolution), plus any sample too many or too few."""
    n = min(len(capture), len(truth))
    counts = np.abs(capture.channel("motor_counts")[:n] - truth.channel("motor_counts")[:n]) > 1
    tick_rad = 2 * np.pi / 2**19
    links = (
        np.abs(capture.channel("link_pos_rad")[:n] - truth.channel("link_pos_rad")[:n])
        > 1.5 * tick_rad
    )
    times = np.abs(capture.time_s[:n] - truth.time_s[:n]) > 1e-12
    return int(np.count_nonzero(counts | links | times)) + abs(len(capture) - len(truth))


def _scenario(
    socketcand: Start,
    name: str,
    spoil: str,
    *,
    load_turns: float | None = None,
    peer_options: tuple[str, ...] = (),
    **settings: Any,
) -> tuple[Peer, Capture | None, str, CanDriver]:
    """One guarded cycle of j1 with the fault `spoil`; the row in the summary, N asserted 0."""
    peer, ctrl = socketcand(f"--fault={spoil}", *peer_options)
    ctrl = dataclasses.replace(ctrl, settings=dataclasses.replace(ctrl.settings, **settings))
    if load_turns is not None:
        j1 = ctrl.joints[0]
        longer = dataclasses.replace(j1.backlash_cycle, load_turns=load_turns)
        ctrl = dataclasses.replace(
            ctrl, joints=(dataclasses.replace(j1, backlash_cycle=longer), *ctrl.joints[1:])
        )
    joint = ctrl.joints[0]
    driver = CanDriver(ctrl.name, ctrl.settings, ctrl.joints)

    async def cycle() -> tuple[Capture | None, str]:
        await driver.connect()
        try:
            capture = await run_guarded_cycle(
                driver, backlash_cycle(ctrl, joint), ctrl.interlocks, joint
            )
            assert isinstance(capture, Capture)
            return capture, ""
        except CycleAborted as exc:
            return None, str(exc)
        finally:
            await driver.close()

    capture, message = run(cycle(), timeout=40.0)
    lost = 0 if capture is None else _not_in_truth(capture, sim_captures(ctrl, ["j1"])[0])
    fault(f"CAN: {name}", records_lost=lost)
    assert lost == 0, f"{lost} samples of the capture are not the controller's"
    # Waited for, not read once: the peer prints the event after the frames, and its line may
    # reach our reader thread after the driver has the whole capture (seen under load).
    peer.wait("fault", 20.0)
    return peer, capture, message, driver


def _stopped_mid_capture(peer: Peer, driver: CanDriver) -> None:
    assert peer.wait("stop", 5.0)["cycle_state"] == "capturing"
    assert peer.wait("cycle_aborted", 5.0)["cycle"] == 1
    assert driver.stop_commands_sent >= 1


def test_a_duplicated_frame_is_dropped_and_the_capture_is_the_truth(socketcand: Start) -> None:
    peer, capture, message, driver = _scenario(socketcand, "duplicate samples", "dup@1:150")
    assert capture is not None, message
    assert capture.meta.extra["duplicate_frames_dropped"] == 1
    assert capture.meta.extra["lost_frames"] == 0 and len(capture) == 401
    assert peer.wait("cycle_done")["sent"] == 402 and driver.stop_commands_sent == 0


def test_a_duplicated_frame_aborts_when_so_configured(socketcand: Start) -> None:
    peer, capture, message, driver = _scenario(
        socketcand,
        "duplicate samples, duplicate_frames: abort",
        "dup@1:150",
        duplicate_frames="abort",
    )
    assert capture is None and "encoder frame 150 received twice at sample 151" in message
    _stopped_mid_capture(peer, driver)


def test_swapped_frames_abort_the_cycle(socketcand: Start) -> None:
    peer, capture, message, driver = _scenario(
        socketcand, "out-of-order samples (two frames swapped)", "swap@1:150"
    )
    assert capture is None, "a capture with reordered samples was accepted"
    assert "counter jumped from 149 to 151 at sample 150 (lost, or arriving out of order)" in (
        message
    )
    _stopped_mid_capture(peer, driver)


def test_a_flood_of_frames_aborts_the_cycle(socketcand: Start) -> None:
    # From sample 100 on the frames leave at 5,000 a second (the bus carries that): the
    # samples would be stamped ten times too far apart.
    peer, capture, message, driver = _scenario(
        socketcand, "flood (10x the rate)", "flood@1:100x10", load_turns=10.0
    )
    assert capture is None and "arrive faster than the cycle's 500 Hz" in message, message
    _stopped_mid_capture(peer, driver)


def test_a_burst_the_bus_carries_is_taken_whole(socketcand: Start) -> None:
    # 50 samples (0.1 s) held back and then sent back to back: late, but each in its place.
    peer, capture, message, driver = _scenario(
        socketcand, "burst (50 frames back to back)", "burst@1:100x50"
    )
    assert capture is not None, message
    assert capture.meta.extra["lost_frames"] == 0 and driver.stop_commands_sent == 0
    assert peer.wait("cycle_done")["dropped"] == 0


def test_a_stream_that_stops_while_the_status_goes_on_aborts(socketcand: Start) -> None:
    # The link and the status frames stay up (CAPTURING), only the samples stop.
    peer, capture, message, driver = _scenario(
        socketcand,
        "stalled samples (link and status up)",
        "mute@1:200",
        load_turns=10.0,
        # The controller's own watchdog (agent heartbeat silent 0.5 s) would race the agent's
        # stall detection (0.5 s) on a loaded machine; given 3 s, the stop is the agent's.
        peer_options=("--watchdog=3",),
    )
    assert capture is None and "encoder stream stalled for" in message, message
    assert "after sample 200 of 2001" in message
    _stopped_mid_capture(peer, driver)


def test_a_stream_that_never_starts_while_the_status_says_capturing_aborts(
    socketcand: Start,
) -> None:
    # Muted from the first sample: the controller says CAPTURING (the joint is at speed), and
    # the first-frame deadline (settle + prepare_timeout_s, 30 s) must not be what ends it.
    peer, capture, message, driver = _scenario(
        socketcand, "no samples at all (status says capturing)", "mute@1:0", load_turns=10.0
    )
    assert capture is None and "capturing for" in message and "no encoder frame came" in message
    _stopped_mid_capture(peer, driver)
