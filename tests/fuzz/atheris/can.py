"""atheris target `can_frames`: CAN frame payloads through the DBC decoders and BusLink.

The first input byte picks what the rest is:
  0: one payload straight into a decoder (byte 1 picks the message: status, joint position,
     encoder, and the three the agent only sends), as tests/fuzz/test_fuzz_can.py does;
  1: a burst of frames, each record `id choice, n, n data bytes` (the id one of the DBC's or a
     foreign one), dispatched by BusLink as its reader thread does, into an armed capture.

Property: a decoder returns finite numbers or raises CanFrameError naming the message and its
id; dispatch never raises, and what the link keeps is valid (a status of finite numbers, finite
positions, counts inside the encoder's range, never more samples than asked for).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import can
import numpy as np

from drivers.can.dbc import CanFrameError, encode
from drivers.can.link import BusLink
from drivers.can.recorder import CaptureRecorder
from tests.fuzz.atheris.oracle import Target, check, expect_place, guarded
from tests.fuzz.cases.can import CYCLE_COUNTER, JOINT, PROTO, SAMPLES, decode_case

ROLES = ("status", "joint_position", "encoder", "command", "cycle_setup", "cycle_length")
IDS = tuple(getattr(PROTO, r).frame_id for r in ROLES)


def _link() -> BusLink:
    bus = can.Bus(interface="virtual", channel="jha-atheris", receive_own_messages=False)
    return BusLink(bus, PROTO, lambda: None, "atheris")


LINK = _link()


def check_link(link: BusLink, recorder: CaptureRecorder) -> None:
    """What the link keeps after any frames: the invariants the driver relies on."""
    status = link.status
    if status is not None:
        for name, value in vars(status).items():
            check(math.isfinite(float(value)), f"status {name} = {value!r}")
    for index, reading in link.positions.items():
        check(math.isfinite(reading.position_rad), f"position of joint {index} not finite")
    r = recorder
    check(0 <= r.received <= r.samples, f"received {r.received} of {r.samples}")
    check(r.error is None or bool(r.error.strip()), "empty capture error")
    counts = np.concatenate((r.motor_counts[: r.received], r.link_counts[: r.received]))
    check(bool(np.all((counts >= 0) & (counts < 2**19))), "counts beyond 19 bits")
    check(not r.complete or r.lost == 0, "a complete capture with lost frames")


def reset(link: BusLink) -> CaptureRecorder:
    link.status = link.status_at = None
    link.positions = {}
    link.receive_errors = 0
    link._clock_raw, link._clock_turns = None, 0
    recorder = CaptureRecorder(PROTO, JOINT, SAMPLES, CYCLE_COUNTER)
    recorder.acked = True
    link.arm(recorder)
    return recorder


def _can(data: bytes) -> None:
    if len(data) < 2:
        return
    if data[0] % 2 == 0:
        role = ROLES[data[1] % len(ROLES)]
        message = getattr(PROTO, role)
        try:
            decode_case((role, data[2:]))
        except CanFrameError as exc:
            expect_place(exc, f"(id 0x{message.frame_id:X})")
        return
    recorder = reset(LINK)
    body, pos = data[1:], 0
    while pos + 2 <= len(body):
        which, n = body[pos], body[pos + 1] % 65
        payload = body[pos + 2 : pos + 2 + n]
        pos += 2 + n
        fid = IDS[which % len(IDS)] if which < 0xF0 else which
        LINK._dispatch(can.Message(arbitration_id=fid, data=payload, is_extended_id=False))
    check_link(LINK, recorder)


def _record(role: str, values: dict[str, float]) -> bytes:
    message = getattr(PROTO, role)
    data = encode(message, values)
    return bytes((ROLES.index(role), len(data))) + data


def seeds() -> Iterator[bytes]:
    status = {
        "Mode": 1,
        "Permission": 1,
        "AlarmActive": 0,
        "CycleState": 2,
        "AliveCounter": 3,
        "SpeedOverride": 1.0,
        "AlarmCode": 0,
        "CycleCounter": CYCLE_COUNTER,
        "RejectReason": 0,
        "ControllerTime": 12.5,
    }
    frames = [
        _record("status", status),
        _record("joint_position", {"JointIndex": JOINT, "Position": 0.25}),
    ]
    for k in range(SAMPLES):
        frames.append(
            _record(
                "encoder",
                {
                    "MotorCounts": (1000 + 97 * k) % 2**19,
                    "LinkCounts": (5 + 3 * k) % 2**19,
                    "Counter": k,
                    "JointIndex": JOINT,
                },
            )
        )
    yield b"\x01" + b"".join(frames)
    for role_index, record in ((0, frames[0]), (1, frames[1]), (2, frames[2])):
        yield bytes((0, role_index)) + record[2:]


TARGET = Target("can_frames", guarded(_can), seeds, doc=__doc__ or "")
