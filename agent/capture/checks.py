"""The rules a capture's samples must meet beyond Capture's own, whatever the file format:
time strictly increasing, encoder counts whole and within the bit width, a motor channel
present; and the positions unwrapped from the counts.

Each check names the sample's place through a Locate: the CSV line and column, or the
channel and sample index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from agent.capture.encoder import counts_per_turn, unwrap_counts
from agent.capture.model import Array, Capture, CaptureMeta
from agent.errors import CaptureError

COUNT_CHANNELS = ("motor_counts", "link_counts")
# Channels a motor speed can be taken from (agent.capture.model.motor_speed_rad_s).
MOTOR_CHANNELS = ("motor_speed_rad_s", "motor_speed_rps", "motor_pos_rad", "motor_counts")

# (source shown in the message, place within it) for sample i, e.g. ("cap.csv:57", "column x").
Locate = Callable[[int, str], tuple[str, str]]


def at_sample(source: str) -> Locate:
    return lambda i, name: (source, f"channel {name} sample {i}")


def at_line(source: str, line_nos: Sequence[int]) -> Locate:
    return lambda i, name: (f"{source}:{line_nos[i]}", f"column {name}")


def _check_time(time_s: Array, locate: Locate) -> None:
    dt_s = np.diff(time_s)
    bad = np.flatnonzero(~(dt_s > 0))
    if bad.size:
        i = int(bad[0]) + 1
        src, place = locate(i, "time_s")
        prev_src, _ = locate(i - 1, "time_s")
        raise CaptureError(
            src,
            f"{place}: time {float(time_s[i])!r} s is not after the previous sample's "
            f"{float(time_s[i - 1])!r} s ({prev_src}); time must increase strictly",
        )


def _check_counts(name: str, values: np.ndarray, bits: int, locate: Locate) -> np.ndarray:
    """The counts as int64, each a whole number in 0..2**bits - 1."""
    cpt = counts_per_turn(bits)
    if values.dtype.kind == "f":
        bad = np.flatnonzero(values != np.floor(values))
        if bad.size:
            src, place = locate(int(bad[0]), name)
            value = values[bad[0]].item()
            raise CaptureError(src, f"{place}: {value!r} is not a whole number of counts")
    bad = np.flatnonzero((values < 0) | (values >= cpt))
    if bad.size:
        src, place = locate(int(bad[0]), name)
        raise CaptureError(
            src,
            f"{place}: {values[bad[0]].item()!r} counts is outside 0..{cpt - 1} "
            f"for a {bits}-bit encoder",
        )
    return values.astype(np.int64)


def check_content(
    source: str,
    time_s: Array,
    channels: Mapping[str, np.ndarray],
    meta: CaptureMeta,
    locate: Locate,
    *,
    require_motor: bool = True,
) -> dict[str, np.ndarray]:
    """The rules beyond Capture's own: counts need a bit width, a motor channel is required
    (unless `require_motor` is False: a rigid identification takes link position and torque
    alone; backlash analysis always needs the motor side)."""
    if require_motor and not any(name in channels for name in MOTOR_CHANNELS):
        raise CaptureError(source, f"no motor channel: need one of {', '.join(MOTOR_CHANNELS)}")
    _check_time(time_s, locate)
    out = dict(channels)
    for name in COUNT_CHANNELS:
        if name in out:
            if meta.encoder_bits is None:
                raise CaptureError(
                    source,
                    f"{name} needs the encoder bit width: give encoder_bits in the metadata "
                    "(sidecar or --encoder-bits)",
                )
            out[name] = _check_counts(name, out[name], meta.encoder_bits, locate)
    return out


def capture_with_positions(capture: Capture) -> Capture:
    """The capture plus motor_pos_rad / link_pos_rad unwrapped from its encoder counts.

    The counts are kept; a position channel the capture already has is left as it is.
    """
    new: dict[str, np.ndarray] = {}
    for counts_name, pos_name in zip(
        COUNT_CHANNELS, ("motor_pos_rad", "link_pos_rad"), strict=True
    ):
        if counts_name not in capture.channels or pos_name in capture.channels:
            continue
        bits = capture.meta.encoder_bits
        if bits is None:
            raise CaptureError(capture.source, f"{counts_name} given without the encoder bit width")
        try:
            new[pos_name] = unwrap_counts(capture.channels[counts_name], bits)
        except ValueError as e:
            raise CaptureError(capture.source, f"{counts_name}: {e}") from None
    if not new:
        return capture
    return Capture(capture.time_s, {**capture.channels, **new}, capture.meta, capture.source)
