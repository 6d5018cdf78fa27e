"""G-code dialects: what each target controller accepts, and how numbers and words are written
for it.

A `Dialect` fixes the decimals of coordinates and feeds, whether G93 inverse time exists, the
longest line, whether every line is renumbered (with '*NN' checksums), which G and M codes and
word letters the controller takes; DIALECTS names the built-in ones (whether the controller
paces a drip feed with XON/XOFF is the controller's setting, drivers/grbl/settings.py).
`validate_program_line` checks a program line's words and length against the dialect (what
`jha feedrate stream` checks before the first byte), `validate_output_line` a written line
(also its number and checksum where regenerated).

GRBL 1.1's sets are those of its parser (gnea/grbl grbl/gcode.c, the wiki's "G-code support"
list) in the default build: M7 (ENABLE_M7) and M56 (parking override) are off in config.h;
G10 takes L2 and L20 only; G61 is the only path mode (G61.1 and G64 answer error:20); of G90.1
and G91.1 only G91.1; M6 and '%' are not GRBL words (error:20 and error:1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.feedrate.gcode.blocks import PASSIVE_GCODES, Units
from agent.feedrate.gcode.lex import GcodeError, lex_line


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the target controller accepts and how numbers are written.

    `decimals` apply to coordinates in mm programs; inch programs get one more. A G94 F word
    gets `feed_digits` significant digits but at most `feed_decimals` decimals (slow feeds in a
    modulation window stay accurate in relative terms); a G93 F word gets
    `inverse_time_digits` significant digits, so every duration is exact to that precision.
    """

    name: str
    decimals: int = 4
    feed_digits: int = 5
    feed_decimals: int = 3
    inverse_time: bool = True  # the controller accepts G93
    inverse_time_digits: int = 6
    renumber: bool = False
    checksums: bool = False  # with renumber: append '*NN' to every line
    first_line_number: int = 1
    line_number_step: int = 1
    max_line_chars: int | None = None
    eol: str = "\n"
    gcodes: frozenset[int] | None = None  # tenths (G91.1 is 911); None: _GENERIC_G
    mcodes: frozenset[int] | None = None  # tenths; None: any
    letters: frozenset[str] | None = None  # word letters besides G and M; None: any
    tape_mark: bool = True  # a '%' line is taken (and ignored)
    max_tool: int | None = None  # the largest T number

    def coordinate_decimals(self, units: Units) -> int:
        return self.decimals + 1 if units is Units.INCH else self.decimals


# GRBL 1.1 gcode.c, default build (see the module docstring).
GRBL_GCODES = frozenset(
    {0, 10, 20, 30, 40, 100, 170, 180, 190, 200, 210, 280, 281, 300, 301, 382, 383, 384, 385}
    | {400, 431, 490, 530, 540, 550, 560, 570, 580, 590, 610, 800, 900, 910, 911, 920, 921}
    | {930, 940}
)
GRBL_MCODES = frozenset({0, 10, 20, 300, 30, 40, 50, 80, 90})
GRBL_LETTERS = frozenset("FIJKLNPRSTXYZ")

DIALECTS: dict[str, Dialect] = {
    "generic": Dialect("generic"),
    # GRBL 1.1: LINE_BUFFER_SIZE 80 (protocol.h) holds 79 characters; G93 supported; T up to
    # 255 (MAX_TOOL_NUMBER). Its pacing (no XON/XOFF) is the controller's: drivers/grbl.
    "grbl": Dialect(
        "grbl",
        decimals=3,
        max_line_chars=79,
        gcodes=GRBL_GCODES,
        mcodes=GRBL_MCODES,
        letters=GRBL_LETTERS,
        tape_mark=False,
        max_tool=255,
    ),
    "linuxcnc": Dialect("linuxcnc", decimals=4, feed_decimals=4, max_line_chars=255),
    # Marlin: no G93; hosts number and checksum every line; MAX_CMD_SIZE 96 with the NUL.
    "marlin": Dialect(
        "marlin",
        decimals=3,
        inverse_time=False,
        renumber=True,
        checksums=True,
        max_line_chars=95,
    ),
}


def format_number(value: float, decimals: int) -> str:
    """Fixed-point with trailing zeros stripped and no '-0'."""
    text = f"{value:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def format_significant(value: float, digits: int) -> str:
    """Fixed-point (no exponent, which G-code lacks) with `digits` significant digits."""
    if value == 0.0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return format_number(value, decimals)


def g_word(tenths: int) -> str:
    """The G word of a code given in tenths (G61.1 is 611)."""
    return f"G{tenths // 10}" if tenths % 10 == 0 else f"G{tenths / 10:g}"


def m_word(tenths: int) -> str:
    """The M word of a code given in tenths."""
    return f"M{tenths // 10}" if tenths % 10 == 0 else f"M{tenths / 10:g}"


_GENERIC_G = frozenset({0, 10, 20, 30, 40, 170, 180, 190, 200, 210, 900, 910, 940})


def dialect_named(dialect: Dialect | str) -> Dialect:
    return DIALECTS[dialect] if isinstance(dialect, str) else dialect


def validate_program_line(
    line: str, dialect: Dialect | str, line_no: int = 0, *, compact: bool = False
) -> None:
    """Raise GcodeError unless the target takes `line`'s words: its G and M codes, its word
    letters, G10's L, T's range, a '%' line, and its length (`compact`: counted without
    spaces and comments, as GRBL's line buffer counts it)."""
    d = dialect_named(dialect)
    body = line.rstrip("\r\n")
    if compact:
        body = "".join(strip_comments(body).split())
    if d.max_line_chars is not None and len(body) > d.max_line_chars:
        raise GcodeError(
            line_no, line, f"{len(body)} characters, {d.name} takes at most {d.max_line_chars}"
        )
    lx = lex_line(line, line_no)
    if lx.tape_mark:
        if not d.tape_mark:
            raise GcodeError(line_no, line, f"'%' is not a {d.name} word")
        return
    base = d.gcodes if d.gcodes is not None else _GENERIC_G | PASSIVE_GCODES | {930}
    allowed = base if d.inverse_time else base - {930}
    for g in lx.g:
        if g not in allowed:
            raise GcodeError(line_no, line, f"{g_word(g)} not accepted by {d.name}")
    for m in lx.m:
        if d.mcodes is not None and m not in d.mcodes:
            raise GcodeError(line_no, line, f"{m_word(m)} not accepted by {d.name}")
    for letter in lx.values:
        if d.letters is not None and letter not in d.letters:
            raise GcodeError(line_no, line, f"word {letter} not accepted by {d.name}")
    if d.gcodes is not None and 100 in lx.g and lx.values.get("L") not in (2.0, 20.0):
        raise GcodeError(line_no, line, f"G10 needs L2 or L20 in {d.name}")
    tool = lx.values.get("T")
    if d.max_tool is not None and tool is not None and tool > d.max_tool:
        raise GcodeError(line_no, line, f"T{tool:g} over {d.name}'s largest tool {d.max_tool}")


def strip_comments(text: str) -> str:
    """`text` without '(...)' and ';' comments (GRBL drops both before its line buffer)."""
    out, depth = [], False
    for ch in text:
        if depth:
            depth = ch != ")"
        elif ch == "(":
            depth = True
        elif ch == ";":
            break
        else:
            out.append(ch)
    return "".join(out)


def validate_output_line(line: str, dialect: Dialect | str, line_no: int = 0) -> None:
    """Raise GcodeError unless `line` is one the target dialect accepts: its length, its G
    and M codes and words (G93 only where supported), a number and checksum where they are
    regenerated."""
    d = dialect_named(dialect)
    validate_program_line(line, d, line_no)
    lx = lex_line(line, line_no)
    body = line.rstrip("\r\n")
    if d.renumber and body.strip() and lx.line_number is None:
        raise GcodeError(line_no, line, "line number N missing")
    if d.checksums and body.strip() and lx.checksum is None:
        raise GcodeError(line_no, line, "checksum missing")
