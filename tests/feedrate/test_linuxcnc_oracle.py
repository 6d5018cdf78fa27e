"""jha's G-code parser against an independent interpreter: LinuxCNC's `rs274` on the sample
programs LinuxCNC ships (issue 28 item 7; tests/peers/linuxcnc_rs274.py).

Every top-level program of the package's ncfiles folder goes through jha's up-front check for
the linuxcnc dialect (each line against the dialect, then the parser, as `jha feedrate` reads a
program). A program jha accepts must give the moves rs274 gives, in the same order: the same
kind (rapid, feed, arc), the same end point and, for arcs, the same centre and direction. rs274
prints 4 decimals, so "the same" is within half its last digit in the program's units (5e-5 mm,
1.27e-3 mm in an inch program), not the 1e-6 mm the issue asked for; a parser error is orders of
magnitude larger. Moves whose place jha cannot know (after a frame change: `path_known` False)
are left out of the comparison and counted. A program jha does not accept must be refused with
a reason that names its line.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.feedrate.gcode.blocks import Block, Motion, Units
from agent.feedrate.gcode.dialect import DIALECTS, validate_program_line
from agent.feedrate.gcode.lex import GcodeError
from agent.feedrate.gcode.parser import parse_lines
from tests.peers.linuxcnc_rs274 import (
    MM_PER_INCH,
    NCFILES,
    PRINT_RESOLUTION,
    RS274,
    CanonMove,
    interpret,
)
from tests.support.summary import record

PROGRAMS = sorted(NCFILES.glob("*.ngc"))
_KIND = {Motion.RAPID: "traverse", Motion.LINEAR: "feed", Motion.CW: "arc", Motion.CCW: "arc"}


@dataclass
class Verdict:
    accepted: bool
    reason: str = ""  # why jha refused it
    compared: int = 0  # moves compared with rs274
    unknown: int = 0  # moves jha cannot place (after a frame change)
    mismatches: list[str] = field(default_factory=list)


def jha_blocks(program: Path) -> tuple[list[Block], str]:
    """The motion blocks jha reads, or a refusal's reason."""
    dialect = DIALECTS["linuxcnc"]
    lines = program.read_text(errors="replace").splitlines(keepends=True)
    try:
        for line_no, text in enumerate(lines, 1):
            validate_program_line(text, dialect, line_no, compact=True)
        blocks = [b for b in parse_lines(lines) if b.motion is not None and not b.skipped]
    except GcodeError as exc:
        return [], str(exc)
    return blocks, ""


_ARCS = (Motion.CW, Motion.CCW)


def _moving(moves: list[CanonMove]) -> list[CanonMove]:
    out: list[CanonMove] = []
    at = (0.0, 0.0, 0.0)  # both start at the origin
    for move in moves:
        if move.kind == "arc" or not _close(move.end_mm, at, 1e-9):
            out.append(move)
        at = move.end_mm
    return out


def _close(a: tuple[float, float, float], b: tuple[float, float, float], tol: float) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def judge(program: Path, workdir: Path) -> Verdict:
    blocks, reason = jha_blocks(program)
    if reason:
        return Verdict(False, reason)
    oracle = interpret(program, workdir)
    # A motion word alone ("G00" with no axis) is a move to where the tool is in rs274 and no
    # move in jha: the same path. Zero-length straight moves are left out on both sides.
    moves = _moving(oracle.moves)
    blocks = [b for b in blocks if b.motion in _ARCS or b.length_mm > 0.0 or not b.path_known]
    verdict = Verdict(True)
    if len(moves) != len(blocks):
        verdict.mismatches.append(f"{len(blocks)} moves in jha, {len(moves)} in rs274")
    for b, move in zip(blocks, moves, strict=False):
        inch = b.modal.units is Units.INCH
        tol = PRINT_RESOLUTION * (MM_PER_INCH if inch else 1.0) + 1e-9
        if b.motion is None or not b.path_known:
            verdict.unknown += 1
            continue
        verdict.compared += 1
        where = f"line {b.line_no} {b.text.strip()!r} vs {move.call!r}"
        end = b.end_mm
        if _KIND[b.motion] != move.kind:
            verdict.mismatches.append(f"{where}: kind")
        elif not _close(end, move.end_mm, tol):
            verdict.mismatches.append(f"{where}: end {end}")
        elif move.kind == "arc":
            centre = b.centre_mm
            assert centre is not None and move.centre_mm is not None
            assert move.rotation is not None
            clockwise = move.rotation < 0
            if not _centre_in_plane(centre, move.centre_mm, tol):
                verdict.mismatches.append(f"{where}: centre {centre}")
            elif b.clockwise != clockwise:
                verdict.mismatches.append(f"{where}: direction")
    return verdict


def _centre_in_plane(
    a: tuple[float, float, float], b: tuple[float, float, float], tol: float
) -> bool:
    """rs274 gives the centre's normal coordinate as the arc's end on that axis (a helix);
    jha keeps the start's: equal when the two differ only along one axis."""
    return sum(not math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b, strict=True)) <= 1


def test_the_interpreter_is_there() -> None:
    assert RS274.exists(), "scripts/linuxcnc-rs274.sh (make test runs it) unpacks it"
    assert len(PROGRAMS) >= 40, PROGRAMS


def test_linuxcnc_sample_programs_match_rs274_or_are_refused_with_a_reason(
    tmp_path: Path,
) -> None:
    verdicts = {p.name: judge(p, tmp_path) for p in PROGRAMS}
    accepted = {n: v for n, v in verdicts.items() if v.accepted}
    refused = {n: v for n, v in verdicts.items() if not v.accepted}
    reasons = Counter(v.reason.split(": ", 1)[-1].split(" (")[0][:50] for v in refused.values())
    record(
        "LinuxCNC rs274 oracle",
        f"{len(PROGRAMS)} sample programs",
        f"{len(accepted)} accepted, "
        f"{sum(not v.mismatches for v in accepted.values())} matching rs274 "
        f"({sum(v.compared for v in accepted.values())} moves, "
        f"{sum(v.unknown for v in accepted.values())} after frame changes not compared)",
        f"{len(refused)} refused: " + "; ".join(f"{r} x{k}" for r, k in reasons.most_common(5)),
    )
    for name, v in refused.items():
        assert v.reason.startswith("line "), (name, v.reason)  # the refusal names its line
    wrong = {n: v.mismatches[:3] for n, v in accepted.items() if v.mismatches}
    assert wrong == {}, wrong
    assert accepted, "no sample program accepted: nothing was compared"


@pytest.mark.parametrize("text", ["G21 G90\nG0 X1\nG2 X3 Y0 I1 J0 F100\nM2\n"])
def test_a_small_program_gives_the_same_moves_in_both(text: str, tmp_path: Path) -> None:
    program = tmp_path / "small.ngc"
    program.write_text(text)
    verdict = judge(program, tmp_path)
    assert verdict.accepted and verdict.compared == 2 and verdict.mismatches == [], verdict
