"""The GRBL peer's g-code parser (GRBL 1.1's gcode.c, default build): which words a line may
hold, GRBL's error codes for the ones it may not, and the steps a line asks of the machine
(firmware.py runs them: motions into the planner of motion.py, buffer syncs, dwells).

Supported as the GRBL 1.1 wiki's "G-code support" lists it: G0-G3, G4, G10 L2/L20, G17-G19,
G20/G21, G28/G30 and G28.1/G30.1, G38.2-G38.5, G40, G43.1/G49, G53, G54-G59, G61, G80, G90/G91,
G91.1, G92/G92.1, G93/G94; M0, M1, M2, M30, M3-M5, M8, M9 (M7 and M56 are off in the default
config.h); words F I J K L N P R S T X Y Z. Coordinates are kept in machine mm; work offsets
(G54-G59, G92, G43.1) apply as GRBL applies them. Probing: the probe input changes halfway
along every probing move, which stops there (no workpiece is simulated).
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

_WORD = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))")
_LETTERS = frozenset("FGIJKLMNPRSTXYZ")
_NON_MODAL = frozenset({40, 100, 280, 281, 300, 301, 530, 920, 921})
_AXIS_NON_MODAL = frozenset({100, 280, 300, 920})  # take axis words: no motion on their line
_G_GROUPS = {
    **dict.fromkeys(_NON_MODAL, "non_modal"),
    **dict.fromkeys((0, 10, 20, 30, 382, 383, 384, 385, 800), "motion"),
    **dict.fromkeys((170, 180, 190), "plane"),
    **dict.fromkeys((900, 910), "distance"),
    911: "arc_distance",
    **dict.fromkeys((930, 940), "feed"),
    **dict.fromkeys((200, 210), "units"),
    400: "cutter",
    **dict.fromkeys((431, 490), "tool_length"),
    **dict.fromkeys((540, 550, 560, 570, 580, 590), "wcs"),
    610: "path",
}
# Integer parts whose other fractions GRBL names unsupported (error:20) rather than
# non-integer (error:23): G28.x, G30.x, G92.x, G38.x, G90.1, G91.x, G43.x, G61.1.
_FRACTION_UNSUPPORTED = frozenset({28, 30, 92, 38, 90, 91, 43, 61})
_M_GROUPS = {0: "stop", 1: "stop", 2: "stop", 30: "stop", 3: "spindle", 4: "spindle"}
_M_GROUPS |= {5: "spindle", 8: "coolant", 9: "coolant"}
_PLANES = {170: (0, 1, 2), 180: (2, 0, 1), 190: (1, 2, 0)}
_OFFSETS = {170: ("I", "J"), 180: ("K", "I"), 190: ("J", "K")}

Step = tuple[Any, ...]  # ("move", points, mm/s) | ("sync", effects) | ("dwell", s)


class GrblError(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


class Parser:
    """GRBL's g-code parser state; `parse` returns the steps a line asks of the machine, or
    [("soft_limit",)] for a target outside the travel."""

    def __init__(self, travel: tuple[float, float, float] | None) -> None:
        self.travel = travel
        self.position = [0.0, 0.0, 0.0]  # machine mm, end of the last parsed motion
        self.wcs = [[0.0, 0.0, 0.0] for _ in range(6)]  # G54-G59, kept across a reset
        self.stored = {280: [0.0, 0.0, 0.0], 300: [0.0, 0.0, 0.0]}  # G28.1 / G30.1
        self.defaults()

    def defaults(self) -> None:
        """The modal state after power-up or a soft reset (gc_init)."""
        self.motion, self.plane, self.scale, self.absolute = 0, 170, 1.0, True
        self.inverse, self.feed, self.coord = False, 0.0, 0  # feed: mm/min
        self.g92 = [0.0, 0.0, 0.0]
        self.tool_offset = 0.0
        self.spindle, self.rpm, self.coolant = "off", 0.0, False

    def offset(self, axis: int) -> float:
        return (
            self.wcs[self.coord][axis] + self.g92[axis] + (self.tool_offset if axis == 2 else 0.0)
        )

    def parse(self, line: str) -> list[Step]:
        words: dict[str, float] = {}
        gs: dict[str, int] = {}
        ms: dict[str, int] = {}
        pos = 0
        while pos < len(line):
            letter = line[pos]
            if not "A" <= letter <= "Z":
                raise GrblError(1)
            m = _WORD.match(line, pos + 1)
            if m is None:
                raise GrblError(2)
            value, pos = float(m.group(1)), m.end()
            if letter not in _LETTERS:
                raise GrblError(20)
            if letter == "G":
                code = round(value * 10)
                group = _G_GROUPS.get(code)
                if group is None or abs(value * 10 - code) > 1e-6:
                    whole = math.trunc(value)
                    fraction = abs(value - whole) > 1e-6
                    raise GrblError(23 if fraction and whole not in _FRACTION_UNSUPPORTED else 20)
                if group in gs:
                    raise GrblError(21)
                gs[group] = code
            elif letter == "M":
                if value != int(value):
                    raise GrblError(23)
                mgroup = _M_GROUPS.get(int(value))
                if mgroup is None:
                    raise GrblError(20)
                if mgroup in ms:
                    raise GrblError(21)
                ms[mgroup] = int(value)
            elif letter in words:
                raise GrblError(25)
            else:
                if letter in "FNPST" and value < 0:
                    raise GrblError(4)
                if letter == "N" and value > 9_999_999:
                    raise GrblError(27)
                if letter == "T" and value > 255:
                    raise GrblError(38)
                words[letter] = value
        return self._execute(words, gs, ms)

    def _execute(
        self, words: dict[str, float], gs: dict[str, int], ms: dict[str, int]
    ) -> list[Step]:
        # A rejected line changes nothing: modal state is committed only at the end.
        non_modal = gs.get("non_modal")
        if non_modal in _AXIS_NON_MODAL and "motion" in gs and gs["motion"] != 800:
            raise GrblError(24)
        moving = "motion" in gs and gs["motion"] != 800  # G80 takes no axis words
        if "tool_length" in gs and (moving or non_modal in _AXIS_NON_MODAL):
            raise GrblError(24)
        plane = gs.get("plane", self.plane)
        scale = {200: 25.4, 210: 1.0}.get(gs.get("units", 0), self.scale)
        absolute = gs["distance"] == 900 if "distance" in gs else self.absolute
        inverse = gs["feed"] == 930 if "feed" in gs else self.inverse
        coord = (gs["wcs"] - 540) // 10 if "wcs" in gs else self.coord
        feed = self.feed if inverse == self.inverse else 0.0
        if "F" in words:
            feed = words["F"] if inverse else words["F"] * scale
        motion = gs.get("motion", self.motion)
        has_feed = "F" in words
        for k in "NF":
            words.pop(k, None)
        steps: list[Step] = []
        effects: dict[str, Any] = {}
        spindle, rpm, coolant = self.spindle, words.pop("S", self.rpm), self.coolant
        words.pop("T", None)  # a tool number is taken and ignored (no M6 in GRBL)
        if "spindle" in ms:
            spindle = {3: "cw", 4: "ccw", 5: "off"}[ms["spindle"]]
        if "coolant" in ms:
            coolant = ms["coolant"] == 8
        if (spindle, rpm, coolant) != (self.spindle, self.rpm, self.coolant) or "spindle" in ms:
            effects |= {"spindle": spindle, "rpm": rpm if spindle != "off" else 0.0}
            effects |= {"coolant": coolant}
        axes = [k for k in "XYZ" if k in words]
        given = {k: words.pop(k) for k in axes}
        tool_offset = self.tool_offset
        if "tool_length" in gs:
            if gs["tool_length"] == 490:
                tool_offset = 0.0
            else:
                if "Z" not in given or len(given) != 1:
                    raise GrblError(37)
                tool_offset = given.pop("Z") * scale
                axes = []
        if non_modal == 40:
            if "P" not in words:
                raise GrblError(28)
            steps += [("sync", {}), ("dwell", words.pop("P"))]
        elif non_modal == 100:
            self._g10(words, given, scale, coord)
            steps.append(("sync", {}))  # GRBL syncs the planner before an EEPROM write
            axes = []
        elif non_modal in (281, 301):
            self.stored[non_modal - 1] = list(self.position)
            steps.append(("sync", {}))
        elif non_modal == 920:
            if not given:
                raise GrblError(26)
            g92 = list(self.g92)
            for i, k in enumerate("XYZ"):
                if k in given:
                    base = self.wcs[coord][i] + (tool_offset if i == 2 else 0.0)
                    g92[i] = self.position[i] - base - given[k] * scale
            self.g92, axes = g92, []
        elif non_modal == 921:
            self.g92 = [0.0, 0.0, 0.0]
        unused = set(words) - ({"I", "J", "K", "R"} if motion in (20, 30) else set())
        if unused:
            raise GrblError(36)
        if ms:
            steps.append(("sync", effects | ({"stop": ms["stop"]} if "stop" in ms else {})))
        elif effects:
            steps.append(("sync", effects))
        target = list(self.position)
        moved: list[tuple[float, ...]] = []
        speed = math.inf
        if non_modal in (280, 300):
            home = self.stored[non_modal]
            for i, k in enumerate("XYZ"):
                if k in given:
                    target[i] = self._coordinate(i, given[k], scale, absolute, coord, tool_offset)
            moved = [tuple(target)] if given else []
            target = [home[i] if ("XYZ"[i] in given or not given) else target[i] for i in range(3)]
            moved.append(tuple(target))
        elif axes or ("motion" in gs and motion not in (0, 10, 800)):
            if motion == 800:
                raise GrblError(31)
            if not axes:
                raise GrblError(26)
            if non_modal == 530 and motion not in (0, 10):
                raise GrblError(30)
            for i, k in enumerate("XYZ"):
                if k in given:
                    if non_modal == 530:
                        target[i] = given[k] * scale
                    else:
                        target[i] = self._coordinate(
                            i, given[k], scale, absolute, coord, tool_offset
                        )
            if motion and (feed <= 0 or (inverse and not has_feed)):
                raise GrblError(22)
            if motion in (20, 30):
                moved = self._arc(words, given, target, scale, plane, motion == 20)
            elif 382 <= motion <= 385:
                if target == self.position:
                    raise GrblError(33)
                target = [(p + t) / 2.0 for p, t in zip(self.position, target, strict=True)]
                moved = [tuple(target)]
            else:
                moved = [tuple(target)]
            if motion:
                speed = feed / 60.0
                if inverse:  # G93: the whole line takes 60 / F seconds
                    path = [tuple(self.position), *moved]
                    speed = sum(math.dist(a, b) for a, b in itertools.pairwise(path)) * feed / 60.0
        if (
            moved
            and self.travel
            and any(abs(c) > t for p in moved for c, t in zip(p, self.travel, strict=True))
        ):
            return [("soft_limit",)]
        if moved:
            probe = 382 <= motion <= 385 and non_modal is None
            steps += [("sync", {})] if probe else []
            steps.append(("move", moved, speed))
            steps += [("sync", {})] if probe else []
            self.position = target
        self.plane, self.scale, self.absolute, self.inverse = plane, scale, absolute, inverse
        self.feed, self.motion, self.coord, self.tool_offset = feed, motion, coord, tool_offset
        self.spindle, self.rpm, self.coolant = spindle, rpm, coolant
        if ms.get("stop") in (2, 30):  # program end: GRBL's modal reset, spindle and coolant off
            self.motion, self.plane, self.absolute, self.inverse = 10, 170, True, False
            self.coord, self.spindle, self.rpm, self.coolant = 0, "off", 0.0, False
        return steps

    def _coordinate(
        self, i: int, value: float, scale: float, absolute: bool, coord: int, tool: float
    ) -> float:
        if not absolute:
            return self.position[i] + value * scale
        return value * scale + self.wcs[coord][i] + self.g92[i] + (tool if i == 2 else 0.0)

    def _g10(
        self, words: dict[str, float], given: dict[str, float], scale: float, coord: int
    ) -> None:
        if "L" not in words or "P" not in words:
            raise GrblError(28)
        mode, index = words.pop("L"), words.pop("P")
        if mode not in (2.0, 20.0):
            raise GrblError(20)
        if index != int(index) or index > 6:
            raise GrblError(29)
        if not given:
            raise GrblError(26)
        system = coord if index == 0 else int(index) - 1
        offsets = list(self.wcs[system])
        for i, k in enumerate("XYZ"):
            if k in given:
                if mode == 2.0:
                    offsets[i] = given[k] * scale
                else:  # L20: the current position becomes the given work coordinate
                    extra = self.g92[i] + (self.tool_offset if i == 2 else 0.0)
                    offsets[i] = self.position[i] - extra - given[k] * scale
        self.wcs[system] = offsets

    def _arc(
        self,
        words: dict[str, float],
        given: dict[str, float],
        target: list[float],
        scale: float,
        plane: int,
        cw: bool,
    ) -> list[tuple[float, ...]]:
        a, b, n = _PLANES[plane]
        first, second = _OFFSETS[plane]
        start = self.position
        if "XYZ"[a] not in given and "XYZ"[b] not in given:
            raise GrblError(32)
        if target[a] == start[a] and target[b] == start[b] and "R" in words:
            raise GrblError(33)
        x, y = target[a] - start[a], target[b] - start[b]
        if "R" in words:
            r = words["R"] * scale
            h2 = 4.0 * r * r - x * x - y * y
            if h2 < 0:
                raise GrblError(34)
            h = -math.sqrt(h2) / math.hypot(x, y)
            if cw:
                h = -h
            if r < 0:
                h, r = -h, -r
            ca, cb = 0.5 * (x - y * h), 0.5 * (y + x * h)
        else:
            if first not in words and second not in words:
                raise GrblError(35)
            ca, cb = words.get(first, 0.0) * scale, words.get(second, 0.0) * scale
            r = math.hypot(ca, cb)
            miss = abs(r - math.hypot(x - ca, y - cb))
            if miss > 0.005 and miss > 0.001 * r:
                raise GrblError(33)
        ra, rb = -ca, -cb  # start relative to the centre
        ta, tb = x - ca, y - cb
        travel = math.atan2(ra * tb - rb * ta, ra * ta + rb * tb)
        if cw and travel >= -5e-7:
            travel -= 2 * math.pi
        elif not cw and travel <= 5e-7:
            travel += 2 * math.pi
        segments = max(1, int(abs(0.5 * travel * r) / math.sqrt(0.002 * (2 * r - 0.002))))
        out: list[tuple[float, ...]] = []
        for k in range(1, segments):
            th = travel * k / segments
            p = list(start)
            p[a] = start[a] + ca + ra * math.cos(th) - rb * math.sin(th)
            p[b] = start[b] + cb + ra * math.sin(th) + rb * math.cos(th)
            p[n] = start[n] + (target[n] - start[n]) * k / segments
            out.append(tuple(p))
        return [*out, tuple(target)]
