"""`jha feedrate filter [IN.gcode|-] [-o OUT.gcode] --machine FILE`: modulate the feed around
every axis reversal of a G-code program (agent.feedrate.filter); other lines pass through byte
for byte."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.errors import EX_OK


def register(group: Any) -> None:
    """Add `filter` to the `jha feedrate` command group."""
    flt = group.add_parser("filter", help="modulate a G-code program (file or stdin)")
    flt.add_argument("input", nargs="?", default="-", help="G-code file, or - for stdin")
    flt.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    flt.add_argument("--machine", required=True, type=Path, help="machine description YAML")
    flt.add_argument("--stats", action="store_true", help="print the filter's counts as JSON")
    flt.set_defaults(func=_cmd_filter)


def input_lines(name: str) -> Iterator[str]:
    from agent.feedrate.gcode.parser import read_lines

    if name == "-":
        yield from read_lines(sys.stdin.buffer)
        return
    with open(name, "rb") as f:
        yield from read_lines(f)


def _cmd_filter(args: argparse.Namespace) -> int:
    from agent.feedrate.filter.program import filter_lines
    from agent.feedrate.filter.toolpath_filter import FeedrateFilter
    from agent.feedrate.gcode.parser import encode_line
    from agent.feedrate.machine import load_machine

    machine = load_machine(args.machine)
    source = "<stdin>" if args.input == "-" else args.input
    filt = FeedrateFilter(machine, source=source)
    chunks = filter_lines(input_lines(args.input), machine, filt=filt)
    if args.output == "-":
        out = sys.stdout.buffer
        for chunk in chunks:
            out.write(encode_line(chunk))
        out.flush()
    else:
        from agent.atomic import atomic_writer

        with atomic_writer(args.output, "wb") as f:
            for chunk in chunks:
                f.write(encode_line(chunk))
    stats = filt.stats
    if args.stats:
        print(json.dumps(stats.to_dict(), indent=2), file=sys.stderr)
    else:
        print(
            f"{source}: {stats.lines_in} lines in, {stats.lines_out} out; "
            f"{stats.modulated} of {stats.turning_points} reversals modulated, "
            f"+{stats.added_time_s:.3f} s",
            file=sys.stderr,
        )
    return EX_OK
