"""Fuzz the OPC UA value checks: values of the wrong type or shape from a controller.

asyncua hands the driver Python values (Variant bodies): bool, int, float, str, bytes, lists of
them, None, datetimes, nested lists, ExtensionObjects. Two targets:
  * status: the values of one status read (state, permission, joint positions, alarms, speed
    override, operator present), each good or replaced by something of the wrong type, shape
    or quality, through decode_status and decode_cycle_status;
  * capture chunks: the sample buffers of a capture (sequence, time, motor/link counts,
    current) as the controller publishes them, mutated, through decode_chunk and
    CaptureAssembler into a Capture.
Property: a ControllerStatus / Capture holding its invariants, or DriverError (ChunkError for
chunks) naming the node or the chunk; never another exception.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from agent.errors import DriverError
from drivers.base import BacklashCycle, ControllerMode
from drivers.opcua.capture import CaptureAssembler, ChunkError, decode_chunk, expected_samples
from drivers.opcua.settings import OpcUaStatusNodes
from drivers.opcua.status import RawValue, decode_cycle_status, decode_status
from tests.fuzz.harness import Oracle, fuzz

NODES = OpcUaStatusNodes(
    state="ns=2;s=State",
    permission="ns=2;s=Permission",
    state_values={
        "Stopped": ControllerMode.STOPPED,
        1: ControllerMode.PRODUCTION,
        "Manual": ControllerMode.MANUAL,
    },
    joint_positions="ns=2;s=Positions",
    joint_position_scale=1e-3,
    alarms="ns=2;s=Alarms",
    speed_override="ns=2;s=Override",
    speed_override_scale=0.01,
    operator_present="ns=2;s=Operator",
)
# The same nodes with scales that turn a large raw value into an infinite one.
NODES_BIG = dataclasses.replace(NODES, joint_position_scale=1e300, speed_override_scale=1e300)
JOINTS = [SimpleNamespace(name=f"j{i}", index=i) for i in (1, 2, 3, 7)]
CYCLE_STATUS_VALUES: dict[str | int, Any] = {"idle": "idle", 2: "running", "done": "done"}

ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    2**31,
    2**64,
    10**400,
    0.0,
    -0.0,
    1e308,
    float("nan"),
    float("inf"),
    "",
    "Stopped",
    "stopped",
    "1",
    "x" * 500,
    b"\x00\x01",
    bytearray(b"ab"),
    [],
    [1.0, 2.0],
    [1, "a"],
    [[1, 2], [3, 4]],
    [True, False],
    [float("nan")],
    (1.5,),
    {"a": 1},
    dt.datetime(2024, 1, 1),
    [None],
    ["E1", ""],
    ["E1", 5],
    [10**400, 1.0],
    [1.0, 10**400],
    np.float64(1.0),
    np.int32(3),
    np.array([1.0, 2.0]),
    complex(1, 2),
    object(),
)
GOOD = {
    "state": st.sampled_from(("Stopped", 1, "Manual")),
    "permission": st.booleans(),
    "joint_positions": st.lists(st.floats(-1e4, 1e4), max_size=8),
    "alarms": st.sampled_from(([], ["E-stop"], "", 0, 3, False)),
    "speed_override": st.floats(0, 200),
    "operator_present": st.booleans(),
}
VALUES = st.one_of(
    st.sampled_from(ODD_VALUES),
    st.integers(),
    st.floats(),
    st.text(max_size=8),
    st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=3)), max_size=5),
)


@st.composite
def status_reads(
    draw: st.DrawFn,
) -> tuple[dict[str, RawValue], RawValue, OpcUaStatusNodes]:
    raw: dict[str, RawValue] = {}
    # One draw decides, per role: left out of the read (1 in 6), a wrong value (1 in 4), bad
    # quality (1 in 10); one draw instead of three per role keeps hypothesis' overhead low.
    plan = draw(st.integers(0, 240 ** len(GOOD) - 1))
    for role, good in GOOD.items():
        plan, choice = divmod(plan, 240)
        node = getattr(NODES, role)
        if role not in ("state", "permission") and choice % 6 == 0:
            continue  # a node left out of the read
        value = draw(good) if choice % 4 else draw(VALUES)
        quality = choice % 10 != 0
        raw[role] = RawValue(node, value, quality, "" if quality else "BadNodeIdUnknown")
    cycle = RawValue(
        "ns=2;s=CycleStatus",
        draw(st.sampled_from(("idle", 2, "done")) | VALUES),
        draw(st.integers(0, 9)) != 0,
        "Bad",
    )
    return raw, cycle, draw(st.sampled_from((NODES, NODES, NODES_BIG)))


def _status_case(
    case: tuple[dict[str, RawValue], RawValue, OpcUaStatusNodes], oracle: Oracle
) -> None:
    raw, cycle, nodes = case
    try:
        status = decode_status(raw, nodes, JOINTS)
    except DriverError as exc:
        oracle.check("node" in str(exc) and "ns=2;s=" in str(exc), f"no node named: {exc}")
    else:
        oracle.check(isinstance(status.mode, ControllerMode), f"mode {status.mode!r}")
        oracle.check(isinstance(status.permission, bool), f"permission {status.permission!r}")
        oracle.check(math.isfinite(status.speed_override), f"override {status.speed_override}")
        oracle.check(status.operator_present in (None, True, False), "operator_present")
        for name, pos in status.joint_positions_rad.items():
            oracle.check(type(pos) is float and math.isfinite(pos), f"{name} at {pos!r}")
        oracle.check(all(isinstance(a, str) and a for a in status.alarms), f"{status.alarms}")
    try:
        value = decode_cycle_status(cycle, CYCLE_STATUS_VALUES)
    except DriverError as exc:
        oracle.check("ns=2;s=CycleStatus" in str(exc), f"no node named: {exc}")
    else:
        oracle.check(value in ("idle", "running", "done"), f"cycle status {value!r}")


def test_fuzz_opcua_status_values() -> None:
    oracle = Oracle("OPC UA status values", expected=())
    big = 10**400  # regression: math.isfinite(10**400) raised OverflowError (fixed)
    regression = (
        {
            "state": RawValue(NODES.state, "Stopped"),
            "permission": RawValue(NODES.permission, False),
            "speed_override": RawValue(NODES.speed_override or "", big),
        },
        RawValue("ns=2;s=CycleStatus", "idle"),
        NODES,
    )
    fuzz(oracle, status_reads(), lambda case: _status_case(case, oracle), examples=(regression,))


# --- capture chunks ----------------------------------------------------------------------

RATE_HZ = 100.0
CYCLE = BacklashCycle(
    controller="plc",
    joint="j1",
    joint_index=1,
    motor_speed_rad_s=60.0,
    gear_ratio=40.0,
    duration_s=0.2,
    settle_s=0.0,
    sample_rate_hz=RATE_HZ,
    encoder_bits=19,
    test_pose_rad=0.0,
)
SAMPLES = expected_samples(CYCLE)  # 21


@st.composite
def chunk_streams(draw: st.DrawFn) -> tuple[int, list[dict[str, Any]]]:
    first = draw(st.sampled_from((0, 41, 2**32 - 2)))
    size = draw(st.integers(1, 8))
    t0 = draw(st.sampled_from((0.0, 1e6, -5.0)))
    with_link, with_current = draw(st.booleans()), draw(st.booleans())
    chunks: list[dict[str, Any]] = []
    for k, start in enumerate(range(0, SAMPLES, size)):
        idx = range(start, min(start + size, SAMPLES))
        chunk: dict[str, Any] = {
            "sequence": (first + k) % 2**32,
            "time": [t0 + i / RATE_HZ for i in idx],
            "motor_counts": [(1000 + 37 * i) % 2**19 for i in idx],
        }
        if with_link:
            chunk["link_counts"] = [(5 + i) % 2**19 for i in idx]
        if with_current:
            chunk["current"] = [0.5 for _ in idx]
        chunks.append(chunk)
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(chunks) - 1))
        op = draw(st.sampled_from(("value", "value", "item", "drop", "dup", "move", "role")))
        role = draw(st.sampled_from(("sequence", "time", "motor_counts", "link_counts", "current")))
        if op == "value":
            chunks[i][role] = draw(VALUES)
        elif op == "item" and isinstance(chunks[i].get(role), list) and chunks[i][role]:
            items = list(chunks[i][role])
            items[draw(st.integers(0, len(items) - 1))] = draw(VALUES)
            chunks[i][role] = items
        elif op == "drop":
            del chunks[i]
            if not chunks:
                break
        elif op == "dup":
            chunks.insert(i, dict(chunks[i]))
        elif op == "move":
            chunks.insert(draw(st.integers(0, len(chunks) - 1)), chunks.pop(i))
        else:
            chunks[i].pop(role, None)
    return first, chunks


def _chunk_case(case: tuple[int, list[dict[str, Any]]], oracle: Oracle) -> None:
    first, chunks = case
    asm = CaptureAssembler(first, SAMPLES, RATE_HZ)
    for raw in chunks:
        chunk = decode_chunk(raw, encoder_bits=19, time_unit_s=1.0, current_unit_a=1.0)
        oracle.check(bool(np.all(np.isfinite(chunk.time_s))), "chunk time not finite")
        asm.add(chunk)
    cap = asm.capture(CYCLE, machine="plc", source="opcua:plc/j1")
    t = cap.time_s
    oracle.check(t.size == SAMPLES, f"{t.size} samples, expected {SAMPLES}")
    oracle.check(bool(np.all(np.diff(t) > 0)) and t[0] == 0.0, "time base")
    for name, v in cap.channels.items():
        oracle.check(bool(np.all(np.isfinite(v))), f"{name} not finite")


def _names_chunk(exc: BaseException) -> bool:
    text = str(exc)
    return any(w in text for w in ("chunk", "sequence", "capture", "buffer"))


def test_fuzz_opcua_capture_chunks() -> None:
    oracle = Oracle("OPC UA capture chunks", expected=(ChunkError,), place=_names_chunk)
    fuzz(oracle, chunk_streams(), lambda case: _chunk_case(case, oracle))
