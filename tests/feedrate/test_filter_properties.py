"""Property tests of the streaming feedrate filter on random toolpaths (its acceptance properties).

For random programs (lines and arcs in G17/G18/G19, G90/G91, mm or inch, G94 or G93, comment
lines, feed changes, rapids) on random machines (dialect, G93 output, retrograde or not,
window length, lookahead): the output path stays within eps of the input path, passes through
every input block end and ends where the input ends, every line is valid for the dialect, every
feed is positive, the output takes the input's time plus what the filter says it added, and
every line the filter did not replace is written byte for byte, in order.

The path model and the output checks are in tests/support/feedrate/toolpath.py.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.feedrate.filter.fast import FastModalState
from agent.feedrate.gcode.dialect import DIALECTS
from agent.feedrate.gcode.parser import ModalState
from agent.feedrate.machine import (
    LookaheadSettings,
    MachineSettings,
    ModulationSettings,
)
from tests.support.feedrate.toolpath import (
    AXIS,
    check_output,
    machine,
)

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
