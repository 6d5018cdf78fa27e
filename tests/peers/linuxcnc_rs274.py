"""Oracle: LinuxCNC's standalone interpreter `rs274` (Debian's linuxcnc-uspace, unpacked into
var/linuxcnc by scripts/linuxcnc-rs274.sh, which `make test` runs).

`rs274 -t TOOLS -g FILE` interprets a program in batch mode and prints each canonical machining
call it makes, one per line, with its numbers to 4 decimals (saicanon.cc):

    9 N..... STRAIGHT_FEED(10.0000, 5.0000, 0.0000, 0.0000, 0.0000, 0.0000)
   10 N..... ARC_FEED(20.0000, 5.0000, 15.0000, 5.0000, -1, 0.0000, 0.0000, 0.0000, 0.0000)

Coordinates are program coordinates (AXIS adds the G5x and G92 offsets itself, rs274/interpret.py
Translated) in the program's length units (USE_LENGTH_UNITS). ARC_FEED's arguments are in the
plane's order: end (first, second), centre (first, second), rotation (>0 counter-clockwise,
<0 clockwise, |rotation| - 1 extra turns), the end on the axis normal to the plane, then A B C.
SELECT_PLANE names the plane: XY (first X, second Y, normal Z), XZ (Z, X; Y), YZ (Y, Z; X).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT

LINUXCNC = ROOT / "var" / "linuxcnc"
RS274 = LINUXCNC / "usr" / "bin" / "rs274"
NCFILES = LINUXCNC / "usr" / "share" / "linuxcnc" / "ncfiles"
MM_PER_INCH = 25.4
# rs274 prints 4 decimals: half the last digit, in the program's units.
PRINT_RESOLUTION = 0.5e-4

_CALL = re.compile(r"^\s*\d+\s+N\S*\s+([A-Z_]+)\((.*)\)\s*$")
# (first, second, normal) axis indices (X 0, Y 1, Z 2) of each plane rs274 selects.
_PLANES = {
    "CANON_PLANE_XY": (0, 1, 2),
    "CANON_PLANE_XZ": (2, 0, 1),
    "CANON_PLANE_YZ": (1, 2, 0),
}


@dataclass(frozen=True)
class CanonMove:
    """One motion call: end point and (arcs) centre in mm, program coordinates."""

    kind: str  # "traverse", "feed", "arc"
    end_mm: tuple[float, float, float]
    centre_mm: tuple[float, float, float] | None = None
    rotation: int | None = None  # arcs: > 0 counter-clockwise, < 0 clockwise
    call: str = ""  # the line rs274 printed


@dataclass(frozen=True)
class Interpretation:
    moves: list[CanonMove]
    errors: list[str]  # what rs274 said on stderr or as an error line
    returncode: int


def environment() -> dict[str, str]:
    lib = [LINUXCNC / "usr" / "lib", LINUXCNC / "usr" / "lib" / "x86_64-linux-gnu"]
    return {**os.environ, "LD_LIBRARY_PATH": ":".join(str(p) for p in lib)}


def interpret(program: Path, workdir: Path, timeout_s: float = 20.0) -> Interpretation:
    """Run `rs274` on `program` (a tool table of 20 tools is written to `workdir`)."""
    tools = workdir / "tool.tbl"
    if not tools.exists():
        tools.write_text("".join(f"T{k} P{k} Z0 D0.25 ;\n" for k in range(1, 21)))
    proc = subprocess.run(
        [str(RS274), "-t", str(tools), "-g", str(program)],
        cwd=workdir,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return Interpretation(parse(proc.stdout), _errors(proc), proc.returncode)


def _errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    lines += [ln.strip() for ln in proc.stdout.splitlines() if "error" in ln.lower()]
    return lines


def parse(text: str) -> list[CanonMove]:
    """The motion calls of rs274's output, in mm."""
    scale, plane = 1.0, _PLANES["CANON_PLANE_XY"]
    moves: list[CanonMove] = []
    for line in text.splitlines():
        m = _CALL.match(line)
        if m is None:
            continue
        name, args = m.group(1), m.group(2)
        if name == "USE_LENGTH_UNITS":
            scale = MM_PER_INCH if "INCHES" in args else 1.0
        elif name == "SELECT_PLANE":
            plane = _PLANES[args.strip()]
        elif name in ("STRAIGHT_TRAVERSE", "STRAIGHT_FEED"):
            v = [float(x) for x in args.split(",")]
            end = (v[0] * scale, v[1] * scale, v[2] * scale)
            kind = "traverse" if name == "STRAIGHT_TRAVERSE" else "feed"
            moves.append(CanonMove(kind, end, call=line.strip()))
        elif name == "ARC_FEED":
            v = [float(x) for x in args.split(",")]
            first, second, normal = plane
            end = [0.0, 0.0, 0.0]
            centre = [0.0, 0.0, 0.0]
            end[first], end[second], end[normal] = v[0], v[1], v[5]
            centre[first], centre[second], centre[normal] = v[2], v[3], v[5]
            moves.append(
                CanonMove(
                    "arc",
                    (end[0] * scale, end[1] * scale, end[2] * scale),
                    (centre[0] * scale, centre[1] * scale, centre[2] * scale),
                    int(v[4]),
                    line.strip(),
                )
            )
    return moves
