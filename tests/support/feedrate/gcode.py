"""Parsing a G-code text in one call and comparing points: what the G-code parser, emitter
and random-program tests under tests/feedrate/ share."""

from __future__ import annotations

import math

from agent.feedrate.gcode.blocks import Block
from agent.feedrate.gcode.parser import ModalState, parse_lines


def parse(text: str, **kwargs: object) -> list[Block]:
    return list(parse_lines(text.splitlines(keepends=True), ModalState(**kwargs)))  # type: ignore[arg-type]


def close(p: tuple[float, ...], q: tuple[float, ...], tol: float = 1e-9) -> bool:
    return math.dist(p, q) <= tol
