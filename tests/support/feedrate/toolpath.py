"""A model of a toolpath and the checks of the streaming feedrate filter's output against it:
the output stays within eps of the input path, passes every block end, ends where the input
ends, is valid for the dialect, takes the input's time plus what the filter says it added, and
keeps every line it did not replace. Shared by tests/feedrate/test_filter_properties.py and
tests/feedrate/test_filter.py."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from agent.feedrate.filter.program import filter_lines
from agent.feedrate.filter.toolpath_filter import FeedrateFilter, FilterStats
from agent.feedrate.gcode.blocks import Block, Motion
from agent.feedrate.gcode.dialect import validate_output_line
from agent.feedrate.gcode.lex import lex_line
from agent.feedrate.gcode.parser import ModalState
from agent.feedrate.geometry.arcs import ArcSegment
from agent.feedrate.geometry.primitives import Vec3
from agent.feedrate.machine import (
    AxisSettings,
    MachineSettings,
    ModulationSettings,
    rounding_mm,
)

Array = npt.NDArray[np.float64]

AXIS = AxisSettings(
    gear_ratio=25.0,
    screw_lead_m_per_rad=1.0,
    backlash_motor_rad=0.125664,
    b_s2=0.0005,
    c_s=0.005,
    motor_inertia_fraction=0.35,
    motor_time_constant_s=1.0,
)


def machine(**kw: object) -> MachineSettings:
    """The paper's axes on X, Y (and Z when asked), policy fixed unless told."""
    mod = kw.pop("modulation", ModulationSettings(policy="fixed", half_window_s=0.1))
    axes = kw.pop("axes", {"X": AXIS, "Y": AXIS})
    base = MachineSettings(
        name="test",
        axes=axes,
        eps_m=2e-6,  # type: ignore[arg-type]
        modulation=mod,
    )  # type: ignore[arg-type]
    return replace(base, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- path model


@dataclass
class PathModel:
    """The input path as arrays, for the distance of many points to it (mm)."""

    a: Array  # line starts (n, 3)
    b: Array  # line ends
    arcs: list[ArcSegment]

    @classmethod
    def of(cls, blocks: Sequence[Block]) -> PathModel:
        lines = [
            (b.start_mm, b.end_mm)
            for b in blocks
            if b.motion is not None and b.arc is None and b.length_mm > 0
        ]
        arcs = [b.arc for b in blocks if b.arc is not None]
        # An arc whose end is off its circle (within the parser's tolerance) ends with a
        # short straight step from its last point to the programmed end.
        lines += [(a.point(a.length), a.end) for a in arcs]
        a = np.array([p for p, _ in lines], dtype=float).reshape(-1, 3)
        e = np.array([q for _, q in lines], dtype=float).reshape(-1, 3)
        return cls(a, e, arcs)

    def distance(self, points: Array) -> Array:
        p = np.asarray(points, dtype=float).reshape(-1, 3)
        best = np.full(len(p), np.inf)
        if len(self.a):
            d = self.b - self.a  # (n, 3)
            dd = np.maximum((d * d).sum(axis=1), 1e-300)
            w = p[:, None, :] - self.a[None, :, :]  # (m, n, 3)
            t = np.clip((w * d[None]).sum(axis=2) / dd[None], 0.0, 1.0)
            q = self.a[None] + t[..., None] * d[None]
            best = np.minimum(best, np.sqrt(((p[:, None, :] - q) ** 2).sum(axis=2)).min(axis=1))
        for arc in self.arcs:
            best = np.minimum(best, _arc_distance(arc, p))
        return best


def _arc_distance(arc: ArcSegment, p: Array) -> Array:
    ia, ib, inn = arc.plane.value
    ca, cb = arc.centre[ia], arc.centre[ib]
    da, db = p[:, ia] - ca, p[:, ib] - cb
    phi = np.arctan2(db, da)
    u = np.mod(arc.direction * (phi - arc.theta0_rad), 2 * np.pi)
    r = np.hypot(da, db)
    z = arc.start[inn] + arc.rise_per_rad * u
    on = np.hypot(r - arc.radius, p[:, inn] - z)
    inside = u <= arc.sweep_rad + 1e-12
    ends = np.minimum(
        np.linalg.norm(p - np.array(arc.start), axis=1),
        np.linalg.norm(p - np.array(arc.point(arc.length)), axis=1),
    )
    return np.where(inside, np.minimum(on, ends), ends)


def parse_program(lines: Sequence[str], start: Vec3 = (0.0, 0.0, 0.0)) -> list[Block]:
    st_ = ModalState(position_mm=start)
    return [st_.apply(text, i) for i, text in enumerate(lines, 1)]


def samples_of(blocks: Sequence[Block]) -> Array:
    """Points along every move: ends and midpoints of lines, 33 points of each arc."""
    out: list[Vec3] = []
    for b in blocks:
        if b.motion is None or b.length_mm <= 0:
            continue
        if b.arc is None:
            s, e = b.start_mm, b.end_mm
            out += [s, tuple(0.5 * (x + y) for x, y in zip(s, e, strict=True)), e]  # type: ignore[list-item]
        else:
            arc = b.arc
            out += [arc.point(arc.length * k / 32) for k in range(33)]
    return np.array(out, dtype=float).reshape(-1, 3)


def program_time_s(blocks: Sequence[Block]) -> float:
    """Time at the programmed feeds: feed moves and dwells (rapids excluded)."""
    total = 0.0
    for b in blocks:
        if b.motion is not None and b.motion is not Motion.RAPID:
            total += b.duration_s or 0.0
        if b.dwell_s:
            total += b.dwell_s
    return total


_F_WORD = re.compile(r"F(\d*)\.?(\d*)")


def _quantisation_s(blocks: Sequence[Block], rnd: float) -> float:
    """How much the written digits can change the time of the feed moves: F to its last
    decimal (slow inch feeds keep few digits), G91 increments to the last coordinate digit."""
    total = 0.0
    for b in blocks:
        if b.motion is None or b.motion is Motion.RAPID or not b.duration_s:
            continue
        if b.modal.distance.name == "INCREMENTAL" and b.feed_mm_s:
            total += 2.0 * rnd / b.feed_mm_s
        m = _F_WORD.search(b.text.split(";")[0].split("*")[0])
        if m is not None and b.inverse_time_f is None:
            f = float(m.group(1) + "." + (m.group(2) or "0") if m.group(1) else "0." + m.group(2))
            if f > 0:
                total += b.duration_s * 0.5 * 10.0 ** -len(m.group(2)) / f
    return total


def common_subsequence(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (a is short: a program of a few lines)."""
    row = [0] * (len(b) + 1)
    for x in a:
        prev_diag = 0
        for j, y in enumerate(b, 1):
            keep = row[j]
            row[j] = prev_diag + 1 if x == y else max(row[j], row[j - 1])
            prev_diag = keep
    return row[-1]


@dataclass(frozen=True)
class Checked:
    out_lines: list[str]
    out_blocks: list[Block]
    max_deviation_mm: float
    stats: FilterStats


def check_output(
    lines: Sequence[str],
    m: MachineSettings,
    *,
    start: Vec3 = (0.0, 0.0, 0.0),
    time_check: bool = True,
) -> Checked:
    """Filter `lines` and assert the acceptance properties; returns what was checked."""
    filt = FeedrateFilter(m, start_mm=start)
    text = "".join(filter_lines(lines, m, filt=filt))
    out_lines = text.splitlines(keepends=True)
    stats = filt.stats
    dialect = m.emitter_dialect
    inp = parse_program(lines, start)
    out = parse_program(out_lines, start)
    # Every line valid for the dialect, every feed positive.
    for i, line in enumerate(out_lines, 1):
        validate_output_line(line, dialect, i)
        f = lex_line(line, i).values.get("F")
        if f is not None:
            assert f > 0.0, f"line {i}: {line!r}"
    # Within eps of the input path (rounding included), through every block end, same end.
    model = PathModel.of(inp)
    pts = samples_of(out)
    dev = float(model.distance(pts).max()) if len(pts) else 0.0
    assert dev <= m.eps_mm * (1 + 1e-9) + 1e-12, f"output leaves the path by {dev} mm"
    inch = any(b.modal.units.name == "INCH" for b in inp)
    rnd = rounding_mm(dialect, inch=inch) * 1.01 + 1e-9
    vertices = np.array([b.end_mm for b in out if b.motion is not None] or [start], dtype=float)
    for b in inp:
        if b.motion is not None and b.length_mm > 0:
            gap = np.linalg.norm(vertices - np.array(b.end_mm), axis=1).min()
            assert gap <= rnd, f"input line {b.line_no} end {b.end_mm} not in the output ({gap})"
    end_in = next((b.end_mm for b in reversed(inp) if b.motion is not None), start)
    end_out = next((b.end_mm for b in reversed(out) if b.motion is not None), start)
    assert math.dist(end_in, end_out) <= rnd
    # Time: the input's plus what the filter added (feed words carry 5-6 significant digits).
    if time_check:
        t_in, t_out = program_time_s(inp), program_time_s(out)
        expected = t_in + stats.added_time_s
        tol = 2e-4 * expected + 1e-4 + _quantisation_s(out, rnd)
        assert abs(t_out - expected) <= tol, (t_in, t_out, tol, stats)
    # Lines left alone are written as they were, in order (unless the dialect renumbers).
    if not dialect.renumber:
        assert common_subsequence(lines, out_lines) >= len(lines) - stats.replaced_blocks
    assert stats.modulated + stats.too_short + stats.at_run_start <= stats.turning_points
    return Checked(out_lines, out, dev, stats)
