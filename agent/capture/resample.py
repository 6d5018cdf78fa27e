"""Onto the controller's tick: a capture logged with host-time jitter, repeated records and
gaps of a few ticks, put back on the uniform time base the estimators need.

A controller samples on its own fixed tick; a log written by a host program stamps each record
with the host's clock, which jitters, repeats a record when it polls twice within a tick, and
skips ticks when it is late. `resample_to_tick`:

1. fits the tick grid to the stamps by least squares (starting from the median span of
   64 records, or from the tick given), so a slightly wrong tick does not drift away;
2. puts every record on its nearest tick (the stamps' jitter is the host's, not the
   controller's: moving a sample by less than half a tick undoes it);
3. keeps the first record of a tick that got two (a repeated record) and counts the rest;
4. fills each missing tick by linear interpolation between its neighbours and counts it;
5. refuses (CaptureError naming where) a gap of more than `max_gap_ticks` missing ticks:
   interpolation across it would invent the motion the estimators are meant to measure.

Encoder counts are unwrapped to positions first (a 19-bit absolute count wraps, and linear
interpolation across a wrap would jump a whole turn); the counts channels are then dropped.
The report says what was done, so every estimate made from a resampled capture can say so.

A host that logs every 5th or 6th tick of a 500 Hz controller (steps of 10 and 12 ms, stamps in
whole ms) is not a jittery log of a 10.6 ms tick: taken as one, 3-4.6 % of its distinct records
were dropped as "repeated" and the others moved by up to 0.7 of that tick (positions off by up
to 10 mrad). `controller_tick` recognises such a log: the finest tick (the median step divided
by 1..MAX_DECIMATION) on which every stamp lies within its quantisation (the largest step of
stamp values all stamps share, e.g. 1 ms) plus a tenth of a tick. Each record then goes on its
own controller tick, none is dropped (two records on one tick would be a true repeat), the ticks
between records are interpolated, and a gap is judged in records missing at the log's usual
step (its decimation), not in controller ticks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.capture.checks import COUNT_CHANNELS, capture_with_positions
from agent.capture.model import Capture
from agent.errors import CaptureError

# Steps within this fraction of the median tick count as uniform: nothing is resampled.
UNIFORM_TOLERANCE = 0.01
DEFAULT_MAX_GAP_TICKS = 5
# A host log may hold every n-th controller tick, n up to this.
MAX_DECIMATION = 20
# Stamps are taken as quantised to the largest of these that divides every one of them.
QUANTA_S = (1e-3, 1e-4, 1e-5, 1e-6)


@dataclass(frozen=True)
class ResampleReport:
    """What resampling did to one capture (or to a set sampled together)."""

    tick_s: float
    samples_in: int
    samples_out: int
    repeated: int  # records that landed on a tick already taken (dropped)
    filled: int  # ticks with no record, interpolated
    largest_gap_ticks: int  # most ticks missing in a row (0: none)
    jitter_max_ticks: float  # largest distance of a stamp from its tick, in ticks
    # A log of every n-th controller tick: n (the usual step; 1: every tick was logged), the
    # range of its steps in ticks, and the stamps' quantisation (0: none found).
    decimation: int = 1
    step_range_ticks: tuple[int, int] = (1, 1)
    quantum_s: float = 0.0

    def describe(self) -> str:
        if self.decimation > 1:
            lo, hi = self.step_range_ticks
            quantum = f", stamps quantised to {self.quantum_s * 1e3:g} ms" if self.quantum_s else ""
            return (
                f"a log of every {self.decimation}th tick of a {self.tick_s * 1e3:.6g} ms "
                f"controller tick (steps of {lo}-{hi} ticks{quantum}): {self.samples_in} "
                f"records each on its own tick, {self.repeated} dropped, -> "
                f"{self.samples_out} samples, {self.filled} ticks between records interpolated, "
                f"stamp jitter up to {self.jitter_max_ticks:.2f} tick"
            )
        return (
            f"resampled onto a {self.tick_s * 1e3:.6g} ms tick: {self.samples_in} records -> "
            f"{self.samples_out} samples, {self.filled} filled (largest gap "
            f"{self.largest_gap_ticks} ticks), {self.repeated} repeated records dropped, stamp "
            f"jitter up to {self.jitter_max_ticks:.2f} tick"
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def is_uniform(time_s: np.ndarray, tolerance: float = UNIFORM_TOLERANCE) -> bool:
    """Whether every step is within `tolerance` of the median step."""
    dt = np.diff(np.asarray(time_s, dtype=np.float64))
    median = float(np.median(dt))
    return bool(median > 0 and np.max(np.abs(dt - median)) <= tolerance * median)


def stamp_quantum_s(time_s: np.ndarray) -> float:
    """The largest of QUANTA_S every stamp is a whole multiple of (0.0: none); within the
    float's own resolution of the stamps (UNIX times of 1.7e9 s carry about 0.4 us)."""
    t = np.asarray(time_s, dtype=np.float64)
    span = float(np.max(np.abs(t))) if t.size else 0.0
    for q in QUANTA_S:
        tolerance = max(1e-6, 8.0 * np.finfo(np.float64).eps * span / q)
        if np.all(np.abs(t / q - np.rint(t / q)) <= tolerance):
            return q
    return 0.0


def controller_tick(time_s: np.ndarray) -> tuple[float, int, float] | None:
    """(controller tick, decimation, stamp quantum) of a log of every n-th tick, n >= 2; None
    when the stamps lie on no tick finer than their own usual step (a jittery log of every
    tick, or a uniform one). See the module docstring."""
    t = np.asarray(time_s, dtype=np.float64)
    if t.size < 16:
        return None
    steps = np.diff(t)
    median = float(np.median(steps))
    if not median > 0:
        return None
    quantum = stamp_quantum_s(t)
    for n in range(2, MAX_DECIMATION + 1):
        tick = median / n
        if tick < quantum:  # a finer grid than the stamps can show says nothing
            return None
        k, phase, fitted = _track_ticks(t - t[0], tick)
        residual = (t - t[0]) - (phase + k * fitted)
        if float(np.max(np.abs(residual))) <= quantum / 2.0 + 0.1 * fitted:
            whole = np.rint(steps / fitted)
            if float(np.max(np.abs(steps / fitted - whole))) > quantum / fitted + 0.2:
                continue
            # the usual step in ticks; a grid whose usual step is one tick is no decimation
            usual = int(np.median(whole))
            return (fitted, usual, quantum) if usual >= 2 else None
    return None


def tick_indices(
    time_s: np.ndarray, source: str, tick_s: float | None, max_gap_ticks: int
) -> tuple[np.ndarray, np.ndarray, ResampleReport, float]:
    """(the records kept, their tick numbers, the report, the first tick's time) for a time
    base; refuses big gaps."""
    t = np.asarray(time_s, dtype=np.float64)
    decimated = controller_tick(t) if tick_s is None else None
    decimation, quantum = 1, 0.0
    if decimated is not None:
        tick_s, decimation, quantum = decimated
    if tick_s is None:
        # Over a lag of L records the stamps' jitter weighs 1/L: the median of such spans
        # (a gap or a repeat inside one spoils only that one) gives the tick to a fraction
        # of a per cent, close enough for the tracker below to lock on.
        lag = max(1, min(64, t.size // 4))
        tick = float(np.median((t[lag:] - t[:-lag]) / lag))
    else:
        tick = float(tick_s)
    if not tick > 0:
        raise CaptureError(source, f"cannot resample: tick {tick!r} s is not > 0")
    raw, phase_s, tick = _track_ticks(t - t[0], tick)
    k = raw - raw[0]
    start_s = float(t[0]) + phase_s + float(raw[0]) * tick  # the time of the first tick
    x = (t - t[0] - phase_s) / tick  # each stamp in ticks of the fitted grid
    first = np.ones(k.size, dtype=bool)
    first[1:] = k[1:] > np.maximum.accumulate(k)[:-1]  # a later record on a taken tick: repeat
    kept = np.flatnonzero(first)
    kk = k[kept]
    steps = np.diff(kk)
    largest = int(steps.max()) - 1 if steps.size else 0
    # In a decimated log a gap is counted in records missing at its usual step.
    missing = (int(steps.max()) + decimation - 1) // decimation - 1 if steps.size else 0
    if missing > max_gap_ticks:
        at = int(np.argmax(steps))
        unit = "ticks" if decimation == 1 else f"records (steps of {decimation} ticks)"
        raise CaptureError(
            source,
            f"a gap of {missing} {unit} ({largest * tick:.3g} s) after t = "
            f"{t[kept[at]]:.6g} s, more than the {max_gap_ticks} that may be filled by "
            "interpolation (max_gap_ticks): the motion in it was not measured",
        )
    report = ResampleReport(
        samples_in=int(t.size),
        samples_out=int(kk[-1] + 1),
        repeated=int(t.size - kept.size),
        filled=int(kk[-1] + 1 - kept.size),
        largest_gap_ticks=max(largest, 0),
        tick_s=tick,
        jitter_max_ticks=float(np.max(np.abs(x[kept] - raw[kept]))),
        decimation=decimation,
        step_range_ticks=(int(steps.min()), int(steps.max())) if steps.size else (1, 1),
        quantum_s=quantum,
    )
    return kept, kk, report, start_s


def _track_ticks(t: np.ndarray, tick: float) -> tuple[np.ndarray, float, float]:
    """(tick number of each stamp, grid phase (s), tick (s)) with t from 0: the grid
    t = phase + k tick fitted by least squares as the stamps come, in windows that grow as
    the fit sharpens. A tick taken from the median step (or a nominal rate against a host
    clock that drifts) is off by a little, which over thousands of ticks would add up to a
    whole tick; refitted from every stamp so far, the grid follows the log to its end."""
    n = t.size
    k = np.empty(n, dtype=np.int64)
    first = t[: min(n, 64)]
    phase = float(np.median(first - tick * np.rint(first / tick)))
    sums = np.zeros(5)  # count, sum k, sum t, sum k^2, sum k t
    start, window = 0, 64
    while start < n:
        seg = t[start : start + window]
        kw = np.rint((seg - phase) / tick).astype(np.int64)
        k[start : start + window] = kw
        kf = kw.astype(np.float64)
        sums += np.array([kw.size, kf.sum(), seg.sum(), kf @ kf, kf @ seg], dtype=np.float64)
        m, sk, st, skk, skt = sums
        den = m * skk - sk * sk
        if den > 0.0:
            tick = float((m * skt - sk * st) / den)
            phase = float((st - tick * sk) / m)
        start += window
        window = min(2 * window, 4096)
    return k, phase, tick


def resample_to_tick(
    capture: Capture,
    *,
    tick_s: float | None = None,
    max_gap_ticks: int = DEFAULT_MAX_GAP_TICKS,
) -> tuple[Capture, ResampleReport]:
    """`capture` on a uniform tick (see the module docstring), with what was done."""
    captures, report = resample_together([capture], tick_s=tick_s, max_gap_ticks=max_gap_ticks)
    return captures[0], report


def resample_together(
    captures: list[Capture],
    *,
    tick_s: float | None = None,
    max_gap_ticks: int = DEFAULT_MAX_GAP_TICKS,
) -> tuple[list[Capture], ResampleReport]:
    """Captures logged together (one time base, the first one's) put on their tick at once:
    the grid is fitted to the stamps once and every capture's channels interpolated on it."""
    first = captures[0]
    kept, kk, report, start_s = tick_indices(first.time_s, first.source, tick_s, max_gap_ticks)
    grid = np.arange(report.samples_out)
    time_s = start_s + grid.astype(np.float64) * report.tick_s
    out = []
    for capture in captures:
        cap = capture_with_positions(capture)
        channels = {
            name: np.interp(grid, kk, np.asarray(values, dtype=np.float64)[kept])
            for name, values in cap.channels.items()
            if name not in COUNT_CHANNELS
        }
        out.append(Capture(time_s, channels, cap.meta, cap.source))
    return out, report


def uniform_capture(
    capture: Capture, *, max_gap_ticks: int = DEFAULT_MAX_GAP_TICKS
) -> tuple[Capture, ResampleReport | None]:
    """The capture as it is when its sampling is uniform, else resampled onto its tick."""
    if is_uniform(capture.time_s):
        return capture, None
    return resample_to_tick(capture, max_gap_ticks=max_gap_ticks)
