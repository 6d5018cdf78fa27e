"""G-code output: replacement segments and pass-through lines, in a dialect of
agent.feedrate.gcode.dialect.

A streaming filter writes every line it leaves alone with `passthrough(block)` and every block it
modulates with `replace(block, points, feeds_mm_s=... | durations_s=...)`: short G1 segments,
each with its own F, or G93 inverse-time segments whose durations are exact. The emitter keeps
the program's own modal state intact around replaced blocks:

- the replaced block's non-motion words (G20/G21, G90/G91, G17-G19, G93/G94, G4, S, T, M) are
  written on a line before the segments, program stops (M0, M1, M2, M30, M60) after them;
- before the next pass-through line it restores what the segments changed: G94 after its own
  G93, the program's modal F after per-segment F words, G0 if the program was in rapid mode;
  a program in modal G2/G3 gets the motion word written into its next motion line that relied
  on it (a bare "G2" is not valid everywhere);
- the rounding of written coordinates (G91 increments, and absolute end points before a
  switch to G91) is carried into the next replaced increment, so the controller never drifts
  from the program by more than half a unit of the last decimal.

Line numbers and checksums are left as they are, or (`Dialect.renumber`) regenerated on every
output line: N1, N2, ... with '*NN' when `Dialect.checksums`; comments are then dropped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence

from agent.feedrate.gcode.blocks import (
    PLANE_GCODE,
    PLANE_OFFSETS,
    Block,
    DistanceMode,
    FeedMode,
    Modal,
    Motion,
    Units,
)
from agent.feedrate.gcode.dialect import (
    DIALECTS,
    Dialect,
    format_number,
    format_significant,
    g_word,
    m_word,
)
from agent.feedrate.gcode.lex import (
    checksum,
    lex_line,
    split_line,
    strip_number_and_checksum,
)
from agent.feedrate.geometry.primitives import Vec3

# Below this a difference between program and controller is float noise, not a rounding owed.
_EXACT_MM = 1e-9
_STOP_M = frozenset({0, 10, 20, 300, 600})
_MOTION_TENTHS = frozenset({0, 10, 20, 30})
_PREFIX = re.compile(r"^\s*/?\s*(?:[Nn]\s*\d+\s*)?")
_DIGITS = re.compile(r"^\s*\d*")
# A line of nothing but G0/G1, X, Y, Z and F words (most CAM output): it has no other words to
# keep when it is replaced, which saves lexing it again (agent.feedrate.filter.fast's pattern,
# less strict about numbers: only the letters matter here).
_PLAIN_MOVE = re.compile(
    r"(?:G0?[01] ?)?(?:X[-+]?[\d.]+ ?)?(?:Y[-+]?[\d.]+ ?)?(?:Z[-+]?[\d.]+ ?)?(?:F[\d.]+)?\r?\n?",
    re.ASCII,
)


def insert_motion_word(text: str, motion: Motion) -> str:
    """`text` with its modal motion made explicit ('G2 ' after any '/' and N word); a checksum
    on the line is recomputed."""
    body = text.rstrip("\r\n")
    term = text[len(body) :]
    _, star, _, _ = split_line(body)
    at = _PREFIX.match(body).end()  # type: ignore[union-attr]
    word = f"G{motion.value} "
    if star < 0:
        return body[:at] + word + body[at:] + term
    head = (body[:at] + word + body[at:star]).rstrip()
    tail = body[star + 1 :]
    tail = tail[_DIGITS.match(tail).end() :]  # type: ignore[union-attr]
    return f"{head}*{checksum(head)}{tail}{term}"


class GcodeEmitter:
    """Writes the output program line by line (see the module docstring)."""

    def __init__(self, dialect: Dialect | str = "generic", *, inverse_time: bool = False) -> None:
        self.dialect = DIALECTS[dialect] if isinstance(dialect, str) else dialect
        if inverse_time and not self.dialect.inverse_time:
            raise ValueError(f"dialect {self.dialect.name} has no G93 inverse-time mode")
        self.inverse_time = inverse_time
        self._n = self.dialect.first_line_number
        self._residual_mm = [0.0, 0.0, 0.0]
        self._carry = False  # some G91 rounding is being carried
        self._expected: Modal | None = None
        self._in_g93 = False
        self._pending_motion: Motion | None = None

    # -- output lines ------------------------------------------------------------------------

    def _finish(self, code: str) -> str:
        d = self.dialect
        if not d.renumber:
            return code + d.eol
        prefix = ""
        if code.startswith("/"):
            prefix, code = "/", code[1:].lstrip()
        line = f"{prefix}N{self._n} {code}".rstrip()
        self._n += d.line_number_step
        if d.checksums:
            line = f"{line}*{checksum(line)}"
        return line + d.eol

    def passthrough(self, block: Block) -> str:
        """The block's line as the output needs it: byte-identical unless line numbers are
        regenerated or a modal motion word must be made explicit; preceded by the lines that
        restore the modal state after replaced blocks."""
        text = block.text
        if self._expected is None and self._pending_motion is None and not self._carry:
            if not self.dialect.renumber:
                return text
            out = ""
        else:
            out = self._restore(self._expected) if self._expected is not None else ""
            if self._pending_motion is not None:
                if block.explicit_motion or block.modal.motion is not self._pending_motion:
                    self._pending_motion = None
                elif block.motion is not None:
                    text = insert_motion_word(text, self._pending_motion)
                    self._pending_motion = None
            if self._carry and block.motion is not None:
                self._absolute_move(block)
            if not self.dialect.renumber:
                return out + text
        code = strip_number_and_checksum(text)
        if block.skipped and "".join(code.split()).lstrip("/") == "%":
            return out  # a '%' tape mark (block-deleted or not) has no place in a numbered stream
        return out + (self._finish(code) if code else "")

    def _absolute_move(self, block: Block) -> None:
        # An absolute move puts the controller exactly where the program says on the axes it
        # names, which clears the G91 rounding carried on those axes.
        if block.modal.distance is not DistanceMode.ABSOLUTE:
            return
        values = lex_line(block.text, block.line_no).values
        for i, letter in enumerate("XYZ"):
            if letter in values:
                self._residual_mm[i] = 0.0
        self._carry = any(r != 0.0 for r in self._residual_mm)

    def _restore(self, exp: Modal) -> str:
        self._expected = None
        words: list[str] = []
        if exp.feed_mode is FeedMode.UNITS_PER_MIN:
            if self._in_g93:
                words.append("G94")
                self._in_g93 = False
            if exp.feed_mm_s is not None:
                words.append("F" + self._feed_word(exp.feed_mm_s, exp.units))
        if exp.motion is Motion.RAPID:
            words.append("G0")
        elif exp.motion in (Motion.CW, Motion.CCW):
            self._pending_motion = exp.motion
        return self._finish(" ".join(words)) if words else ""

    def flush(self) -> str:
        """Lines still owed at the end of the stream (the restored modal state)."""
        return self._restore(self._expected) if self._expected is not None else ""

    def _feed_word(self, feed_mm_s: float, units: Units) -> str:
        value = feed_mm_s * 60.0 / units.mm_per_unit
        d = self.dialect
        value = max(value, 10.0 ** (-d.feed_decimals))
        decimals = min(d.feed_decimals, max(0, d.feed_digits - 1 - math.floor(math.log10(value))))
        return format_number(value, decimals)

    def _split_words(self, block: Block) -> tuple[str, str, bool]:
        """Non-motion words of a replaced block: (before the segments, after them, whether
        the block sets the feed mode itself)."""
        if _PLAIN_MOVE.fullmatch(block.text):
            return "", "", False
        lx = lex_line(block.text, block.line_no)
        pre: list[str] = []
        post: list[str] = []
        sets_feed_mode = False
        for g in lx.g:
            if g in _MOTION_TENTHS:
                continue
            sets_feed_mode = sets_feed_mode or g in (930, 940)
            pre.append(g_word(g))
            if g == 40:
                pre.append("P" + format_number(lx.values["P"], 4))
        if "S" in lx.values:
            pre.append("S" + format_number(lx.values["S"], 3))
        if "T" in lx.values:
            pre.append("T" + format_number(lx.values["T"], 0))
        for m in lx.m:
            (post if m in _STOP_M else pre).append(m_word(m))
        return " ".join(pre), " ".join(post), sets_feed_mode

    # -- replacement segments ------------------------------------------------------------------

    def replace(
        self,
        block: Block,
        points_mm: Sequence[Vec3],
        *,
        feeds_mm_s: Sequence[float] | None = None,
        durations_s: Sequence[float] | None = None,
    ) -> str:
        """Lines that replace a motion block by straight segments through `points_mm` (the
        block's start excluded; the last point is the block's end). Each segment gets its feed
        (mm/s) or its duration (s); a zero-length segment with a duration becomes a G4 dwell.
        G93 is used when the emitter was made with inverse_time=True or the program is in G93.
        """
        if block.motion is None:
            raise ValueError(f"line {block.line_no} makes no move to replace")
        if feeds_mm_s is not None and durations_s is None:
            rates: Sequence[float] = feeds_mm_s
        elif durations_s is not None and feeds_mm_s is None:
            rates = durations_s
        else:
            raise ValueError("give exactly one of feeds_mm_s and durations_s")
        if len(rates) != len(points_mm) or not points_mm:
            raise ValueError("need one feed or duration per point, and at least one point")
        end = block.end_mm
        if math.dist(points_mm[-1], end) > 1e-6 * (1.0 + max(abs(c) for c in end)):
            raise ValueError(f"last point {points_mm[-1]} is not the block's end {end}")
        modal = block.modal
        pre, post, sets_feed_mode = self._split_words(block)
        if sets_feed_mode:
            self._in_g93 = False
        out: list[str] = []
        if pre:
            out.append(self._finish(pre))
        program_g93 = modal.feed_mode is FeedMode.INVERSE_TIME
        inverse = program_g93 or self.inverse_time
        prev = block.start_mm
        scale = modal.units.mm_per_unit
        dec = self.dialect.coordinate_decimals(modal.units)
        absolute = modal.distance is DistanceMode.ABSOLUTE
        # Absolute: each point's written coordinates, rounded once and compared with the last.
        prev_r = (
            (round(prev[0] / scale, dec), round(prev[1] / scale, dec), round(prev[2] / scale, dec))
            if absolute
            else prev
        )
        last = len(points_mm) - 1
        for i, target in enumerate(points_mm):
            p = end if i == last else target
            rate = float(rates[i])
            if not (rate > 0.0 and math.isfinite(rate)):
                raise ValueError(f"feed/duration must be finite and > 0, got {rate!r}")
            length = math.dist(prev, p)
            if absolute:
                coords, prev_r = self._absolute_coords(prev_r, prev, p, scale, dec)
            else:
                coords = self._incremental_coords(prev, p, scale, dec)
            if not coords:
                # The increment went into the G91 carry, so `prev` must move on with it: left
                # behind, the next segment would measure from it and write that part twice.
                prev = p
                if durations_s is not None:
                    out.append(self._finish("G4 P" + format_significant(rate, 6)))
                continue
            if inverse:
                duration = rate if durations_s is not None else length / rate
                word = ""
                if not program_g93 and not self._in_g93:
                    word, self._in_g93 = "G93 ", True
                f = format_significant(60.0 / duration, self.dialect.inverse_time_digits)
                out.append(self._finish(f"{word}G1 {coords} F{f}"))
            else:
                feed = rate if feeds_mm_s is not None else length / rate
                out.append(self._finish(f"G1 {coords} F{self._feed_word(feed, modal.units)}"))
            prev = p
        if post:
            out.append(self._finish(post))
        self._expected = modal
        return "".join(out)

    def _absolute_coords(
        self, prev_r: Vec3, prev: Vec3, p: Vec3, scale: float, dec: int
    ) -> tuple[str, Vec3]:
        """The words moving the axes whose written coordinate changes, and p as written."""
        written = (round(p[0] / scale, dec), round(p[1] / scale, dec), round(p[2] / scale, dec))
        parts: list[str] = []
        res = self._residual_mm
        for i, letter in enumerate("XYZ"):
            if written[i] != prev_r[i]:
                parts.append(letter + format_number(written[i], dec))
                # The controller now stands at the written coordinate: what it lacks of the
                # program's is that coordinate's rounding, owed to a later G91 increment.
                owed = p[i] - written[i] * scale
                res[i] = owed if abs(owed) > _EXACT_MM else 0.0
            else:
                # The axis is not written, so the controller stays where it was while the
                # program moves on by less than the rounding: that goes into what is owed.
                res[i] += p[i] - prev[i]
                if abs(res[i]) <= _EXACT_MM:
                    res[i] = 0.0
        self._carry = res[0] != 0.0 or res[1] != 0.0 or res[2] != 0.0
        return " ".join(parts), written

    def _incremental_coords(self, prev: Vec3, p: Vec3, scale: float, dec: int) -> str:
        parts: list[str] = []
        res = self._residual_mm
        for i, letter in enumerate("XYZ"):
            # What rounding left out of the earlier increments goes into this one.
            want = (p[i] - prev[i] + res[i]) / scale
            written = round(want, dec)
            res[i] = (want - written) * scale
            if written != 0.0:
                parts.append(letter + format_number(written, dec))
        self._carry = any(r != 0.0 for r in res)
        return " ".join(parts)


def canonical_lines(blocks: Iterable[Block], dialect: Dialect | str = "generic") -> Iterator[str]:
    """Every move of a parsed program rewritten as absolute mm G94 lines (arcs with I/J/K),
    for round trips and for controllers that want one plain form. A zero-length G93 move
    becomes the G4 dwell it amounts to."""
    d = DIALECTS[dialect] if isinstance(dialect, str) else dialect
    dec = d.decimals
    yield "G17 G21 G90 G94" + d.eol
    plane_now = 17
    for b in blocks:
        if b.motion is None:
            continue
        if b.feed_mm_s == 0.0 and b.inverse_time_f is not None:
            # A zero-length G93 move only takes time: G94 has no such move, G4 says the same.
            yield f"G4 P{format_significant(60.0 / b.inverse_time_f, 6)}{d.eol}"
            continue
        words: list[str] = []
        if b.arc is not None:
            plane = b.modal.plane
            if PLANE_GCODE[plane] != plane_now:
                plane_now = PLANE_GCODE[plane]
                words.append(f"G{plane_now}")
        words.append(f"G{b.motion.value}")
        words += [f"{L}{format_number(v, dec)}" for L, v in zip("XYZ", b.end_mm, strict=True)]
        if b.arc is not None:
            ia, ib, _ = b.arc.plane.value
            first, second = PLANE_OFFSETS[b.arc.plane]
            words.append(first + format_number(b.arc.centre[ia] - b.start_mm[ia], dec))
            words.append(second + format_number(b.arc.centre[ib] - b.start_mm[ib], dec))
        if b.feed_mm_s is not None:
            words.append("F" + format_significant(b.feed_mm_s * 60.0, 9))
        yield " ".join(words) + d.eol
