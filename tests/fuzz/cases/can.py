"""The CAN receive path's fuzz inputs (socketcand lines of real frames encoded with the DBC,
mutated and shuffled) and its property; used by tests/fuzz/test_fuzz_can.py and
tests/fuzz/atheris/can.py, socketcand.py."""

from __future__ import annotations

import math

import can
import numpy as np
from can.interfaces.socketcand.socketcand import convert_ascii_message_to_can_message
from hypothesis import strategies as st

from drivers.can.dbc import (
    CanMessageNames,
    CanProtocol,
    decode_numbers,
    decode_status,
    encode,
    load_protocol,
)
from drivers.can.link import BusLink
from drivers.can.recorder import CaptureRecorder
from tests.fuzz.harness import Oracle
from tests.support.paths import ROOT

DBC = ROOT / "config" / "can" / "joint_encoder.dbc"


PROTO: CanProtocol = load_protocol(str(DBC), CanMessageNames())


SAMPLES = 12


JOINT = 3


CYCLE_COUNTER = 5


def frame_line(frame_id: int, data: bytes, ts: str = "1712345678.123456", ext: bool = False) -> str:
    fid = f"{frame_id:08X}" if ext else f"{frame_id:03X}"
    return f"< frame {fid} {ts} {data.hex().upper()} >"


def status_line(draw: st.DrawFn) -> str:
    values = {
        "Mode": draw(st.integers(0, 15)),
        "Permission": draw(st.integers(0, 1)),
        "AlarmActive": draw(st.integers(0, 1)),
        "CycleState": draw(st.integers(0, 15)),
        "AliveCounter": draw(st.integers(0, 15)),
        "SpeedOverride": draw(st.sampled_from((0.0, 1.0, 2.55))),
        "AlarmCode": draw(st.integers(0, 255)),
        "CycleCounter": draw(st.sampled_from((CYCLE_COUNTER, 0, 255))),
        "RejectReason": draw(st.integers(0, 255)),
        "ControllerTime": draw(st.sampled_from((0.0, 12.5, 65.535))),
    }
    return frame_line(PROTO.status.frame_id, encode(PROTO.status, values))


def position_line(draw: st.DrawFn) -> str:
    values = {"JointIndex": draw(st.integers(1, 64)), "Position": draw(st.floats(-2147, 2147))}
    return frame_line(PROTO.joint_position.frame_id, encode(PROTO.joint_position, values))


def encoder_lines(draw: st.DrawFn) -> list[str]:
    n = draw(st.integers(0, SAMPLES + 2))
    start = draw(st.integers(0, 2**19 - 1))
    out = []
    for k in range(n):
        values = {
            "MotorCounts": (start + 97 * k) % 2**19,
            "LinkCounts": (start + 3 * k) % 2**19,
            "Counter": k % 2**16,
            "JointIndex": JOINT,
        }
        out.append(frame_line(PROTO.encoder.frame_id, encode(PROTO.encoder, values)))
    return out


MUTATIONS = (
    lambda s: s.replace(" >", ">"),
    lambda s: s[: len(s) // 2],
    lambda s: s.replace("< frame ", "< error "),
    lambda s: s.replace("< frame ", "<frame "),
    lambda s: s[:-2] + "0 >",  # odd hex length
    lambda s: s[:-2] + "GG >",
    lambda s: s[:-2] + "00" * 60 + " >",  # a 68-byte frame
    lambda s: s.replace("1712345678.123456", "nan"),
    lambda s: s.replace("1712345678.123456", "-inf"),
    lambda s: s.replace("1712345678.123456", "x"),
    lambda s: s.replace(" 1712345678", "  1712345678"),
    lambda s: "< frame 1FFFFFFFF 1.0 00 >",
    lambda s: "< frame 100 1.0  >",
    lambda s: "< frame 100 1.0 >",
    lambda s: "< frame  >",
    lambda s: "< hi >",
    lambda s: "< ok >",
    lambda s: s + s,
)


@st.composite
def line_streams(draw: st.DrawFn) -> list[str]:
    lines = [status_line(draw) for _ in range(draw(st.integers(0, 2)))]
    lines += [position_line(draw) for _ in range(draw(st.integers(0, 2)))]
    lines += encoder_lines(draw)
    lines.sort(key=lambda line: draw(st.integers(0, 3)) if "frame 100" not in line else 2)
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        what = draw(st.sampled_from(("mutate", "mutate", "drop", "dup", "move", "garbage")))
        if what == "mutate":
            lines[i] = draw(st.sampled_from(MUTATIONS))(lines[i])
        elif what == "drop":
            del lines[i]
        elif what == "dup":
            lines.insert(i, lines[i])
        elif what == "move":
            lines.insert(draw(st.integers(0, len(lines) - 1)), lines.pop(i))
        else:
            lines.insert(i, "< " + draw(st.text(max_size=30)) + " >")
    return lines


STREAMS = st.one_of(
    line_streams(),
    line_streams(),
    line_streams(),
    st.lists(st.text(max_size=40).map(lambda t: f"< frame {t} >"), max_size=6),
)


def _new_link() -> BusLink:
    bus = can.Bus(interface="virtual", channel="jha-fuzz", receive_own_messages=False)
    return BusLink(bus, PROTO, lambda: None, "fuzz")


LINK = _new_link()


def can_case(lines: list[str], oracle: Oracle) -> None:
    link = LINK
    link.status = link.status_at = None
    link.positions = {}
    link.receive_errors = 0
    link._clock_raw, link._clock_turns = None, 0
    recorder = CaptureRecorder(PROTO, JOINT, SAMPLES, CYCLE_COUNTER)
    recorder.acked = True
    link.arm(recorder)
    for line in lines:
        try:
            msg = convert_ascii_message_to_can_message(line)
        except Exception:  # python-can: CanError from recv, which BusLink counts (tested there)
            continue
        if msg is None or msg.is_error_frame or msg.is_remote_frame:
            continue
        link._dispatch(msg)
    st_ = link.status
    if st_ is not None:
        for name, value in vars(st_).items():
            oracle.check(math.isfinite(float(value)), f"status {name} = {value!r}")
    for index, reading in link.positions.items():
        oracle.check(math.isfinite(reading.position_rad), f"position of joint {index}")
    r = recorder
    oracle.check(0 <= r.received <= r.samples, f"received {r.received} of {r.samples}")
    oracle.check(r.error is None or bool(r.error.strip()), "empty capture error")
    counts = np.concatenate((r.motor_counts[: r.received], r.link_counts[: r.received]))
    oracle.check(bool(np.all((counts >= 0) & (counts < 2**19))), "counts beyond 19 bits")
    if r.complete:
        oracle.check(r.lost == 0, "a complete capture with lost frames")


def decode_case(case: tuple[str, bytes]) -> None:
    role, data = case
    if role == "status":
        frame = decode_status(PROTO, data)
        assert all(math.isfinite(float(v)) for v in vars(frame).values())
    else:
        values = decode_numbers(getattr(PROTO, role), data, scaling=role != "encoder")
        assert all(math.isfinite(v) for v in values.values())
