"""The motion model of the CAN controller peer (tests/peers/can_controller.py): one cycle's
state, and its physics turned into encoder frames before the stream starts.

The physics is drivers.sim.backlash.simulate_backlash_capture (the simulated fake's, same seeds);
a flood fault re-samples it faster from its sample on. The protocol and the pacing on the bus
stay in can_controller.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agent.capture.encoder import angle_to_counts
from agent.config.model import JointSettings
from drivers.base import BacklashCycle
from drivers.can.dbc import CanProtocol, CycleState
from drivers.sim.backlash import simulate_backlash_capture

from .can_bits import frame_bits, pack_intel


@dataclass(frozen=True)
class Fault:
    kind: str
    cycle: int
    sample: int
    count: int | None = None


@dataclass
class CycleRun:
    number: int
    counter: int
    joint: JointSettings
    rate_hz: float
    samples: int
    settle_s: float
    speed_rad_s: float
    start_pose_rad: float
    state: CycleState = CycleState.PREPARING
    payload: npt.NDArray[np.uint8] | None = None
    bits: npt.NDArray[np.int64] | None = None
    link_rad: npt.NDArray[np.float64] | None = None
    error: str | None = None
    capture_t0: float = 0.0
    settle_end: float = 0.0
    next_sample: int = 0
    sent: int = 0
    dropped: int = 0
    skip: int = 0
    # Sample faults: release pace (flood), held samples (burst, swap), muted stream.
    pace: float = 1.0
    anchor_k: int = 0
    anchor_t: float | None = None
    hold: int = 0
    held: list[int] = field(default_factory=list)  # a burst: sent before the next sample
    swapped: list[int] = field(default_factory=list)  # sent after the next sample
    swap_next: bool = False
    muted_until: float | None = None
    duplicates: int = 0


def prepare(
    c: CycleRun,
    proto: CanProtocol,
    faults: tuple[Fault, ...],
    backlash: dict[str, float],
    noise_counts: float,
    seed: int,
) -> None:
    """The physics of the cycle and its frames, into `c` (run off the transport's thread;
    a failure becomes c.error, which aborts the cycle)."""
    try:
        cycle = BacklashCycle(
            controller="peer",
            joint=c.joint.name,
            joint_index=c.joint.index,
            motor_speed_rad_s=c.speed_rad_s,
            gear_ratio=c.joint.gear_ratio,
            duration_s=(c.samples - 1) / c.rate_hz,
            settle_s=c.settle_s,
            sample_rate_hz=c.rate_hz,
            encoder_bits=c.joint.encoder_bits,
            test_pose_rad=c.start_pose_rad,
        )
        capture = simulate_backlash_capture(
            c.joint,
            cycle,
            backlash.get(c.joint.name, 0.0),
            noise_counts=noise_counts,
            seed=seed,
            machine="peer",
        )
        bits = c.joint.encoder_bits
        motor = capture.channels["motor_counts"].astype(np.int64)
        link_rad = capture.channels["link_pos_rad"]
        for f in faults:
            if f.kind == "flood" and f.cycle == c.number and 0 <= f.sample < c.samples:
                motor, link_rad = sampled_faster(
                    c, cycle, seed, f, motor, link_rad, backlash, noise_counts
                )
        modulus = proto.counter_modulus
        payload = pack_intel(
            proto,
            {
                "MotorCounts": motor,
                "LinkCounts": angle_to_counts(link_rad, bits),
                "Counter": np.arange(c.samples, dtype=np.int64) % modulus,
                "JointIndex": np.full(c.samples, c.joint.index, dtype=np.int64),
            },
        )
        c.bits = frame_bits(proto.encoder.frame_id, payload)
        c.link_rad = np.asarray(link_rad, dtype=np.float64)
        c.payload = payload
    except Exception as exc:  # reported as an aborted cycle, never a silent hang
        c.error = f"{type(exc).__name__}: {exc}"


def sampled_faster(
    c: CycleRun,
    cycle: BacklashCycle,
    seed: int,
    f: Fault,
    motor: npt.NDArray[np.int64],
    link_rad: npt.NDArray[np.float64],
    backlash: dict[str, float],
    noise_counts: float,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """A flood: from sample f.sample on the controller samples the joint f.count times
    faster than it was asked (and streams as fast), so the samples after it are the
    physics at that finer spacing, not the cycle's."""
    x, k = f.count or 10, f.sample
    fast_rate = c.rate_hz * x
    fast = simulate_backlash_capture(
        c.joint,
        dataclasses.replace(
            cycle,
            sample_rate_hz=fast_rate,
            duration_s=k / c.rate_hz + (c.samples - k) / fast_rate,
        ),
        backlash.get(c.joint.name, 0.0),
        noise_counts=noise_counts,
        seed=seed,
        machine="peer",
    )
    rows = k * x + np.arange(c.samples - k)
    motor, link_rad = motor.copy(), np.array(link_rad, dtype=np.float64)
    motor[k:] = fast.channels["motor_counts"][rows].astype(np.int64)
    link_rad[k:] = fast.channels["link_pos_rad"][rows]
    return motor, link_rad
