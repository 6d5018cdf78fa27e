"""Random G-code programs (every modal group, arcs in all planes, decorated lines) through the
parser and the emitter: canonical output and replaced blocks keep the program's geometry."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.feedrate.gcode.blocks import PLANE_OFFSETS, Block, DistanceMode, Modal, Units
from agent.feedrate.gcode.dialect import DIALECTS, validate_output_line
from agent.feedrate.gcode.emit import GcodeEmitter, canonical_lines
from agent.feedrate.gcode.lex import checksum
from agent.feedrate.gcode.parser import parse_lines
from agent.feedrate.geometry.primitives import Plane
from tests.support.feedrate.gcode import close, parse

# -- random programs ------------------------------------------------------------------------------


@dataclass
class _Gen:
    """The generator's own model of the program it writes (what the parser should find)."""

    units: Units = Units.MM
    distance: DistanceMode = DistanceMode.ABSOLUTE
    plane: Plane = Plane.XY
    inverse: bool = False
    feed_defined: bool = True
    pos: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    lines: list[str] = field(default_factory=list)


def _coord_words(g: _Gen, target: list[float], axes: list[int]) -> str:
    scale = g.units.mm_per_unit
    words = []
    for i in axes:
        value = target[i] if g.distance is DistanceMode.ABSOLUTE else target[i] - g.pos[i]
        text = f"{value / scale:.6f}"
        words.append("XYZ"[i] + text)
        parsed = float(text) * scale
        g.pos[i] = parsed if g.distance is DistanceMode.ABSOLUTE else g.pos[i] + parsed
    return " ".join(words)


@st.composite
def _decorate(draw: st.DrawFn, code: str) -> str:
    """Case, spacing, line number, comments, checksum and line end, all at random."""
    style = draw(st.sampled_from(["plain", "lower", "tight", "wide"]))
    text = {"plain": code, "lower": code.lower(), "tight": code.replace(" ", ""),
            "wide": code.replace(" ", " \t ")}[style]  # fmt: skip
    if draw(st.booleans()):
        text = f"N{draw(st.integers(0, 99999))} {text}"
    text += draw(st.sampled_from(["", " (note)", "(x)"]))
    if draw(st.booleans()):
        text = f"{text}*{checksum(text)}"
    text += draw(st.sampled_from(["", " ; tail X9 *"]))
    return text + draw(st.sampled_from(["\n", "\r\n"]))


@st.composite
def programs(draw: st.DrawFn, max_ops: int = 20) -> str:
    g = _Gen()
    g.lines.append("G21 G90 G17 G94 F600\n")
    coord = st.floats(-50, 50, allow_nan=False).map(lambda v: round(v, 3))
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(
            ["units", "distance", "plane", "feedmode", "rapid", "line", "line", "arc", "arc",
             "arc_r", "full", "other", "end"]
        ))  # fmt: skip
        code = ""
        feed = ""
        if op in ("line", "arc", "arc_r", "full") and (g.inverse or not g.feed_defined):
            feed = f" F{draw(st.floats(1, 600)):.3f}"
            g.feed_defined = not g.inverse
        elif op in ("line", "arc", "arc_r") and draw(st.booleans()):
            feed = f" F{draw(st.floats(10, 3000)):.1f}"
        if op == "units":
            g.units = draw(st.sampled_from(list(Units)))
            code = f"G{g.units.value}"
        elif op == "distance":
            g.distance = draw(st.sampled_from(list(DistanceMode)))
            code = f"G{g.distance.value}"
        elif op == "plane":
            g.plane = draw(st.sampled_from(list(Plane)))
            code = f"G{ {Plane.XY: 17, Plane.ZX: 18, Plane.YZ: 19}[g.plane] }"
        elif op == "feedmode":
            inverse = draw(st.booleans())
            if inverse != g.inverse:
                g.feed_defined = False
            g.inverse = inverse
            code = "G93" if inverse else "G94"
        elif op in ("rapid", "line"):
            axes = draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True))
            target = list(g.pos)
            for i in axes:
                target[i] = draw(coord)
            code = ("G0 " if op == "rapid" else "G1 ") + _coord_words(g, target, sorted(axes))
        elif op in ("arc", "arc_r", "full"):
            ia, ib, inn = g.plane.value
            first, second = PLANE_OFFSETS[g.plane]
            radius = draw(st.floats(1.0, 30.0))
            cw = draw(st.booleans())
            scale = g.units.mm_per_unit
            word = "G2" if cw else "G3"
            if op == "full":
                phi0 = draw(st.floats(0, 2 * math.pi))
                off = (-radius * math.cos(phi0) / scale, -radius * math.sin(phi0) / scale)
                code = f"{word} {first}{off[0]:.6f} {second}{off[1]:.6f}"
            elif op == "arc":
                phi0 = draw(st.floats(0, 2 * math.pi))
                sweep = draw(st.floats(0.2, 2 * math.pi - 0.2))
                ca = g.pos[ia] - radius * math.cos(phi0)
                cb = g.pos[ib] - radius * math.sin(phi0)
                phi1 = phi0 + (-sweep if cw else sweep)
                target = list(g.pos)
                target[ia] = ca + radius * math.cos(phi1)
                target[ib] = cb + radius * math.sin(phi1)
                off = ((ca - g.pos[ia]) / scale, (cb - g.pos[ib]) / scale)
                axes = [ia, ib]
                if draw(st.booleans()):
                    target[inn] = draw(coord)
                    axes.append(inn)
                words = _coord_words(g, target, sorted(axes))
                code = f"{word} {words} {first}{off[0]:.6f} {second}{off[1]:.6f}"
            else:
                angle = draw(st.floats(0, 2 * math.pi))
                chord = draw(st.floats(1.0, 40.0))
                target = list(g.pos)
                target[ia] += chord * math.cos(angle)
                target[ib] += chord * math.sin(angle)
                r = chord / 2 * draw(st.floats(1.05, 3.0)) * draw(st.sampled_from([1, -1]))
                words = _coord_words(g, target, sorted([ia, ib]))
                code = f"{word} {words} R{r / scale:.6f}"
        elif op == "other":
            code = draw(st.sampled_from(["M3 S1200", "M5", "G4 P0.2", "T2 M6", "(comment)", ""]))
        elif op == "end":
            code = "M2"
            g.plane, g.distance = Plane.XY, DistanceMode.ABSOLUTE
            if g.inverse:
                g.inverse, g.feed_defined = False, False
        g.lines.append(draw(_decorate(code + feed)) if code and code[0] != "(" else code + "\n")
    return "".join(g.lines)


def _same_geometry(a: Block, b: Block, tol: float = 2e-3) -> None:
    assert a.motion is b.motion
    assert close(a.end_mm, b.end_mm, tol), (a.text, b.text)
    assert (a.arc is None) == (b.arc is None)
    if a.arc is not None and b.arc is not None:
        assert a.arc.plane is b.arc.plane and a.arc.clockwise == b.arc.clockwise
        assert close(a.arc.centre, b.arc.centre, tol)
        assert a.arc.sweep_rad == pytest.approx(b.arc.sweep_rad, abs=1e-3)
    if a.feed_mm_s is None:
        assert b.feed_mm_s is None
    else:
        assert b.feed_mm_s == pytest.approx(a.feed_mm_s, rel=1e-6, abs=1e-6)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(programs())
def test_random_programs_round_trip_to_equivalent_geometry(text: str) -> None:
    blocks = parse(text)
    assert "".join(b.text for b in blocks) == text
    original = [b for b in blocks if b.motion is not None and b.feed_mm_s != 0.0]
    emitted = list(canonical_lines(blocks))
    for i, line in enumerate(emitted, 1):
        validate_output_line(line, "generic", i)
    again = [b for b in parse_lines(emitted) if b.motion is not None]
    assert len(again) == len(original)
    for a, b in zip(original, again, strict=True):
        _same_geometry(a, b)


# Half a unit of the last decimal on each of three axes: GRBL writes inch programs with 4.
TOL_MM = math.sqrt(3) * 0.5e-4 * 25.4 * 1.01


def _modal_equal(a: Modal, b: Modal, *, motion: bool = True) -> None:
    assert (a.units, a.distance, a.plane, a.feed_mode) == (
        b.units, b.distance, b.plane, b.feed_mode,
    )  # fmt: skip
    if motion:
        assert a.motion is b.motion
    if a.feed_mm_s is not None:  # an undefined feed may have become defined: harmless
        assert b.feed_mm_s == pytest.approx(a.feed_mm_s, rel=1e-3)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(programs(), st.data())
def test_random_replacements_keep_the_program_intact(text: str, data: st.DataObject) -> None:
    """Replacing any blocks by segments leaves every other line meaning what it meant: same
    positions, same modal state after it; the segments land where asked at the asked rates
    and every line the emitter writes is valid for the dialect."""
    dialect = data.draw(st.sampled_from([DIALECTS["generic"], DIALECTS["linuxcnc"],
                                         DIALECTS["grbl"]]))  # fmt: skip
    em = GcodeEmitter(dialect, inverse_time=data.draw(st.booleans()))
    blocks = parse(text)
    out: list[str] = []
    emitted: list[str] = []
    n_out = 0
    kept: list[tuple[Block, int]] = []
    asked: list[tuple[int, int, list[tuple[float, float, float]], list[float], bool]] = []
    for b in blocks:
        if b.motion is not None and b.length_mm > 0.5 and data.draw(st.booleans()):
            prim = b.primitive()
            assert prim is not None
            # a full circle needs a point on the way round
            least = 1 if b.start_mm == b.end_mm else 0
            fr = sorted(data.draw(st.sets(st.integers(1, 19), min_size=least, max_size=4)))
            pts = [prim.point(prim.length * f / 20) for f in fr] + [b.end_mm]
            by_time = data.draw(st.booleans())
            rates = [data.draw(st.floats(0.05, 2.0) if by_time else st.floats(1.0, 100.0))
                     for _ in pts]  # fmt: skip
            kw = {"durations_s" if by_time else "feeds_mm_s": rates}
            chunk = em.replace(b, pts, **kw)  # type: ignore[arg-type]
            asked.append((n_out, n_out + chunk.count("\n"), pts, rates, by_time))
            emitted += chunk.splitlines()
        else:
            chunk = em.passthrough(b)
            kept.append((b, n_out + chunk.count("\n") - 1))
            emitted += chunk.splitlines()[:-1]  # restore lines, if any
        out.append(chunk)
        n_out += chunk.count("\n")
    out.append(em.flush())
    emitted += out[-1].splitlines()
    for i, line in enumerate(emitted, 1):
        validate_output_line(line, dialect, i)
    result = parse("".join(out))
    for b, idx in kept:
        assert close(result[idx].end_mm, b.end_mm, TOL_MM), (b.text, result[idx].text)
        # A modal G2/G3 comes back with the next move that relies on it.
        _modal_equal(b.modal, result[idx].modal, motion=b.motion is not None)
    for lo, hi, pts, rates, by_time in asked:
        segs = [r for r in result[lo:hi] if r.motion is not None]
        assert len(segs) == len(pts)
        for seg, p, rate in zip(segs, pts, rates, strict=True):
            assert close(seg.end_mm, p, TOL_MM)
            # Rounded end points change a segment's length by up to two such errors, and
            # with it the rate that follows from length and F.
            rel = 1e-4 + 2 * TOL_MM / seg.length_mm
            if by_time:
                assert seg.duration_s == pytest.approx(rate, rel=rel, abs=1e-6)
            else:
                # F itself is written to the dialect's feed decimals, in the program's units.
                f_step_mm_s = 0.5 * 10.0**-dialect.feed_decimals * seg.modal.units.mm_per_unit / 60
                assert seg.feed_mm_s == pytest.approx(rate, rel=rel, abs=f_step_mm_s)
    _modal_equal(blocks[-1].modal, result[-1].modal, motion=False)
