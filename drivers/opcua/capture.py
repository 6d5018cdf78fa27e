"""Chunked sample buffers -> one Capture, with every lost or malformed chunk caught.

The controller publishes a capture as chunks: it rewrites its buffer variables (times, motor
counts, optionally link counts and current) with the next block of samples, then bumps a
sequence number. The client receives one data-change notification per buffer variable per
chunk, each monitored item with its own FIFO queue on the server, so the k-th value of every
buffer belongs to chunk k (ChunkPairer). Each chunk is then checked on its own (decode_chunk:
types, shapes, count range) and against the capture so far (CaptureAssembler: consecutive
sequence numbers, time strictly increasing with no sample missing, the expected total).

Pure code: no asyncua here, so every rule is testable without a server.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from agent.capture.encoder import counts_per_turn, unwrap_counts
from agent.capture.model import Capture
from agent.errors import DriverError
from drivers.base import BacklashCycle

Array = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

ROLES = ("sequence", "time", "motor_counts", "link_counts", "current")
# A step between two samples longer than this many sample periods means samples are missing.
MAX_STEP_PERIODS = 1.5


class ChunkError(DriverError):
    """A chunk was lost, malformed or out of place: the capture has a hole and is not used."""


def expected_samples(cycle: BacklashCycle) -> int:
    """Samples a controller publishes for the cycle: both ends of the window included."""
    return round(cycle.duration_s * cycle.sample_rate_hz) + 1


class ChunkPairer:
    """Groups per-variable notifications into chunks: the k-th value of each role is chunk k.

    Sound because the controller writes all buffers of a chunk before the next chunk, every
    monitored item has its own FIFO queue of the same size on the server, and the data-change
    filter asks for StatusValueTimestamp (so an array equal to the previous one still notifies).
    A queue that overflowed on the server drops its oldest values for every item alike, which
    shows up as a sequence gap; the overflow bit is checked too.
    """

    def __init__(self, roles: tuple[str, ...]) -> None:
        unknown = set(roles) - set(ROLES)
        if unknown or "sequence" not in roles:
            raise ValueError(f"roles must include 'sequence' and be among {ROLES}, got {roles}")
        self.roles = roles
        self._queues: dict[str, collections.deque[Any]] = {r: collections.deque() for r in roles}

    def push(self, role: str, value: Any, *, good: bool = True, overflow: bool = False) -> None:
        if role not in self._queues:
            raise ValueError(f"unknown role {role!r}")
        if overflow:
            raise ChunkError(
                f"the server's queue for the {role} buffer overflowed: chunks were dropped "
                "(raise queue_size or lower the chunk rate)"
            )
        if not good:
            raise ChunkError(f"the controller marked the {role} buffer bad")
        self._queues[role].append(value)

    def pop(self) -> dict[str, Any] | None:
        """The oldest complete chunk (role -> raw value), or None while one is incomplete."""
        if any(not q for q in self._queues.values()):
            return None
        return {role: q.popleft() for role, q in self._queues.items()}

    @property
    def backlog(self) -> int:
        """Values received for a chunk not yet complete (a big number means a buffer is silent)."""
        return max(len(q) for q in self._queues.values()) - min(
            len(q) for q in self._queues.values()
        )


@dataclass(frozen=True)
class Chunk:
    sequence: int
    time_s: Array
    motor_counts: IntArray
    link_counts: IntArray | None = None
    current_a: Array | None = None

    def __len__(self) -> int:
        return int(self.time_s.size)


def _numbers(role: str, raw: Any, seq: int) -> npt.NDArray[Any]:
    where = f"chunk {seq}: {role} buffer"
    if not isinstance(raw, list | tuple):
        raise ChunkError(f"{where}: expected an array of numbers, found {type(raw).__name__}")
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in raw[:1]):
        raise ChunkError(f"{where}: expected numbers, found {type(raw[0]).__name__} values")
    try:
        arr = np.asarray(raw)
    except (TypeError, ValueError):
        raise ChunkError(f"{where}: expected a flat array of numbers") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iuf":
        raise ChunkError(f"{where}: expected a flat array of numbers, found {arr.dtype} values")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ChunkError(f"{where}: sample {int(np.flatnonzero(~np.isfinite(arr))[0])} not finite")
    return arr


def _counts(role: str, raw: Any, seq: int, bits: int) -> IntArray:
    arr = _numbers(role, raw, seq)
    cpt = counts_per_turn(bits)
    if arr.dtype.kind == "f" and np.any(arr != np.floor(arr)):
        raise ChunkError(f"chunk {seq}: {role} buffer holds fractional counts")
    if arr.size and (np.min(arr) < 0 or np.max(arr) >= cpt):
        raise ChunkError(
            f"chunk {seq}: {role} buffer holds counts outside 0..{cpt - 1} ({bits}-bit encoder)"
        )
    return arr.astype(np.int64)


def decode_chunk(
    raw: Mapping[str, Any],
    *,
    encoder_bits: int,
    time_unit_s: float = 1.0,
    current_unit_a: float = 1.0,
    sequence_modulus: int = 2**32,
) -> Chunk:
    """Check one chunk's values (as the server sent them) and convert them to SI arrays."""
    seq = raw.get("sequence")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < sequence_modulus:
        raise ChunkError(
            f"sequence number must be an integer in 0..{sequence_modulus - 1}, found {seq!r}"
        )
    time_s = _numbers("time", raw.get("time"), seq).astype(np.float64) * time_unit_s
    n = time_s.size
    if n == 0:
        raise ChunkError(f"chunk {seq}: empty time buffer")
    motor = _counts("motor_counts", raw.get("motor_counts"), seq, encoder_bits)
    link = None
    if "link_counts" in raw:
        link = _counts("link_counts", raw["link_counts"], seq, encoder_bits)
    current = None
    if "current" in raw:
        current = _numbers("current", raw["current"], seq).astype(np.float64) * current_unit_a
    for role, arr in (("motor_counts", motor), ("link_counts", link), ("current", current)):
        if arr is not None and arr.size != n:
            raise ChunkError(
                f"chunk {seq}: {role} buffer has {arr.size} samples, time buffer has {n}"
            )
    return Chunk(seq, time_s, motor, link, current)


def _same_samples(a: Chunk, b: Chunk) -> bool:
    pairs = (
        (a.time_s, b.time_s),
        (a.motor_counts, b.motor_counts),
        (a.link_counts, b.link_counts),
        (a.current_a, b.current_a),
    )
    return all(
        (x is None and y is None) or (x is not None and y is not None and np.array_equal(x, y))
        for x, y in pairs
    )


@dataclass
class CaptureAssembler:
    """Appends chunks in sequence order; refuses gaps, overlaps and overruns as they come."""

    first_sequence: int
    expected_samples: int
    sample_rate_hz: float
    tolerance: int = 0
    sequence_modulus: int = 2**32
    drop_identical: bool = False  # an exact second copy of the last chunk is dropped
    chunks: list[Chunk] = field(default_factory=list)
    samples: int = 0
    duplicates_dropped: int = 0

    @property
    def next_sequence(self) -> int:
        return (self.first_sequence + len(self.chunks)) % self.sequence_modulus

    def add(self, chunk: Chunk) -> None:
        want = self.next_sequence
        if self.chunks and chunk.sequence == self.chunks[-1].sequence:
            if _same_samples(chunk, self.chunks[-1]):
                if self.drop_identical:
                    self.duplicates_dropped += 1
                    return
                raise ChunkError(f"chunk {chunk.sequence} repeated (an identical copy)")
            raise ChunkError(f"chunk {chunk.sequence} repeated with other samples")
        if chunk.sequence != want:
            last = (want - 1) % self.sequence_modulus
            behind = (last - chunk.sequence) % self.sequence_modulus
            if self.chunks and behind < self.sequence_modulus // 2:
                raise ChunkError(f"chunk {chunk.sequence} after {last} (out of order)")
            # Ahead: lost, or late (out of order). Which, only waiting would tell, and the
            # motion must not wait on it: either way the capture has a hole now.
            missing = (chunk.sequence - want) % self.sequence_modulus
            raise ChunkError(
                f"chunk {want} lost: the controller's next chunk was {chunk.sequence} "
                f"({missing} chunk(s) missing or late, out of order)"
            )
        self._check_times(chunk)
        if self.samples + len(chunk) > self.expected_samples + self.tolerance:
            raise ChunkError(
                f"chunk {chunk.sequence}: the controller published more than the "
                f"{self.expected_samples} samples the cycle asked for"
            )
        self.chunks.append(chunk)
        self.samples += len(chunk)

    def _check_times(self, chunk: Chunk) -> None:
        """Each sample one period after the one before: no repeat, no reversal, no sample
        missing and none too early (a controller sampling faster than asked, or flooding)."""
        period = 1.0 / self.sample_rate_hz
        t = chunk.time_s
        steps = np.diff(t)
        offset = 1  # steps[i] leads to sample `offset + i` of the chunk
        if self.chunks:
            steps = np.concatenate(([t[0] - self.chunks[-1].time_s[-1]], steps))
            offset = 0
        if not steps.size:
            return
        seq = chunk.sequence

        def where(i: int) -> str:
            return f"chunk {seq}: sample {self.samples + offset + i} (t = {t[offset + i]:.6g} s)"

        if np.any(steps <= 0):
            i = int(np.flatnonzero(steps <= 0)[0])
            what = "repeated" if steps[i] == 0 else f"after one at {t[offset + i] - steps[i]:.6g} s"
            raise ChunkError(f"{where(i)} {what}: sample times must increase")
        if float(np.max(steps)) > MAX_STEP_PERIODS * period:
            i = int(np.argmax(steps))
            raise ChunkError(
                f"{where(i)}: samples missing: a step of {steps[i]:.6g} s where the sample "
                f"period is {period:.6g} s"
            )
        if float(np.min(steps)) < period / MAX_STEP_PERIODS:
            i = int(np.argmin(steps))
            raise ChunkError(
                f"{where(i)}: {steps[i]:.6g} s after the one before where the sample period is "
                f"{period:.6g} s (the controller samples faster than asked, or floods)"
            )

    @property
    def complete(self) -> bool:
        return abs(self.samples - self.expected_samples) <= self.tolerance

    def capture(
        self,
        cycle: BacklashCycle,
        *,
        machine: str,
        source: str,
        extra: Mapping[str, Any] | None = None,
    ) -> Capture:
        """The capture in SI units; raises ChunkError unless every expected sample is in."""
        if not self.complete:
            raise ChunkError(
                f"capture incomplete: {self.samples} of {self.expected_samples} samples "
                f"arrived (the last chunk(s) were lost)"
            )
        time_raw = np.concatenate([c.time_s for c in self.chunks])
        motor = np.concatenate([c.motor_counts for c in self.chunks])
        bits = cycle.encoder_bits
        channels: dict[str, Array] = {
            "motor_counts": motor.astype(np.float64),
            "motor_pos_rad": unwrap_counts(motor, bits),
        }
        if all(c.link_counts is not None for c in self.chunks):
            # Single-turn counts cannot say which turn the link is in: like the motor channel,
            # the first sample's turn is turn 0.
            link = np.concatenate([c.link_counts for c in self.chunks if c.link_counts is not None])
            channels["link_pos_rad"] = unwrap_counts(link, bits)
        if all(c.current_a is not None for c in self.chunks):
            channels["current_a"] = np.concatenate(
                [c.current_a for c in self.chunks if c.current_a is not None]
            )
        meta = cycle.capture_meta(
            machine,
            {
                "driver": "opcua",
                "chunks": len(self.chunks),
                "first_sequence": self.first_sequence,
                "controller_time0_s": float(time_raw[0]),
                **dict(extra or {}),
            },
            encoder_bits=bits,
        )
        # The controller's clock has its own epoch; captures start at 0 like the simulation's.
        return Capture(time_s=time_raw - time_raw[0], channels=channels, meta=meta, source=source)
