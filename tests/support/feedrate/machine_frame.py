"""A small reference interpreter of G-code in machine coordinates, with the frame changes the
feedrate filter does not model: work offsets G54-G59 (a table given up front), G10 L2/L20,
G92/G92.1, tool length G43 H/G49 (a tool table of Z lengths), units G20/G21, G90/G91, G93/G94,
G0/G1 and G4. Arcs are not read (the programs built for it have none; the filter's output has
none either). Semantics as LinuxCNC documents them: machine = program + work offset + G92
offset + tool offset; F read in the units in force after the line's G20/G21 (GRBL's order, as
agent.feedrate.gcode.parser). Independent of the parser under test: only the lexer is shared.

Used by tests/feedrate/test_filter_modal_changes.py to compare a program and its filtered
output where they matter: the path the machine runs and how long each move takes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.feedrate.gcode.lex import lex_line

Vec3 = tuple[float, float, float]
_AXES = "XYZ"
_SYSTEMS = {540: 1, 550: 2, 560: 3, 570: 4, 580: 5, 590: 6, 591: 7, 592: 8, 593: 9}


@dataclass(frozen=True)
class MachineMove:
    """One move in machine coordinates (mm); `duration_s` None for a rapid."""

    line_index: int  # 0-based index of the program line
    start: Vec3
    end: Vec3
    duration_s: float | None

    @property
    def length_mm(self) -> float:
        return math.dist(self.start, self.end)


@dataclass
class MachineRun:
    """What a program does on the machine: its moves and the time spent in G4 dwells."""

    moves: list[MachineMove] = field(default_factory=list)
    dwell_s: float = 0.0

    @property
    def end(self) -> Vec3 | None:
        return self.moves[-1].end if self.moves else None

    def feed_time_s(self) -> float:
        return sum(m.duration_s or 0.0 for m in self.moves) + self.dwell_s


class ReferenceMachine:
    """Interprets lines one after another (see the module docstring)."""

    def __init__(
        self,
        work_offsets_mm: Mapping[int, Vec3],
        tool_lengths_mm: Mapping[int, float],
        program_start_mm: Vec3 = (0.0, 0.0, 0.0),
    ) -> None:
        self.g5x = {n: list(work_offsets_mm.get(n, (0.0, 0.0, 0.0))) for n in range(1, 10)}
        self.tools = dict(tool_lengths_mm)
        self.system = 1
        self.g92 = [0.0, 0.0, 0.0]
        self.tool = [0.0, 0.0, 0.0]
        self.scale = 1.0
        self.absolute = True
        self.inverse_time = False
        self.feed_mm_s: float | None = None
        self.motion: int | None = None
        self.machine = [p + o for p, o in zip(program_start_mm, self.g5x[1], strict=True)]
        self.run = MachineRun()

    def _offset(self, i: int) -> float:
        return self.g5x[self.system][i] + self.g92[i] + self.tool[i]

    def program_position(self) -> Vec3:
        x, y, z = (self.machine[i] - self._offset(i) for i in range(3))
        return (x, y, z)

    def apply(self, text: str, index: int) -> None:
        lx = lex_line(text, index + 1)
        if lx.tape_mark or not (lx.g or lx.m or lx.values):
            return
        g = set(lx.g)
        v = lx.values
        if 200 in g:
            self.scale = 25.4
        if 210 in g:
            self.scale = 1.0
        if 930 in g:
            self.inverse_time, self.feed_mm_s = True, None
        if 940 in g:
            if self.inverse_time:
                self.feed_mm_s = None
            self.inverse_time = False
        if "F" in v and not self.inverse_time:
            self.feed_mm_s = v["F"] * self.scale / 60.0
        if 40 in g:
            self.run.dwell_s += v["P"]
            return
        if 430 in g:
            self.tool = [0.0, 0.0, self.tools[int(v["H"])]]
        if 490 in g:
            self.tool = [0.0, 0.0, 0.0]
        for code, n in _SYSTEMS.items():
            if code in g:
                self.system = n
        if 900 in g:
            self.absolute = True
        if 910 in g:
            self.absolute = False
        if 100 in g:
            self._g10(int(v["L"]), int(v["P"]), v)
            return
        if 920 in g:
            for i, a in enumerate(_AXES):
                if a in v:
                    program = v[a] * self.scale
                    self.g92[i] = (
                        self.machine[i] - self.g5x[self.system][i] - self.tool[i] - program
                    )
            return
        if 921 in g:
            self.g92 = [0.0, 0.0, 0.0]
        for code in (0, 10):
            if code in g:
                self.motion = code
        if any(a in v for a in _AXES):
            self._move(index, v)

    def _g10(self, kind: int, p: int, v: Mapping[str, float]) -> None:
        n = self.system if p == 0 else p
        for i, a in enumerate(_AXES):
            if a not in v:
                continue
            value = v[a] * self.scale
            if kind == 2:
                self.g5x[n][i] = value
            else:  # L20: the current point gets the given coordinates in system n
                self.g5x[n][i] = self.machine[i] - self.g92[i] - self.tool[i] - value

    def _move(self, index: int, v: Mapping[str, float]) -> None:
        if self.motion is None:
            raise ValueError(f"line {index + 1}: axis words without G0/G1")
        program = list(self.program_position())
        for i, a in enumerate(_AXES):
            if a in v:
                program[i] = v[a] * self.scale + (0.0 if self.absolute else program[i])
        start = (self.machine[0], self.machine[1], self.machine[2])
        end_list = [program[i] + self._offset(i) for i in range(3)]
        end = (end_list[0], end_list[1], end_list[2])
        duration: float | None = None
        if self.motion == 10:
            if self.inverse_time:
                duration = 60.0 / v["F"]
            else:
                if self.feed_mm_s is None:
                    raise ValueError(f"line {index + 1}: feed move without F")
                duration = math.dist(start, end) / self.feed_mm_s
        self.machine = end_list
        self.run.moves.append(MachineMove(index, start, end, duration))


def run_on_machine(
    lines: Sequence[str],
    work_offsets_mm: Mapping[int, Vec3],
    tool_lengths_mm: Mapping[int, float],
) -> MachineRun:
    """The moves of `lines` in machine coordinates (the program starts at its own origin in
    G54)."""
    m = ReferenceMachine(work_offsets_mm, tool_lengths_mm)
    for i, text in enumerate(lines):
        m.apply(text, i)
    return m.run


def distance_to_path(point: Vec3, moves: Sequence[MachineMove]) -> float:
    """Distance (mm) from a point to the polyline of `moves` (rapids included)."""
    best = math.inf
    for mv in moves:
        a, b = mv.start, mv.end
        d = [b[i] - a[i] for i in range(3)]
        dd = d[0] ** 2 + d[1] ** 2 + d[2] ** 2
        t = 0.0 if dd == 0.0 else sum((point[i] - a[i]) * d[i] for i in range(3)) / dd
        t = min(1.0, max(0.0, t))
        q = (a[0] + t * d[0], a[1] + t * d[1], a[2] + t * d[2])
        best = min(best, math.dist(point, q))
    return best
