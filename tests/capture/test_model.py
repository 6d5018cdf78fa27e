"""Capture: validation of the data type, and the speed derivations every consumer shares."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.capture.encoder import angle_to_counts
from agent.capture.model import (
    CHANNEL_UNITS,
    Capture,
    CaptureMeta,
    motor_speed_rad_s,
    speed_from_position,
)
from agent.errors import EX_DATAERR, CaptureError

T = np.arange(5) * 0.01


def make(time_s: object = T, **channels: object) -> Capture:
    return Capture(time_s, channels or {"motor_pos_rad": np.zeros(5)}, source="cap.npz")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- validation


def test_valid_capture_is_frozen_and_private() -> None:
    pos = np.linspace(0.0, 1.0, 5)
    cap = make(motor_pos_rad=pos, current_a=[1, 2, 3, 4, 5])
    assert len(cap) == 5
    assert cap.duration_s == pytest.approx(0.04)
    assert cap.sample_rate_hz == pytest.approx(100.0)
    with pytest.raises(ValueError):
        cap.channels["motor_pos_rad"][0] = 9.0  # read-only
    with pytest.raises(ValueError):
        cap.time_s[0] = 9.0
    # The caller's own array is neither frozen nor shared.
    pos[0] = 7.0
    assert cap.channels["motor_pos_rad"][0] == 0.0
    assert cap.channel("current_a").tolist() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("time_s", "match"),
    [
        ([0.0, 0.01, 0.01, 0.03, 0.04], r"not strictly increasing at sample 2"),
        ([0.0, 0.02, 0.01, 0.03, 0.04], r"not strictly increasing at sample 2"),
        ([0.0, 0.01, math.nan, 0.03, 0.04], r"time_s sample 2 is not finite"),
        ([0.0, 0.01, 0.02, math.inf, 0.04], r"time_s sample 3 is not finite"),
        ([0.0], r"at least two samples"),
        (np.zeros((5, 1)), r"1-D"),
        (["a", "b"], r"array of numbers"),
    ],
)
def test_bad_time_base_is_refused(time_s: object, match: str) -> None:
    with pytest.raises(CaptureError, match=match) as info:
        make(time_s)
    assert str(info.value).startswith("cap.npz: ")
    assert info.value.exit_code == EX_DATAERR == 65


@pytest.mark.parametrize(
    ("channels", "match"),
    [
        ({"motor_pos_rad": [0.0, 1.0, math.nan, 3.0, 4.0]}, r"motor_pos_rad sample 2 is not fin"),
        ({"current_a": [0.0, 1.0, 2.0, 3.0, -math.inf]}, r"current_a sample 4 is not finite"),
        ({"motor_pos_rad": [0.0, 1.0, 2.0]}, r"motor_pos_rad has 3 samples, time_s has 5"),
        ({"motor_pos_rad": np.zeros((5, 2))}, r"has 10 samples"),
        ({"motor_pos_deg": np.zeros(5)}, r"unknown channel 'motor_pos_deg'; expected one of"),
        ({"motor_pos_rad": np.array(list("abcde"))}, r"must hold numbers"),
        ({"motor_pos_rad": np.zeros(5, dtype=complex)}, r"must hold numbers"),
    ],
)
def test_bad_channels_are_refused(channels: dict[str, object], match: str) -> None:
    with pytest.raises(CaptureError, match=match):
        make(**channels)


def test_every_channel_name_carries_its_unit() -> None:
    suffix_unit = {"_rad": "rad", "_rad_s": "rad/s", "_rps": "rev/s", "_a": "A", "_nm": "N·m"}
    for name, unit in CHANNEL_UNITS.items():
        if name.endswith("_counts"):
            assert unit == "count"
            continue
        best = max((s for s in suffix_unit if name.endswith(s)), key=len)
        assert suffix_unit[best] == unit, name


def test_missing_channel_is_a_capture_error() -> None:
    with pytest.raises(CaptureError, match="channel 'current_a' is missing"):
        make().channel("current_a")


def test_meta_round_trips_through_dict_and_refuses_unknown_keys() -> None:
    meta = CaptureMeta(machine="r1", joint="j2", gear_ratio=101.0, encoder_bits=19, extra={"a": 1})
    assert CaptureMeta.from_dict(meta.to_dict()) == meta
    with pytest.raises(ValueError, match="unknown metadata keys: colour"):
        CaptureMeta.from_dict({"colour": "red"})


def test_load_turn_period_from_commanded_speed_and_gear_ratio() -> None:
    meta = CaptureMeta(commanded_speed_rad_s=-2.0 * math.pi * 10.0, gear_ratio=50.0)
    assert meta.load_turn_period_s == pytest.approx(5.0)  # 50 motor turns at 10 turns/s
    assert CaptureMeta(gear_ratio=50.0).load_turn_period_s is None


# ---------------------------------------------------------------------------------- speed


@pytest.mark.parametrize(("freq_hz", "rate_hz"), [(1.0, 1000.0), (60.0, 500.0), (120.0, 1000.0)])
def test_speed_from_position_has_the_documented_central_difference_gain(
    freq_hz: float, rate_hz: float
) -> None:
    """x = A sin(w t): the central difference (x[k+1] - x[k-1]) / (2 dt) equals
    A w cos(w t_k) * sin(w dt) / (w dt) exactly (sin(a+b) - sin(a-b) = 2 cos(a) sin(b)),
    with no phase lag; at 60 Hz sampled at 500 Hz that gain is 0.908."""
    amp, dt = 0.3, 1.0 / rate_hz
    t = np.arange(2000) * dt
    w = 2.0 * math.pi * freq_hz
    speed = speed_from_position(t, amp * np.sin(w * t))
    gain = math.sin(w * dt) / (w * dt)
    expected = amp * w * np.cos(w * t) * gain
    np.testing.assert_allclose(speed[1:-1], expected[1:-1], rtol=0, atol=1e-9 * amp * w)
    if (freq_hz, rate_hz) == (60.0, 500.0):
        assert gain == pytest.approx(0.908, abs=5e-4)


def test_speed_from_position_is_exact_on_non_uniform_time_for_a_parabola() -> None:
    # np.gradient's second-order scheme is exact for quadratics even with uneven spacing.
    t = np.cumsum(np.random.default_rng(0).uniform(0.5e-3, 1.5e-3, 200))
    pos = 3.0 * t**2 - 2.0 * t
    speed = speed_from_position(t, pos)
    np.testing.assert_allclose(speed[1:-1], 6.0 * t[1:-1] - 2.0, rtol=1e-9, atol=1e-9)


def test_motor_speed_from_each_kind_of_channel() -> None:
    t = np.arange(500) * 1e-3
    w = 12.5  # rad/s, constant: every derivation must give it (to rounding)
    pos = 0.1 + w * t
    bits = 19
    counts = angle_to_counts(pos, bits)
    by_kind = {
        "motor_speed_rad_s": {"motor_speed_rad_s": np.full(t.size, w)},
        "motor_speed_rps": {"motor_speed_rps": np.full(t.size, w / (2.0 * math.pi))},
        "motor_pos_rad": {"motor_pos_rad": pos},
        "motor_counts": {"motor_counts": counts},
    }
    for kind, channels in by_kind.items():
        cap = Capture(t, channels, CaptureMeta(encoder_bits=bits))
        speed = motor_speed_rad_s(cap)
        # Counts are quantised to 2 pi / 2**19 rad: one count over one 1 ms step is 0.012 rad/s.
        tol = 2 * 2.0 * math.pi / 2**bits / 1e-3 if kind == "motor_counts" else 1e-9
        np.testing.assert_allclose(speed, w, rtol=0, atol=tol, err_msg=kind)


def test_motor_speed_prefers_the_measured_speed_channel() -> None:
    t = np.arange(10) * 1e-3
    cap = Capture(t, {"motor_pos_rad": 5.0 * t, "motor_speed_rad_s": np.full(10, 7.0)})
    assert motor_speed_rad_s(cap).tolist() == [7.0] * 10
    cap = Capture(t, {"motor_pos_rad": 5.0 * t, "motor_speed_rps": np.full(10, 1.0)})
    np.testing.assert_allclose(motor_speed_rad_s(cap), 2.0 * math.pi)


def test_motor_speed_refuses_counts_without_bits_and_captures_without_motor_channel() -> None:
    t = np.arange(10) * 1e-3
    with pytest.raises(CaptureError, match="without the encoder bit width"):
        motor_speed_rad_s(Capture(t, {"motor_counts": np.arange(10)}))
    with pytest.raises(CaptureError, match="no motor channel"):
        motor_speed_rad_s(Capture(t, {"link_pos_rad": np.zeros(10)}))
