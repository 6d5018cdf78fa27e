"""G-code lexer: one line of RS-274 text -> words, line number, verified checksum.

Handles parenthesised and ';' comments, a leading block-delete '/', an 'N' line number, a
RepRap/Marlin '*NN' checksum (XOR of every byte before the '*'), '%' tape marks, and spaces or
tabs anywhere between and inside words (RS-274NGC ignores them), in either letter case.
What the words mean is the parser's business (agent.feedrate.gcode.parser).
"""

from __future__ import annotations

import re
from functools import reduce
from operator import xor
from typing import NamedTuple

from agent.errors import EX_DATAERR, AgentError

_WORD = re.compile(r"([A-Z])([+-]?(?:\d+\.?\d*|\.\d+))", re.ASCII)
_CODE = re.compile(r"(?:[A-Z][+-]?(?:\d+\.?\d*|\.\d+))*", re.ASCII)
# A leading line number in the original spelling, for renumbering: '/', 'N', digits, spaces.
_N_PREFIX = re.compile(r"^\s*(/?)\s*[Nn]\s*\d[\d \t]*")
_MAX_SHOWN = 80


class GcodeError(AgentError):
    """A G-code line cannot be used: names the line, its text and what was expected."""

    exit_code = EX_DATAERR

    def __init__(self, line_no: int, text: str, problem: str, source: str | None = None) -> None:
        shown = text.rstrip("\r\n")
        if len(shown) > _MAX_SHOWN:
            shown = shown[:_MAX_SHOWN] + "..."
        where = f"{source}:{line_no}" if source else f"line {line_no}"
        super().__init__(f"{where}: {problem} (in {shown!r})")
        self.line_no = line_no
        self.text = text
        self.problem = problem
        self.source = source


class Lexed(NamedTuple):
    """One lexed line. G and M codes are kept as integer tenths (G61.1 -> 611, G1 -> 10)."""

    g: tuple[int, ...]
    m: tuple[int, ...]
    values: dict[str, float]  # every other letter, at most once
    line_number: int | None
    checksum: int | None
    block_delete: bool
    tape_mark: bool  # a '%' line


# 1e9 mm is a thousand kilometres: no axis, feed, or dwell of a real program comes near it, and
# squares and sums of such values stay far from float overflow.
MAX_VALUE = 1e9
# A number longer than any real controller reads would overflow to inf (or hit Python's
# int-size limit) and poison every length and time computed from it.
MAX_NUMBER_CHARS = 32


def number_problem(letter: str, number: str) -> str | None:
    """What is wrong with the number of word `letter` (already matched by the lexer's number
    grammar, sign included) under the limits every reader of a line applies, or None.

    The one rule for the lexer and for the filter's fast path (agent.feedrate.filter.fast):
    at most MAX_NUMBER_CHARS characters, and for words other than G, M and N a magnitude of at
    most MAX_VALUE."""
    if len(number) > MAX_NUMBER_CHARS:
        return (
            f"number of word {letter} has {len(number)} characters, expected at most "
            f"{MAX_NUMBER_CHARS}"
        )
    if letter != "G" and letter != "M" and letter != "N" and not abs(float(number)) <= MAX_VALUE:
        return f"value of word {letter} is {number}, expected magnitude <= {MAX_VALUE:g}"
    return None


def checksum(text: str) -> int:
    """RepRap/Marlin checksum: XOR of all bytes of `text` (the line up to, not including '*')."""
    return reduce(xor, text.encode("utf-8", "surrogateescape"), 0)


def split_line(line: str) -> tuple[str, int, str | None, str | None]:
    """Split a line (no terminator) into (code without comments, index of '*' or -1, checksum
    digits or None, problem or None). The code keeps its original spacing and case."""
    if "(" not in line and ")" not in line:
        semi = line.find(";")
        head = line if semi < 0 else line[:semi]
        star = head.find("*")
        if star < 0:
            return head, -1, None, None
        return head[:star], star, head[star + 1 :], None
    pieces: list[str] = []
    in_comment = False
    start = 0
    for i, ch in enumerate(line):
        if in_comment:
            if ch == ")":
                in_comment = False
                start = i + 1
        elif ch == "(":
            pieces.append(line[start:i])
            in_comment = True
        elif ch == ")":
            return "", -1, None, "')' without '('"
        elif ch == ";":
            pieces.append(line[start:i])
            return "".join(pieces), -1, None, None
        elif ch == "*":
            pieces.append(line[start:i])
            tail = line[i + 1 :]
            semi = tail.find(";")
            digits = tail if semi < 0 else tail[:semi]
            if "(" in digits or ")" in digits:
                return "", -1, None, "comment after the checksum"
            return "".join(pieces), i, digits, None
    if in_comment:
        return "", -1, None, "'(' comment not closed"
    pieces.append(line[start:])
    return "".join(pieces), -1, None, None


def lex_line(text: str, line_no: int, source: str | None = None) -> Lexed:
    """Lex one line (its terminator, if any, is ignored). Raises GcodeError."""
    line = text.rstrip("\r\n")
    given: int | None = None
    if "(" in line or ")" in line or ";" in line or "*" in line:
        code, star, digits, problem = split_line(line)
        if problem is not None:
            raise GcodeError(line_no, text, problem, source)
        if digits is not None:  # split_line found a '*' at `star`
            digits = digits.strip()
            if not digits.isdigit() or not digits.isascii():
                raise GcodeError(line_no, text, f"checksum '*{digits}' is not a number", source)
            given = int(digits)
            expected = checksum(line[:star])
            if given != expected:
                raise GcodeError(
                    line_no, text, f"bad checksum *{given}, expected *{expected}", source
                )
    else:
        code = line
    if not code.isascii():
        raise GcodeError(line_no, text, "non-ASCII character outside a comment", source)
    code = "".join(code.split()).upper()
    block_delete = code[:1] == "/"
    if block_delete:
        code = code[1:]
    if code[:1] == "%":
        if code != "%":
            raise GcodeError(line_no, text, "text after the '%' tape mark", source)
        return Lexed((), (), {}, None, given, block_delete, True)
    if _CODE.fullmatch(code) is None:
        raise GcodeError(line_no, text, _describe_bad_code(code), source)
    g: list[int] = []
    m: list[int] = []
    values: dict[str, float] = {}
    line_number: int | None = None
    first = True
    for letter, number in _WORD.findall(code):
        problem = number_problem(letter, number)
        if problem is not None:
            raise GcodeError(line_no, text, problem, source)
        if letter == "G" or letter == "M":
            if number.isdigit():
                code_value = int(number) * 10
            else:
                tenths = float(number) * 10.0
                code_value = round(tenths)
                if abs(tenths - code_value) > 1e-6 or code_value < 0:
                    raise GcodeError(line_no, text, f"bad code {letter}{number}", source)
            (g if letter == "G" else m).append(code_value)
        elif letter == "N":
            if not first:
                raise GcodeError(line_no, text, "line number N must start the line", source)
            if not number.isdigit():
                raise GcodeError(line_no, text, f"line number N{number} is not an integer", source)
            line_number = int(number)
        elif letter in values:
            raise GcodeError(line_no, text, f"word {letter} given twice", source)
        else:
            values[letter] = float(number)
        first = False
    return Lexed(tuple(g), tuple(m), values, line_number, given, block_delete, False)


def _describe_bad_code(code: str) -> str:
    pos = 0
    while True:
        match = _WORD.match(code, pos)
        if match is None:
            break
        pos = match.end()
    rest = code[pos:]
    if rest[:1] == "$":
        # GRBL's own console commands: people paste `$110=3000` or `$H` into a program.
        return (
            f"'{rest[:12]}' is a GRBL system command or setting ($$, $H, $X, $<n>=<value>), not "
            "G-code: send settings to the controller from a terminal (e.g. `$110=3000`) before "
            "streaming, never inside the program"
        )
    if rest[:1] == "O" or code[:1] == "O":
        # O200 SUB, O<NAME> CALL, O100 REPEAT [8]: the interpreter's own program logic.
        return (
            "O-word program logic (o<name> sub, call, if, while, repeat) is the controller "
            "interpreter's, which jha does not run: post the program from the CAM without "
            "subroutines or loops"
        )
    if rest[:1] in ("#", "[") or "#" in rest or "[" in rest:
        return (
            f"parameters and expressions ({rest[:12]!r}: #1=..., #<name>, [...]) are the "
            "controller interpreter's, which jha does not evaluate: post the program with "
            "plain numbers"
        )
    if rest[:1].isalpha():
        return f"expected a number after '{rest[0]}'"
    if rest[:1] == "/":
        return "block delete '/' must start the line"
    if rest[:1] == "*":
        return "second '*' in the line"
    return f"expected a letter and a number at {rest[:12]!r}"


def strip_number_and_checksum(text: str) -> str:
    """The line's code without its N word, checksum, comments and terminator (original case
    and spacing otherwise); '/' is kept. Used when line numbers are regenerated."""
    code, _, _, problem = split_line(text.rstrip("\r\n"))
    if problem is not None:
        raise ValueError(problem)
    match = _N_PREFIX.match(code)
    if match is not None:
        code = match.group(1) + code[match.end() :]
    return code.strip()


def number_and_checksum(code: str, line_number: int | None, with_checksum: bool) -> str:
    """`code` prefixed with 'N<line_number> ' and suffixed with '*<checksum>' as asked."""
    line = code if line_number is None else f"N{line_number} {code}".rstrip()
    return f"{line}*{checksum(line)}" if with_checksum else line
