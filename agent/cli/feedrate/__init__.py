"""`jha feedrate ...`: the feedrate-modulation filter (Farouki & Swett 2022) and the numbers of
that paper's worked example.

  jha feedrate filter [IN.gcode|-] [-o OUT.gcode] --machine FILE          (filter.py)
  jha feedrate stream IN.gcode --config FILE --controller NAME            (stream.py)
  jha feedrate stream IN.gcode --port PATH --machine FILE [--protocol grbl|dnc]
      [--confirm-ready] [--pid-file FILE]
  jha feedrate stop (--config FILE --controller NAME | --port PATH) [--unless-succeeded]
                                                                          (stop.py)
  jha feedrate hold|resume (--pid PID | --pid-file FILE)                  (control.py)
  jha feedrate simulate --example farouki2022 [--ratio R] [--json]        (example.py)
  jha feedrate sweep [--points N] [--json] [--plot FILE.svg]              (example.py)

Exit codes follow sysexits (65 bad G-code, 74 stream failure, 75 controller not ready: nothing
sent, 69 a controller `stop` could not reach, 78 bad config or machine file).
"""

from __future__ import annotations

from typing import Any

from agent.cli.feedrate import control, example, stop, stream
from agent.cli.feedrate import filter as gcode_filter


def register(subparsers: Any) -> None:
    """Add the `feedrate` command group to the `jha` parser's subparsers."""
    group = subparsers.add_parser(
        "feedrate", help="feedrate modulation at axis reversals (Farouki & Swett 2022)"
    ).add_subparsers(dest="feedrate_command", required=True)
    for command in (gcode_filter, stream, stop, control, example):  # in this order in `--help`
        command.register(group)
