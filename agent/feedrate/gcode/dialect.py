"""G-code dialects: what each target controller accepts, and how numbers and words are written
for it.

A `Dialect` fixes the decimals of coordinates and feeds, whether G93 inverse time exists, the
longest line, and whether every line is renumbered (with '*NN' checksums); DIALECTS names the
built-in ones. `validate_output_line` checks a written line against its dialect.
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

    def coordinate_decimals(self, units: Units) -> int:
        return self.decimals + 1 if units is Units.INCH else self.decimals


DIALECTS: dict[str, Dialect] = {
    "generic": Dialect("generic"),
    # GRBL 1.1: LINE_BUFFER_SIZE 80 (protocol.h) holds 79 characters; G93 supported.
    "grbl": Dialect("grbl", decimals=3, max_line_chars=79),
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


_DIALECT_G = frozenset({0, 10, 20, 30, 40, 170, 180, 190, 200, 210, 900, 910, 940})


def validate_output_line(line: str, dialect: Dialect | str, line_no: int = 0) -> None:
    """Raise GcodeError unless `line` is one the target dialect accepts: its length, its G
    codes (G93 only where supported), a number and checksum where they are regenerated."""
    d = DIALECTS[dialect] if isinstance(dialect, str) else dialect
    body = line.rstrip("\r\n")
    if d.max_line_chars is not None and len(body) > d.max_line_chars:
        raise GcodeError(line_no, line, f"longer than {d.max_line_chars} characters")
    lx = lex_line(line, line_no)
    allowed = _DIALECT_G | ({930} if d.inverse_time else set())
    for g in lx.g:
        if g not in allowed and g not in PASSIVE_GCODES:
            raise GcodeError(line_no, line, f"{g_word(g)} not accepted by {d.name}")
    if d.renumber and body.strip() and lx.line_number is None:
        raise GcodeError(line_no, line, "line number N missing")
    if d.checksums and body.strip() and lx.checksum is None:
        raise GcodeError(line_no, line, "checksum missing")
