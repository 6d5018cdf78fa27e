"""The OPC UA driver's pure parts: chunk pairing and assembly (direct and property tests),
status decoding, and the settings' errors with file and line."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config.load import load_config
from agent.errors import ConfigError, DriverError
from drivers.base import BacklashCycle, ControllerMode
from drivers.opcua.capture import (
    CaptureAssembler,
    ChunkError,
    ChunkPairer,
    decode_chunk,
    expected_samples,
)
from drivers.opcua.settings import OpcUaSettings
from drivers.opcua.status import RawValue, decode_status
from tests.peers.opcua.harness import (
    NODES,
    config_text,
)
from tests.support.drivers.opcua import (
    controller,
)


def _chunks(n: int, sizes: list[int], rate: float = 1000.0) -> list[dict[str, Any]]:
    out, i, seq = [], 0, 41
    for size in sizes:
        j = min(n, i + size)
        if i >= j:
            break
        idx = np.arange(i, j)
        out.append(
            {
                "sequence": seq,
                "time": (idx / rate).tolist(),
                "motor_counts": ((idx * 997) % 2**19).tolist(),
            }
        )
        i, seq = j, seq + 1
    return out


def _assemble(chunks: list[dict[str, Any]], n: int) -> CaptureAssembler:
    asm = CaptureAssembler(first_sequence=41, expected_samples=n, sample_rate_hz=1000.0)
    for raw in chunks:
        asm.add(decode_chunk(raw, encoder_bits=19))
    return asm


_CYCLE = BacklashCycle("c", "j", 1, 10.0, 40.0, 0.2, 0.0, 1000.0, 19, 0.0)


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 60), min_size=1, max_size=60))
def test_any_chunking_reassembles_the_same_samples(sizes: list[int]) -> None:
    n = expected_samples(_CYCLE)
    sizes = [*sizes, n]  # the last chunk takes whatever is left
    asm = _assemble(_chunks(n, sizes), n)
    cap = asm.capture(_CYCLE, machine="c", source="t")
    assert len(cap) == n
    np.testing.assert_array_equal(cap.channels["motor_counts"], (np.arange(n) * 997) % 2**19)


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=3, max_size=40), data=st.data())
def test_any_lost_or_repeated_chunk_is_detected(sizes: list[int], data: st.DataObject) -> None:
    n = expected_samples(_CYCLE)
    chunks = _chunks(n, [*sizes, n])
    k = data.draw(st.integers(0, len(chunks) - 1))
    damaged = data.draw(
        st.sampled_from(
            [
                chunks[:k] + chunks[k + 1 :],  # lost
                chunks[: k + 1] + chunks[k:],  # published twice
            ]
        )
    )
    with pytest.raises(ChunkError):
        asm = _assemble(damaged, n)
        asm.capture(_CYCLE, machine="c", source="t")


def test_pairer_pairs_by_order_and_refuses_overflow() -> None:
    pairer = ChunkPairer(("sequence", "time", "motor_counts"))
    pairer.push("time", [0.0])
    pairer.push("time", [0.001])
    pairer.push("sequence", 1)
    assert pairer.pop() is None  # motor counts of chunk 1 not in yet
    pairer.push("motor_counts", [5])
    assert pairer.pop() == {"sequence": 1, "time": [0.0], "motor_counts": [5]}
    assert pairer.backlog == 1
    with pytest.raises(ChunkError, match="overflowed"):
        pairer.push("motor_counts", [6], overflow=True)
    with pytest.raises(ChunkError, match="bad"):
        pairer.push("motor_counts", [6], good=False)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"time": "nope"}, "expected an array"),
        ({"time": [0.0, float("nan")]}, "not finite"),
        ({"motor_counts": [1.5, 2.0]}, "fractional"),
        ({"motor_counts": [True, False]}, "expected numbers"),
        ({"motor_counts": [[1], [2]]}, "found list values"),
        ({"sequence": -1}, "sequence number"),
        ({"sequence": True}, "sequence number"),
        ({"time": []}, "empty"),
    ],
)
def test_decode_chunk_refuses_garbage(change: dict[str, Any], message: str) -> None:
    raw = {"sequence": 3, "time": [0.0, 0.001], "motor_counts": [1, 2], **change}
    with pytest.raises(ChunkError, match=message):
        decode_chunk(raw, encoder_bits=19)


def test_assembler_detects_a_sample_gap_inside_a_chunk() -> None:
    asm = CaptureAssembler(first_sequence=0, expected_samples=4, sample_rate_hz=1000.0)
    with pytest.raises(ChunkError, match="samples missing"):
        asm.add(
            decode_chunk(
                {"sequence": 0, "time": [0.0, 0.001, 0.003], "motor_counts": [1, 2, 3]},
                encoder_bits=19,
            )
        )


def test_status_decoding_maps_enumerations_scales_and_refuses_garbage(peer_config: Path) -> None:
    ctrl = controller(peer_config, "opc.tcp://127.0.0.1:4840/jha/")
    nodes = dataclasses.replace(
        ctrl.settings.status,
        state_values={2: ControllerMode.STOPPED},
        joint_position_scale=math.pi / 180,
    )

    def raw(**values: Any) -> dict[str, RawValue]:
        base = {
            "state": 2,
            "permission": True,
            "joint_positions": [0, 0, 0, 90.0],
            "alarms": [],
            "speed_override": 50.0,
        }
        return {k: RawValue(k, v) for k, v in {**base, **values}.items()}

    status = decode_status(raw(), nodes, ctrl.joints)
    assert status.mode is ControllerMode.STOPPED
    assert status.joint_positions_rad["axis4"] == pytest.approx(math.pi / 2)
    assert status.speed_override == pytest.approx(0.5)
    assert decode_status(raw(alarms=7), nodes, ctrl.joints).alarms == ("alarm code 7",)
    for bad, message in [
        (raw(state=3), "does not map"),
        (raw(permission=1), "expected a Boolean"),
        (raw(joint_positions=["a"]), "array of numbers"),
        (raw(speed_override=None), "finite number"),
        (
            {**raw(), "state": RawValue("state", 2, good=False, status="BadNoCommunication")},
            "bad quality",
        ),
    ]:
        with pytest.raises(DriverError, match=message):
            decode_status(bad, nodes, ctrl.joints)


def test_settings_errors_name_file_line_and_field(tmp_path: Path) -> None:
    text = (
        config_text()
        .replace(
            f'          object: "{NODES["controller"]}"\n          method: "{NODES["start"]}"',
            f'          method: "{NODES["start"]}"',
        )
        .replace('state: "ns=2;s=Controller.State"', 'state: "Controller.State"')
        .replace(
            "      security: {policy: None, allow_none_security: true}\n",
            "      security: {policy: Basic256Sha256, mode: Sign}\n",
        )
    )
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    lines = text.splitlines()
    message = str(exc.value)

    def line_of(fragment: str) -> int:
        return next(i for i, line in enumerate(lines, 1) if fragment in line)

    state_line = line_of('state: "Controller.State"')
    assert f"bad.yaml:{state_line}: controllers[0].settings.status.state" in message
    assert "trigger.object: required with method" in message
    assert f"bad.yaml:{line_of('security:')}" in message and "certificate: required" in message
    assert isinstance(load_config(_good(tmp_path)).controllers[0].settings, OpcUaSettings)


def _good(tmp_path: Path) -> Path:
    path = tmp_path / "good.yaml"
    path.write_text(config_text())
    return path
