"""Property tests of the streaming feedrate filter on random toolpaths (issue 3 acceptance).

For random programs (lines and arcs in G17/G18/G19, G90/G91, mm or inch, G94 or G93, comment
lines, feed changes, rapids) on random machines (dialect, G93 output, retrograde or not,
window length, lookahead): the output path stays within eps of the input path, passes through
every input block end and ends where the input ends, every line is valid for the dialect, every
feed is positive, the output takes the input's time plus what the filter says it added, and
every line the filter did not replace is written byte for byte, in order.

The helpers (`PathModel`, `check_output`) are shared with tests/test_feedrate_filter.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.feedrate.filter.fast import FastModalState
from agent.feedrate.filter.toolpath_filter import FeedrateFilter, FilterStats, filter_lines
from agent.feedrate.gcode.emit import DIALECTS, validate_output_line
from agent.feedrate.gcode.lex import lex_line
from agent.feedrate.gcode.parser import Block, ModalState, Motion
from agent.feedrate.geometry.primitives import ArcSegment, Vec3
from agent.feedrate.machine import (
    AxisSettings,
    LookaheadSettings,
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


# ------------------------------------------------------------------------------- programs


@st.composite
def toolpaths(draw: st.DrawFn, *, g93: bool = True) -> tuple[list[str], bool, bool]:
    """A random program (text lines), whether it is in inches, whether incremental."""
    inch = draw(st.booleans()) and draw(st.booleans())
    unit = 25.4 if inch else 1.0
    incremental = draw(st.booleans())
    inverse = g93 and draw(st.integers(0, 7)) == 0
    lines = [
        "G20\n" if inch else "G21\n",
        "G91\n" if incremental else "G90\n",
        "G93\n" if inverse else "G94\n",
    ]
    pos = [0.0, 0.0, 0.0]
    feed = draw(st.sampled_from([300.0, 1200.0, 3000.0, 6000.0]))
    first = True
    coord = st.floats(-40.0, 40.0, allow_nan=False).map(lambda v: round(v, 3))
    plane = 17
    for _ in range(draw(st.integers(2, 12))):
        kind = draw(
            st.sampled_from(["line", "line", "line", "arc", "comment", "rapid", "feed", "plane"])
        )
        fword = ""
        if inverse:
            fword = f" F{draw(st.floats(1.0, 600.0)):.3f}"
        elif first:
            fword = f" F{feed / unit:.4f}"
        if kind == "comment":
            lines.append(draw(st.sampled_from(["(a comment)\n", "\n", "; note\n"])))
            continue
        if kind == "feed" and not inverse:
            feed = draw(st.sampled_from([300.0, 1200.0, 3000.0]))
            lines.append(f"F{feed / unit:.4f}\n")
            first = False
            continue
        if kind == "plane":
            plane = draw(st.sampled_from([17, 18, 19]))
            lines.append(f"G{plane}\n")
            continue
        if kind in ("line", "rapid"):
            target = [draw(coord), draw(coord), draw(st.sampled_from([0.0, 0.0, draw(coord)]))]
            word = "G0" if kind == "rapid" else "G1"
            if kind == "rapid":
                fword = ""
        else:
            ia, ib = {17: (0, 1), 18: (2, 0), 19: (1, 2)}[plane]
            radius = draw(st.floats(2.0, 30.0))
            a0 = draw(st.floats(-math.pi, math.pi))
            a1 = a0 + draw(st.floats(0.2, 2 * math.pi - 0.2)) * draw(st.sampled_from([-1, 1]))
            centre = list(pos)
            centre[ia] = pos[ia] - radius * math.cos(a0)
            centre[ib] = pos[ib] - radius * math.sin(a0)
            target = list(pos)
            target[ia] = round(centre[ia] + radius * math.cos(a1), 3)
            target[ib] = round(centre[ib] + radius * math.sin(a1), 3)
            letters = {0: "I", 1: "J", 2: "K"}
            word = draw(st.sampled_from(["G2", "G3"]))
            word += (
                f" {letters[ia]}{(centre[ia] - pos[ia]) / unit:.5f}"
                f" {letters[ib]}{(centre[ib] - pos[ib]) / unit:.5f}"
            )
        if kind != "rapid":
            first = False
        if incremental:
            d = [(t - p) / unit for t, p in zip(target, pos, strict=True)]
            lines.append(f"{word} X{d[0]:.5f} Y{d[1]:.5f} Z{d[2]:.5f}{fword}\n")
            pos = [p + v * unit for p, v in zip(pos, d, strict=True)]
        else:
            lines.append(
                f"{word} X{target[0] / unit:.5f} Y{target[1] / unit:.5f} "
                f"Z{target[2] / unit:.5f}{fword}\n"
            )
            pos = [t / unit * unit for t in target]
    lines.append("M30\n")
    return lines, inch, incremental


@st.composite
def machines(draw: st.DrawFn, inch: bool, incremental: bool = False) -> MachineSettings:
    dialect = draw(st.sampled_from(["generic", "grbl", "linuxcnc", "marlin"]))
    retro = draw(st.booleans())
    ratio = draw(st.floats(-0.8, -0.05) if retro else st.floats(0.05, 0.95))
    mod = ModulationSettings(
        ratio=round(ratio, 3),
        retrograde=retro,
        policy="fixed",
        half_window_s=draw(st.sampled_from([0.01, 0.05, 0.2])),
        segments=draw(st.sampled_from([4, 16, 40])),
    )
    eps = draw(st.sampled_from([2e-6, 1e-5, 1e-4]))
    if incremental:  # G91 segments are written 1.5 units of the last digit apart at least
        eps = max(eps, 1e-5)
    if inch:
        eps = max(eps, 3e-5)
    inverse = DIALECTS[dialect].inverse_time and draw(st.booleans())
    look = LookaheadSettings(
        lines=draw(st.sampled_from([2, 5, 1000])), seconds=draw(st.sampled_from([0.05, 5.0]))
    )
    axes = {"X": AXIS, "Y": AXIS, "Z": AXIS} if draw(st.booleans()) else {"X": AXIS, "Y": AXIS}
    return machine(
        dialect=dialect, inverse_time=inverse, modulation=mod, eps_m=eps, lookahead=look, axes=axes
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_toolpaths_keep_the_acceptance_properties(data: st.DataObject) -> None:
    lines, inch, incremental = data.draw(toolpaths())
    m = data.draw(machines(inch, incremental))
    if m.dialect == "marlin":  # no G93 there: rewrite the program in G94
        lines = [line for line in lines if not line.startswith("G93")]
        lines = [
            line.split(" F")[0] + "\n" if " F" in line and not line.startswith("G0") else line
            for line in lines
        ]
        lines.insert(0, "G94 F600\n")
    check_output(lines, m)


@st.composite
def zigzags(draw: st.DrawFn) -> list[str]:
    """Many reversals close together: the windows crowd each other and the lookahead."""
    n = draw(st.integers(2, 30))
    width = draw(st.floats(0.5, 60.0))
    step = draw(st.floats(0.05, 5.0))
    lines = [f"G21 G90 G94 F{draw(st.sampled_from([600, 3000, 9000]))}\n"]
    for k in range(n):
        lines.append(f"G1 X{(k % 2) * width:.3f} Y{k * step:.3f}\n")
    return lines


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zigzags(), st.booleans(), st.sampled_from([2, 3, 1000]), st.booleans())
def test_crowded_reversals(lines: list[str], retro: bool, look: int, g93: bool) -> None:
    mod = ModulationSettings(
        ratio=-0.45 if retro else 0.25, retrograde=retro, policy="fixed", half_window_s=0.2
    )
    m = machine(modulation=mod, inverse_time=g93, lookahead=LookaheadSettings(lines=look))
    c = check_output(lines, m)
    assert c.stats.max_pending_lines <= look + 2


# ------------------------------------------------------------------------------- fast path


@st.composite
def plain_lines(draw: st.DrawFn) -> list[str]:
    """Lines the fast path takes, and lines it must leave to the parser, mixed."""
    num = st.one_of(
        st.floats(-500, 500, allow_nan=False).map(lambda v: f"{v:.4f}"),
        st.integers(-500, 500).map(str),
        st.sampled_from(["1.", ".5", "-.25", "+3", "0", "1.2.3"]),
    )
    out = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.integers(0, 9))
        if kind <= 5:
            g = draw(st.sampled_from(["", "G1 ", "G0 ", "G01 ", "G00 ", "G1", "G10 "]))
            words = [f"{c}{draw(num)}" for c in "XYZ" if draw(st.booleans())]
            if draw(st.booleans()):
                words.append(f"F{draw(st.sampled_from(['100', '2500.5', '0', '.5', '-3']))}")
            sep = draw(st.sampled_from([" ", ""]))
            out.append(g + sep.join(words) + draw(st.sampled_from(["\n", "\r\n", ""])))
        else:
            out.append(
                draw(
                    st.sampled_from(
                        [
                            "G91\n",
                            "G90\n",
                            "G20\n",
                            "G21\n",
                            "G93\n",
                            "G94\n",
                            "F600\n",
                            "M3 S1000\n",
                            "(comment)\n",
                            "G2 X10 Y0 I5 J0 F300\n",
                            "N10 G1 X1\n",
                            "g1 x2\n",
                            "G4 P0.5\n",
                            "M30\n",
                            "G1 F1200\n",
                        ]
                    )
                )
            )
    return out


@settings(max_examples=200, deadline=None)
@given(plain_lines())
def test_fast_path_builds_the_parsers_blocks(lines: list[str]) -> None:
    slow, fast = ModalState(), FastModalState()
    for i, line in enumerate(lines, 1):
        try:
            expected = slow.apply(line, i)
        except Exception as exc:  # the fast path must fail the same way
            try:
                fast.apply(line, i)
            except Exception as exc2:
                assert type(exc2) is type(exc) and str(exc2) == str(exc)
                return
            raise AssertionError(f"fast path accepted {line!r}") from exc
        got = fast.apply(line, i)
        assert got == expected, (line, got, expected)
        assert fast.position_mm == slow.position_mm
        assert fast.modal == slow.modal
